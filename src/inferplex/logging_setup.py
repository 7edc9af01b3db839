"""Log format, level and destination of the server: plain text lines (their time local, or
ISO 8601 in UTC) or one JSON object per line, to stderr or appended to a file.

JSON lines carry ``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message`` and every
field a call passes with ``extra=`` (for model state changes: ``model``, ``state``,
``previous``, ``reason``), so a log pipeline can filter on them without parsing text.
Nothing is logged per request at INFO: request-level detail goes to traces and metrics.
"""

from __future__ import annotations

import logging
import sys
import time
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

import orjson

LogFormat = Literal["plain", "json", "iso8601"]
LEVELS = ("debug", "info", "warning", "error")

PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
ISO8601_DATE = "%Y-%m-%dT%H:%M:%SZ"

#: attributes every LogRecord has; anything else on a record came from ``extra=``
_STANDARD = frozenset(
    logging.LogRecord("", 0, "", 0, "", None, None).__dict__.keys() | {"message", "asctime"}
)


class JsonFormatter(logging.Formatter):
    """One JSON object per record, with the record's ``extra`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                document[key] = value
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(document, default=str).decode()


#: the level, format and file ``configure_logging`` set last: worker processes (Python
#: models) log the same way to the same place
current: tuple[str, LogFormat, str | None] = ("info", "plain", None)


def configure_logging(
    level: str = "info",
    log_format: LogFormat = "plain",
    log_file: str | None = None,
    stream: TextIO | None = None,
) -> None:
    """Send the ``inferplex`` loggers (and everything else at WARNING and above) to
    ``log_file`` (appended to; OSError if it cannot be opened) or else ``stream`` (stderr), in
    ``log_format``; replaces handlers set up before."""
    global current
    if level.lower() not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, got {level!r}")
    handler: logging.Handler = (
        logging.FileHandler(log_file, encoding="utf-8")
        if log_file
        else logging.StreamHandler(stream or sys.stderr)
    )
    current = (level.lower(), log_format, log_file)
    handler.setFormatter(_formatter(log_format))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        if isinstance(old, logging.FileHandler):  # a file set before: ours to close
            old.close()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)  # libraries stay quiet below WARNING
    logging.getLogger("inferplex").setLevel(level.upper())


def _formatter(log_format: LogFormat) -> logging.Formatter:
    if log_format == "json":
        return JsonFormatter()
    if log_format == "iso8601":
        formatter = logging.Formatter(PLAIN_FORMAT, ISO8601_DATE)
        formatter.converter = time.gmtime
        return formatter
    return logging.Formatter(PLAIN_FORMAT)
