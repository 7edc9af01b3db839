"""The ``inferplex heatmap`` command."""

from __future__ import annotations

import sys
from pathlib import Path

import click


@click.command()
@click.option(
    "--input",
    "source",
    required=True,
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="JSONL of /metrics scrapes (inferplex bench --record-metrics FILE).",
)
@click.option("--out", required=True, type=click.Path(path_type=Path), help="PNG to write.")
@click.option("--title", default="resource use per model", show_default=True)
def heatmap(source: Path, out: Path, title: str) -> None:
    """Render resource use per model over time (compute, requests, memory) as a PNG."""
    from inferplex_tools.heatmap.render import render
    from inferplex_tools.heatmap.series import HeatmapError, build, read_scrapes

    try:
        series = build(read_scrapes(source))
        render(series, out, title)
    except HeatmapError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    models = len(series.panels[0].models)
    click.echo(
        f"wrote {out}: {len(series.panels)} panels, {models} models, "
        f"{len(series.edges) - 1} intervals over {series.edges[-1]:.1f} s"
    )
