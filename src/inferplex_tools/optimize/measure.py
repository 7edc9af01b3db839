"""Side-by-side measurement of a parent model and its candidates: size, latency and throughput
(interleaved runs, medians), and agreement on an evaluation set.

The machine may be shared and noisy, so the variants are timed in alternating order within each
round (ABC, CBA, ABC, ...): anything that slows the machine for a while slows every variant
alike. A speedup is the median over rounds of the per-round ratio of medians: the two sides of
each ratio ran back to back, and one disturbed round moves the median little. The spread of the
parent's per-round medians is reported as the noise of the run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from inferplex.backends.onnxruntime import SPINNING_PARAMETER
from inferplex_tools.optimize.data import DataSet


def open_session(path: Path, threads: int = 0) -> ort.InferenceSession:
    """An ONNX Runtime CPU session as the server's backend opens one (all optimisations on,
    operators run one after another, idle intra-op threads not spinning), so the parent and its
    variants are timed as they would be served."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.add_session_config_entry(SPINNING_PARAMETER, "0")
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def model_size(path: Path) -> int:
    """Bytes on disk of an ONNX file and the external-data files next to it, if any."""
    return sum(p.stat().st_size for p in path.parent.iterdir() if p.is_file() and _belongs(p, path))


def _belongs(file: Path, model: Path) -> bool:
    return file == model or file.name.startswith(model.name + ".data")


@dataclass(frozen=True)
class Timing:
    """Per-call times of one variant at one batch size."""

    batch_size: int
    median_s: float
    p90_s: float
    calls: int
    round_medians_s: tuple[float, ...]

    @property
    def items_per_s(self) -> float:
        return self.batch_size / self.median_s

    @property
    def spread(self) -> float:
        """(max - min) / median of the per-round medians: the noise seen across rounds."""
        rounds = self.round_medians_s
        return (max(rounds) - min(rounds)) / float(np.median(rounds))


def speedup(parent: Timing, candidate: Timing) -> float:
    """How many times faster the candidate is (> 1: faster): the median over rounds of the
    parent's round median / the candidate's round median. Both were timed in the same rounds
    (``time_interleaved``), so a slow spell of the machine sits on both sides of a ratio."""
    if len(parent.round_medians_s) != len(candidate.round_medians_s):
        raise ValueError("parent and candidate were not timed in the same rounds")
    ratios = [p / c for p, c in zip(parent.round_medians_s, candidate.round_medians_s, strict=True)]
    return float(np.median(ratios))


def time_interleaved(
    runners: Mapping[str, Callable[[], object]],
    batch_size: int,
    rounds: int = 7,
    round_s: float = 0.25,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Timing]:
    """Time each runner in ``rounds`` rounds, alternating the order, about ``round_s`` seconds
    per runner and round (at least one call); every runner is warmed up first."""
    names = list(runners)
    calls: dict[str, int] = {}
    for name in names:
        runners[name]()  # first call: allocations, kernel selection
        start = clock()
        runners[name]()
        calls[name] = max(1, round(round_s / max(clock() - start, 1e-6)))
    samples: dict[str, list[list[float]]] = {name: [] for name in names}
    for index in range(rounds):
        for name in names if index % 2 == 0 else reversed(names):
            times = []
            for _ in range(calls[name]):
                start = clock()
                runners[name]()
                times.append(clock() - start)
            samples[name].append(times)
    result = {}
    for name, per_round in samples.items():
        flat = np.concatenate(per_round)
        result[name] = Timing(
            batch_size=batch_size,
            median_s=float(np.median(flat)),
            p90_s=float(np.percentile(flat, 90)),
            calls=int(flat.size),
            round_medians_s=tuple(float(np.median(r)) for r in per_round),
        )
    return result


@dataclass(frozen=True)
class Agreement:
    """How closely a candidate's outputs follow the parent's on an evaluation set."""

    output: str
    rows: int
    cosine_mean: float
    cosine_min: float
    top1_agreement: float | None
    parent_accuracy: float | None
    candidate_accuracy: float | None

    @property
    def accuracy_drop(self) -> float | None:
        """Parent accuracy minus candidate accuracy (fraction; 0.01 = one point)."""
        if self.parent_accuracy is None or self.candidate_accuracy is None:
            return None
        return self.parent_accuracy - self.candidate_accuracy


def run_all(
    session: ort.InferenceSession, data: DataSet, output: str, batch_size: int
) -> np.ndarray:
    """One output of the model over every row of the data set, in batches."""
    parts = [session.run([output], feed)[0] for feed in data.batches(batch_size)]
    return np.concatenate(parts)


def agreement(
    parent: np.ndarray, candidate: np.ndarray, output: str, labels: np.ndarray | None
) -> Agreement:
    """Cosine similarity row by row, top-1 agreement (outputs of rank >= 2: argmax over the
    last axis) and, with labels, both accuracies."""
    rows = len(parent)
    a = parent.reshape(rows, -1).astype(np.float64)
    b = candidate.reshape(rows, -1).astype(np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    # two all-zero rows are identical; one zero row against a non-zero one is not
    cosine = np.where(norms > 0, (a * b).sum(axis=1) / np.where(norms > 0, norms, 1.0), 0.0)
    cosine = np.where((norms == 0) & np.all(a == b, axis=1), 1.0, cosine)
    top1 = None
    parent_accuracy = candidate_accuracy = None
    if parent.ndim >= 2:
        parent_top = parent.reshape(rows, -1, parent.shape[-1]).argmax(-1).reshape(rows, -1)
        candidate_top = (
            candidate.reshape(rows, -1, candidate.shape[-1]).argmax(-1).reshape(rows, -1)
        )
        top1 = float(np.mean(parent_top == candidate_top))
        if labels is not None:
            parent_accuracy = float(np.mean(parent_top[:, 0] == labels))
            candidate_accuracy = float(np.mean(candidate_top[:, 0] == labels))
    return Agreement(
        output=output,
        rows=rows,
        cosine_mean=float(cosine.mean()),
        cosine_min=float(cosine.min()),
        top1_agreement=top1,
        parent_accuracy=parent_accuracy,
        candidate_accuracy=candidate_accuracy,
    )


def machine() -> dict[str, object]:
    """What the figures were measured on."""
    load = os.getloadavg()
    return {
        "cpus": os.cpu_count(),
        "load_average_1m": round(load[0], 2),
        "onnxruntime": ort.__version__,
        "cpu": _cpu_name(),
    }


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"
