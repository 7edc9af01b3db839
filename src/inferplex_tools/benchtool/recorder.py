"""Recording ``/metrics`` scrapes to JSONL while a bench runs (``--record-metrics FILE``),
for ``inferplex heatmap``.

A background thread scrapes every ``interval`` seconds and appends (the file is never
truncated here: several servers of one run go to the same file) one line per scrape:
``{"time": <unix seconds>, "samples": [[name, {labels}, value], ...]}``. Scrapes that fail
(the server restarting) are skipped and counted, never fatal to the bench.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from inferplex_tools.benchtool.promtext import parse


class MetricsRecorder:
    """Use as a context manager around the load: ``with MetricsRecorder(url, path): ...``."""

    def __init__(self, metrics_url: str, path: Path, interval: float = 1.0) -> None:
        address = metrics_url.split("://", 1)[-1].rstrip("/")
        self.url = address if address.endswith("/metrics") else f"{address}/metrics"
        self.path = path
        self.interval = interval
        self.scrapes = 0
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="metrics-recorder", daemon=True)

    def __enter__(self) -> MetricsRecorder:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        self.scrape()  # the last one, so the file covers the whole run

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.scrape()
            self._stop.wait(self.interval)

    def scrape(self) -> None:
        """Append one scrape to the file (counted as a failure when it cannot be read)."""
        try:
            with urllib.request.urlopen(f"http://{self.url}", timeout=5) as response:
                text = response.read().decode()
            samples = parse(text)
        except (urllib.error.URLError, OSError, ValueError):
            self.failures += 1
            return
        line = json.dumps({"time": time.time(), "samples": samples}, separators=(",", ":"))
        with self.path.open("a") as handle:
            handle.write(line + "\n")
        self.scrapes += 1
