"""deploy/nginx: the template renders for any number of replicas and nginx accepts it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from inferplex_tools.benchtool.cluster import TEMPLATE, render

VALUES = {"PREFIX": "/srv/lb", "HTTP_LISTEN": "0.0.0.0:8000", "GRPC_LISTEN": "0.0.0.0:8001"}
BACKENDS = {
    "HTTP_BACKEND": ["10.0.0.5:8000", "10.0.0.6:8000 down", "10.0.0.7:8000"],
    "GRPC_BACKEND": ["10.0.0.5:8001", "10.0.0.6:8001 down", "10.0.0.7:8001"],
}


def test_backend_lines_repeat_per_replica() -> None:
    config = render(TEMPLATE.read_text(), VALUES, BACKENDS)
    for addresses in BACKENDS.values():
        for address in addresses:
            assert f"server {address} max_fails=1 fail_timeout=1s;" in config
    assert "${" not in "\n".join(
        line for line in config.splitlines() if not line.lstrip().startswith("#")
    )
    assert "proxy_next_upstream error http_503 non_idempotent;" in config
    assert "grpc_next_upstream error http_503 non_idempotent;" in config


def test_unknown_placeholder_fails() -> None:
    with pytest.raises(KeyError, match="HTTP_LISTEN"):
        render(TEMPLATE.read_text(), {"PREFIX": "/x", "GRPC_LISTEN": "1.2.3.4:1"}, BACKENDS)


def test_nginx_accepts_the_rendered_configuration(nginx: str, tmp_path: Path) -> None:
    (tmp_path / "tmp").mkdir()
    conf = tmp_path / "nginx.conf"
    conf.write_text(render(TEMPLATE.read_text(), {**VALUES, "PREFIX": str(tmp_path)}, BACKENDS))
    result = subprocess.run(
        [nginx, "-t", "-p", str(tmp_path), "-c", str(conf), "-e", str(tmp_path / "error.log")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
