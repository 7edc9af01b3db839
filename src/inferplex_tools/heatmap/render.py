"""Drawing the heat maps into one PNG with matplotlib's Agg canvas (no display)."""

from __future__ import annotations

from pathlib import Path

from inferplex_tools.heatmap.series import HeatmapError, Series, shares


def render(series: Series, path: Path, title: str = "resource use per model") -> None:
    """One heat map per panel, models as rows, time as columns; each row label carries the
    model's share of the panel's total over the whole recording."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise HeatmapError(
            "inferplex heatmap needs matplotlib: pip install 'inferplex[bench]'"
        ) from None
    rows = len(series.panels[0].models)
    height = 1.2 + len(series.panels) * (0.9 + 0.35 * rows)
    figure = Figure(figsize=(10, height), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes_list = figure.subplots(len(series.panels), 1, squeeze=False, sharex=True)[:, 0]
    for axes, panel in zip(axes_list, series.panels, strict=True):
        share = shares(panel)
        mesh = axes.pcolormesh(
            series.edges,
            range(len(panel.models) + 1),
            panel.values,
            cmap="viridis",
            shading="flat",
        )
        axes.set_yticks([i + 0.5 for i in range(len(panel.models))])
        axes.set_yticklabels([f"{m} ({share[m]:.0%})" for m in panel.models], fontsize=8)
        axes.set_title(panel.title, fontsize=10)
        figure.colorbar(mesh, ax=axes, label=panel.unit)
    axes_list[-1].set_xlabel("seconds since the first scrape")
    figure.suptitle(title)
    figure.savefig(path, format="png")
