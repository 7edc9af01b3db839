"""A bounded run of the coverage-guided fuzzer of the HTTP/2 connection class
(scripts/fuzz_http2.py: its invariants are listed there); a long run is the same script with
``-max_total_time``. libFuzzer ends its process, so it runs as a child."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("atheris")

SCRIPT = Path(__file__).parents[3] / "scripts" / "fuzz_http2.py"


def test_random_frames_never_escape_leak_or_hang_a_connection(tmp_path: Path) -> None:
    # a fixed seed and number of runs: the same inputs every time, a few seconds
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "-seed=1",
            "-runs=3000",
            "-max_len=2000",
            "-max_total_time=120",
            f"-artifact_prefix={tmp_path}/",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=SCRIPT.parent.parent,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "Done 3000 runs" in output, output[-2000:]
