"""Deployment tests: the scale-out marker and the nginx they need."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from inferplex_tools.benchtool.cluster import nginx_binary

ROOT = Path(__file__).resolve().parents[2]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "scale_out: several server processes behind nginx (select with -m scale_out)"
    )


@pytest.fixture(scope="session")
def nginx() -> str:
    """nginx's path. Installs it (scripts/system_packages.sh) when missing; skips, saying
    why, only when that fails."""
    if binary := nginx_binary():
        return binary
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "system_packages.sh")],
        capture_output=True,
        text=True,
        check=False,
    )
    if binary := nginx_binary():
        return binary
    pytest.skip(
        "nginx is not installed and scripts/system_packages.sh could not install it: "
        f"{(result.stdout + result.stderr).strip() or f'exit {result.returncode}'}"
    )
