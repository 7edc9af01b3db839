"""A one-line progress bar on a terminal (nothing when the output is not a TTY)."""

from __future__ import annotations

import sys
from typing import TextIO


class Progress:
    """``update(done, note)`` redraws ``label [#####.....] done/total note`` in place."""

    WIDTH = 24

    def __init__(
        self, total: int, label: str = "", stream: TextIO | None = None, enabled: bool | None = None
    ) -> None:
        self.total = max(total, 1)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.done = 0
        self._drawn = 0

    def update(self, done: int | None = None, note: str = "") -> None:
        """Set the steps done (default: one more) and redraw with ``note``."""
        self.done = min(self.done + 1 if done is None else done, self.total)
        if not self.enabled:
            return
        filled = self.WIDTH * self.done // self.total
        bar = "#" * filled + "." * (self.WIDTH - filled)
        text = f"{self.label} [{bar}] {self.done}/{self.total} {note}".rstrip()
        padding = " " * max(self._drawn - len(text), 0)
        self.stream.write(f"\r{text}{padding}")
        self.stream.flush()
        self._drawn = len(text)

    def close(self) -> None:
        """Clear the line so the next output starts clean."""
        if self.enabled and self._drawn:
            self.stream.write("\r" + " " * self._drawn + "\r")
            self.stream.flush()
        self._drawn = 0
