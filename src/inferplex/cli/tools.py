"""The tools' commands (``bench``, ``tune``, ``optimize``, ``heatmap``), imported only when one
is asked for.

The tools live in their own top-level package, ``inferplex_tools``, in the same distribution
(docs/architecture.md, "The tools"): ``inferplex serve`` and ``import inferplex.server`` load
none of them, so a serving process holds no benchmark client, load generator or quantiser.
These loaders are the server package's only imports of the tools (an import-linter contract
in pyproject.toml keeps it so).
"""

from __future__ import annotations

from collections.abc import Callable

import click


def _bench() -> click.Command:
    from inferplex_tools.benchtool.command import bench

    return bench


def _tune() -> click.Command:
    from inferplex_tools.tuner.command import tune

    return tune


def _optimize() -> click.Command:
    from inferplex_tools.optimize.command import optimize

    return optimize


def _heatmap() -> click.Command:
    from inferplex_tools.heatmap.command import heatmap

    return heatmap


#: command name -> the loader of its click command
TOOLS: dict[str, Callable[[], click.Command]] = {
    "bench": _bench,
    "tune": _tune,
    "optimize": _optimize,
    "heatmap": _heatmap,
}


class ToolsGroup(click.Group):
    """A command group that also offers the tools' commands, importing one when it is named
    (or when ``--help`` lists the commands with their help)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *TOOLS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        loader = TOOLS.get(cmd_name)
        if loader is not None:
            return loader()
        return super().get_command(ctx, cmd_name)
