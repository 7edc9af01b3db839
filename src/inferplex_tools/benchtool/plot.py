"""The latency-vs-throughput plot (PNG) of a bench run, drawn with matplotlib's Agg canvas
(no display, no global pyplot state)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from inferplex_tools.benchtool import BenchError
from inferplex_tools.benchtool.results import CaseResult


def plot(results: Iterable[CaseResult], path: Path, title: str = "inferplex bench") -> None:
    """One line per model x protocol x mode through its levels: p50 (solid) and p99 (dashed)
    latency against throughput."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise BenchError("--plot needs matplotlib: pip install 'inferplex[bench]'") from None
    series: dict[str, list[CaseResult]] = {}
    for result in results:
        series.setdefault(f"{result.model} {result.protocol} {result.mode}", []).append(result)
    if not series:
        raise BenchError("--plot: no results to plot (every model failed?)")
    figure = Figure(figsize=(8, 5), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for label, cases in series.items():
        cases.sort(key=lambda r: r.throughput)
        x = [r.throughput for r in cases]
        (line,) = axes.plot(
            x, [r.latency["p50_ms"] for r in cases], marker="o", label=f"{label} p50"
        )
        axes.plot(
            x,
            [r.latency["p99_ms"] for r in cases],
            marker="x",
            linestyle="--",
            color=line.get_color(),
            label=f"{label} p99",
        )
        for r in cases:
            tag = f"c={r.level:g}" if r.mode == "concurrency" else f"{r.level:g}/s"
            axes.annotate(tag, (r.throughput, r.latency["p50_ms"]), fontsize=7)
    axes.set_xlabel("throughput (requests/s)")
    axes.set_ylabel("latency (ms)")
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, format="png")
