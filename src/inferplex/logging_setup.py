"""Log format and level of the server: plain text lines or one JSON object per line.

JSON lines carry ``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message`` and every
field a call passes with ``extra=`` (for model state changes: ``model``, ``state``,
``versions``, ``reason``), so a log pipeline can filter on them without parsing text.
Nothing is logged per request at INFO: request-level detail goes to traces and metrics.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

import orjson

LogFormat = Literal["plain", "json"]
LEVELS = ("debug", "info", "warning", "error")

PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

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


#: the level and format ``configure_logging`` set last: worker processes (Python models) log
#: the same way to the same stream
current: tuple[str, LogFormat] = ("info", "plain")


def configure_logging(
    level: str = "info", log_format: LogFormat = "plain", stream: TextIO | None = None
) -> None:
    """Send the ``inferplex`` loggers (and everything else at WARNING and above) to
    ``stream`` (stderr) in ``log_format``; replaces handlers set up before."""
    global current
    if level.lower() not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, got {level!r}")
    current = (level.lower(), log_format)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(
        JsonFormatter() if log_format == "json" else logging.Formatter(PLAIN_FORMAT)
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)  # libraries stay quiet below WARNING
    logging.getLogger("inferplex").setLevel(level.upper())
