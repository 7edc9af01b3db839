"""Where the bench scripts write their JSON: --results-dir, else $INFERPLEX_BENCH_RESULTS,
else a temporary folder, never the checkout."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import pytest

from bench.outputs import ENV, add_results_option, default_dir, result_path

CHECKOUT = Path(__file__).resolve().parents[2]


def test_the_default_folder_is_outside_the_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert default_dir() == Path(tempfile.gettempdir()) / "inferplex-bench-results"
    assert not default_dir().resolve().is_relative_to(CHECKOUT)


def test_the_environment_and_the_flag_choose_the_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(ENV, str(tmp_path / "from-env"))
    parser = argparse.ArgumentParser()
    add_results_option(parser)
    assert parser.parse_args([]).results_dir is None
    path = result_path("priority", parser.parse_args([]).results_dir)
    assert path.parent == tmp_path / "from-env" and path.parent.is_dir()
    assert path.name.startswith("priority-") and path.suffix == ".json"
    chosen = parser.parse_args(["--results-dir", str(tmp_path / "chosen")]).results_dir
    assert result_path("priority", chosen).parent == tmp_path / "chosen"
