"""The terminal table and the CSV file of a bench run."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path

from inferplex_tools.benchtool.results import CaseResult

#: CSV columns: the case, then the client-side figures, then the server breakdown
CSV_COLUMNS = (
    "model", "version", "protocol", "mode", "level", "batch_size", "stable", "windows",
    "requests", "seconds", "throughput", "mean_ms", "min_ms", "max_ms",
    "p50_ms", "p90_ms", "p95_ms", "p99_ms", "skipped",
    "server_request_us", "queue_us", "compute_input_us", "compute_infer_us",
    "compute_output_us", "server_batch_size", "client_overhead_us",
)  # fmt: skip


def table(results: Iterable[CaseResult]) -> str:
    """One line per case: throughput, percentiles and the server's breakdown."""
    header = (
        f"{'model':16} {'ver':>3} {'protocol':11} {'load':>9} {'req/s':>9} {'p50 ms':>8} "
        f"{'p90 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'queue µs':>9} {'infer µs':>9} "
        f"{'batch':>6}  stable"
    )
    lines = [header]
    for r in results:
        load = f"c={r.level:g}" if r.mode == "concurrency" else f"{r.level:g}/s"
        server = r.server or {}
        lines.append(
            f"{r.model[:16]:16} {r.version or '-':>3} {r.protocol:11} {load:>9} "
            f"{r.throughput:>9.1f} {_ms(r.latency['p50_ms'])} {_ms(r.latency['p90_ms'])} "
            f"{_ms(r.latency['p95_ms'])} {_ms(r.latency['p99_ms'])} "
            f"{_num(server.get('queue_us'), 9)} {_num(server.get('compute_infer_us'), 9)} "
            f"{_num(server.get('batch_size'), 6)}  "
            + ("yes" if r.stable else f"NO ({r.windows} windows)")
            + (f", {r.skipped} sends skipped" if r.skipped else "")
        )
    return "\n".join(lines)


def _ms(value: float | int) -> str:
    return f"{value:>8.3f}"


def _num(value: float | int | None, width: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.4g}"


def write_csv(results: Iterable[CaseResult], path: Path) -> None:
    """One row per case with every figure (empty where the server has no statistics)."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_COLUMNS)
        for r in results:
            server = r.server or {}
            row = {
                "model": r.model,
                "version": r.version,
                "protocol": r.protocol,
                "mode": r.mode,
                "level": r.level,
                "batch_size": r.batch_size,
                "stable": r.stable,
                "windows": r.windows,
                "skipped": r.skipped,
                **{k: v for k, v in r.latency.items()},
                **{k: v for k, v in server.items() if k != "batch_size"},
                "server_batch_size": server.get("batch_size", ""),
            }
            writer.writerow([row.get(column, "") for column in CSV_COLUMNS])
