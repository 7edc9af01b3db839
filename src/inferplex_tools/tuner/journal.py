"""The resumable results file: one JSON line per measured candidate and rung.

A tune run appends each measurement as soon as it is made; a run given the same file
(``--results FILE``) reads it first and skips every (model, candidate, rung, workload)
already there, so an interrupted search continues where it stopped. A changed workload
(concurrency, window, protocol) does not reuse old lines: they measured something else.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferplex_tools.benchtool import BenchError


@dataclass
class Journal:
    """Lines already measured, and the file new ones go to (None: keep them in memory)."""

    path: Path | None
    workload: dict[str, Any]
    _lines: dict[tuple[str, str, int], dict[str, Any]]
    resumed: int = 0
    """lines of this workload found in the file when it was opened"""

    @classmethod
    def open(cls, path: Path | None, workload: dict[str, Any]) -> Journal:
        lines: dict[tuple[str, str, int], dict[str, Any]] = {}
        if path is not None and path.exists():
            for number, text in enumerate(path.read_text().splitlines(), 1):
                if not text.strip():
                    continue
                try:
                    line = json.loads(text)
                    key = (line["model"], line["candidate_key"], int(line["rung"]))
                except (ValueError, KeyError, TypeError) as exc:
                    raise BenchError(f"{path}:{number}: not a tune results line: {exc}") from None
                if line.get("workload") == workload:
                    lines[key] = line
        return cls(path, workload, lines, len(lines))

    def get(self, model: str, candidate_key: str, rung: int) -> dict[str, Any] | None:
        return self._lines.get((model, candidate_key, rung))

    def add(self, line: dict[str, Any]) -> None:
        """Record a measurement (``model``, ``candidate_key``, ``rung`` and its figures)."""
        line = {**line, "workload": self.workload}
        self._lines[(line["model"], line["candidate_key"], int(line["rung"]))] = line
        if self.path is not None:
            with self.path.open("a") as handle:
                handle.write(json.dumps(line) + "\n")
