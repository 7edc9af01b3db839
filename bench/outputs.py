"""Where the benchmarks write their JSON documents: outside the checkout by default.

A script's ``--results-dir DIR`` wins; else ``$INFERPLEX_BENCH_RESULTS``; else
``<temp>/inferplex-bench-results`` (``tempfile.gettempdir()``). Each run writes
``<name>-<date>-<time>.json`` there and prints the path.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

#: the environment variable naming the results folder
ENV = "INFERPLEX_BENCH_RESULTS"


def add_results_option(parser: argparse.ArgumentParser) -> None:
    """The ``--results-dir`` flag (``args.results_dir``: None = the default folder)."""
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=None,
        help=f"folder for the JSON results (default: ${ENV}, else {default_dir()})",
    )


def default_dir() -> Path:
    """``$INFERPLEX_BENCH_RESULTS``, else a folder under the system's temporary folder."""
    return Path(os.environ.get(ENV) or Path(tempfile.gettempdir()) / "inferplex-bench-results")


def result_path(name: str, folder: Path | None = None) -> Path:
    """``<folder>/<name>-<date>-<time>.json`` (``folder`` None: :func:`default_dir`), with
    its folder created."""
    chosen = folder or default_dir()
    chosen.mkdir(parents=True, exist_ok=True)
    return chosen / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
