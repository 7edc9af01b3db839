"""Bounded runs of the coverage-guided fuzzers of the HTTP/1.1 and HTTP/2 connection classes
(scripts/fuzz_http1.py, scripts/fuzz_http2.py: their invariants are listed there: no escaped
exception, bounded buffers, every connection ends in a response, GOAWAY or close); a long run
is the same script with ``-max_total_time``. libFuzzer ends its process, so each runs as a
child."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("atheris")

SCRIPTS = Path(__file__).parents[3] / "scripts"


@pytest.mark.parametrize(
    ("script", "options"),
    [
        ("fuzz_http1.py", ["-runs=15000"]),  # random bytes
        ("fuzz_http2.py", ["-runs=3000", "-max_len=2000"]),  # random frame programs
    ],
)
def test_random_input_never_escapes_leaks_or_hangs_a_connection(
    script: str, options: list[str], tmp_path: Path
) -> None:
    # a fixed seed and number of runs: the same inputs every time, a few seconds
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPTS / script),
            "-seed=1",
            *options,
            "-max_total_time=120",
            f"-artifact_prefix={tmp_path}/",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=SCRIPTS.parent,
    )
    output = result.stdout + result.stderr
    runs = options[0].removeprefix("-runs=")
    assert result.returncode == 0, output[-4000:]
    assert f"Done {runs} runs" in output, output[-2000:]
