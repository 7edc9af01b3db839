"""Triton's perf_analyzer (the binary in the tritonclient wheel), run the way the tests run
it: found or skipped with the reason, measured briefly, its output checked."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

#: a short measurement: the tests check that a run works, not what it measures
BRIEF = ["--measurement-interval", "300", "--stability-percentage", "100", "--max-trials", "3"]


def perf_analyzer_env() -> dict[str, str]:
    """The environment that lets the binary find CUDA's runtime library."""
    env = dict(os.environ)
    try:
        import nvidia.cuda_runtime
    except ImportError:
        return env
    libraries = [str(Path(p) / "lib") for p in nvidia.cuda_runtime.__path__]
    env["LD_LIBRARY_PATH"] = os.pathsep.join([*libraries, env.get("LD_LIBRARY_PATH", "")])
    return env


def find_perf_analyzer() -> str:
    found = shutil.which("perf_analyzer", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip("perf_analyzer is not installed: it comes with tritonclient (test extra)")
    check = subprocess.run(
        [found, "--version"], capture_output=True, text=True, env=perf_analyzer_env()
    )
    if check.returncode != 0:
        pytest.skip(f"perf_analyzer cannot start here: {check.stderr.strip()[:300]}")
    return found


def run_perf_analyzer(model: str, url: str, protocol: str, options: Sequence[str]) -> str:
    """One brief run of ``model`` at ``url``; it must end with a throughput and no error.
    Returns its output."""
    command = [find_perf_analyzer(), "-m", model, "-u", url, "-i", protocol, *BRIEF, *options]
    run = subprocess.run(
        command, capture_output=True, text=True, timeout=120, env=perf_analyzer_env()
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-3000:]
    assert "throughput:" in output and "rror" not in output, output[-3000:]
    return output
