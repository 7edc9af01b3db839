"""What the stream tests share: the responses a tritonclient stream callback received."""

from __future__ import annotations

import queue
from typing import Any


class Collected:
    """What a tritonclient stream callback received."""

    def __init__(self) -> None:
        self.items: queue.Queue[tuple[Any, Any]] = queue.Queue()

    def callback(self, result: Any, error: Any) -> None:
        self.items.put((result, error))

    def take(self, count: int) -> list[tuple[Any, Any]]:
        return [self.items.get(timeout=30) for _ in range(count)]
