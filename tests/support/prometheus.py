"""A real Prometheus server (Debian package ``prometheus``) for tests, on loopback."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests

from inferplex_tools.benchtool.launch import HOST, free_port

ROOT = Path(__file__).resolve().parents[2]


def binary(name: str) -> str:
    """The path of ``prometheus`` or ``promtool``; installs the package (scripts/
    system_packages.sh) when missing; skips, saying why, only when that fails."""
    if found := shutil.which(name):
        return found
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "system_packages.sh")],
        capture_output=True,
        text=True,
        check=False,
    )
    if found := shutil.which(name):
        return found
    pytest.skip(
        f"{name} is not installed and scripts/system_packages.sh could not install the "
        f"Debian package prometheus: {(result.stdout + result.stderr).strip() or 'no output'}"
    )


@contextmanager
def running_prometheus(targets: list[str], folder: Path, deadline: float = 60) -> Iterator[str]:
    """Prometheus scraping ``targets`` (host:port) every second; yields its base URL."""
    config = folder / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: inferplex\n    static_configs:\n"
        f"      - targets: [{', '.join(repr(t) for t in targets)}]\n"
    )
    port = free_port()
    log = folder / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                binary("prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address={HOST}:{port}",
                "--log.level=warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://{HOST}:{port}"
    try:
        end = time.monotonic() + deadline
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"prometheus exited: {log.read_text(errors='replace')}")
            try:
                if requests.get(f"{url}/-/ready", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > end:
                raise TimeoutError(f"prometheus not ready: {log.read_text(errors='replace')}")
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def query(url: str, expr: str) -> list[dict[str, Any]]:
    """The result vector of an instant query (raises on a query error)."""
    response = requests.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10)
    document = response.json()
    if document.get("status") != "success":
        raise AssertionError(f"query {expr!r} failed: {document}")
    result: list[dict[str, Any]] = document["data"]["result"]
    return result


def wait_for_series(url: str, expr: str, deadline: float = 30) -> list[dict[str, Any]]:
    """Poll ``expr`` until it returns at least one series."""
    end = time.monotonic() + deadline
    while True:
        result = query(url, expr)
        if result or time.monotonic() > end:
            return result
        time.sleep(0.2)
