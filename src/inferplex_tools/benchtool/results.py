"""What a bench run measured: one :class:`CaseResult` per model x protocol x level, and the
:class:`BenchReport` that holds them with the run's options and the compatibility report.
The JSON written with ``--json-out`` is :meth:`BenchReport.to_dict`; ``--compare`` reads it
back with :meth:`BenchReport.from_dict`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from inferplex_tools.benchtool import BenchError

FORMAT = "inferplex-bench/1"


@dataclass
class CaseResult:
    """One model under one load level."""

    model: str
    version: str
    protocol: str
    """``http-binary``, ``http-json`` or ``grpc``"""
    mode: str
    """``concurrency`` (closed loop) or ``rate`` (open loop, requests/s)"""
    level: float
    batch_size: int
    latency: dict[str, float | int]
    """:meth:`LatencySummary.to_dict`: requests, seconds, throughput, mean/min/max/pNN ms"""
    stable: bool
    windows: int
    server: dict[str, float | int] | None = None
    """the statistics-extension breakdown (:func:`breakdown.breakdown`), None without it"""
    skipped: int = 0
    """open loop: sends skipped because too many requests were unanswered (server saturated)"""

    @property
    def key(self) -> str:
        """What identifies the case across runs (the version is not part of it)."""
        level = f"{self.level:g}"
        return f"{self.model}/{self.protocol}/{self.mode}={level}/b{self.batch_size}"

    @property
    def throughput(self) -> float:
        return float(self.latency["throughput"])

    @property
    def inferences_per_second(self) -> float:
        return self.throughput * self.batch_size

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CaseResult:
        fields = {k: v for k, v in data.items() if k != "key"}
        return cls(**fields)


@dataclass
class BenchReport:
    """A whole run."""

    target: dict[str, Any]
    """url, protocol, the server's metadata"""
    options: dict[str, Any]
    results: list[CaseResult] = field(default_factory=list)
    compat: dict[str, Any] = field(default_factory=dict)
    started: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "started": self.started,
            "target": self.target,
            "options": self.options,
            "results": [r.to_dict() for r in self.results],
            "compat": self.compat,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchReport:
        if data.get("format") != FORMAT:
            raise BenchError(
                f"not an inferplex bench result (format {data.get('format')!r}, "
                f"expected {FORMAT!r}): write one with `inferplex bench --json-out FILE`"
            )
        return cls(
            target=data.get("target", {}),
            options=data.get("options", {}),
            results=[CaseResult.from_dict(r) for r in data.get("results", [])],
            compat=data.get("compat", {}),
            started=data.get("started", 0.0),
        )

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def read(cls, path: Path) -> BenchReport:
        try:
            return cls.from_dict(json.loads(path.read_text()))
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise BenchError(f"cannot read bench result {path}: {exc}") from None
