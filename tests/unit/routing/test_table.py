"""RouteTable: loading routing.yaml, reloading it, and what happens to bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferplex.errors import ModelNotFoundError
from inferplex.routing.config import ROUTING_FILE
from inferplex.routing.table import RouteTable
from tests.unit.routing.test_route import Models, request

ONE = """
routes:
  r: {targets: [{model: a}, {model: b}]}
"""
TWO = """
routes:
  r: {targets: [{model: a}, {model: b}]}
  v: {variants: [{model: a}, {model: b}]}
"""


def write(repository: Path, text: str) -> None:
    (repository / ROUTING_FILE).write_text(text)


def table(models: Models) -> RouteTable:
    return RouteTable(models.serve, models.queued, models.breaker_open)


async def test_load_reload_and_keep_statistics_of_unchanged_routes(tmp_path: Path) -> None:
    models = Models()
    routes = table(models)
    assert await routes.reload(tmp_path, [])  # the first read applies even no file
    assert not routes and routes.listing() == {"routes": [], "error": ""}
    write(tmp_path, ONE)
    assert await routes.reload(tmp_path, ["a", "b"])
    assert "r" in routes and routes.get("x") is None
    await routes.route("r").infer(request())
    assert not await routes.reload(tmp_path, ["a", "b"])  # unchanged file: nothing to do
    write(tmp_path, TWO)
    assert await routes.reload(tmp_path, ["a", "b"])
    assert [r["name"] for r in routes.listing()["routes"]] == ["r", "v"]
    assert routes.statistics("r")["requests"] == 1  # r did not change: kept its counts
    (tmp_path / ROUTING_FILE).unlink()
    assert await routes.reload(tmp_path, ["a", "b"])
    assert not routes
    with pytest.raises(ModelNotFoundError, match=r"unknown route 'r' \(routes: none\)"):
        routes.statistics("r")


async def test_a_bad_file_keeps_the_routes_and_says_why(tmp_path: Path) -> None:
    routes = table(Models())
    write(tmp_path, ONE)
    await routes.reload(tmp_path, [])
    write(tmp_path, "routes: {r: {targets: []}}\n")
    assert not await routes.reload(tmp_path, [])
    assert "r" in routes
    assert "routes.r: give either 'targets'" in routes.listing()["error"]


async def test_a_route_may_not_take_a_model_name(tmp_path: Path) -> None:
    routes = table(Models())
    write(tmp_path, TWO)
    await routes.reload(tmp_path, ["v"])
    assert "v" not in routes and "r" in routes
    assert "route 'v' has the name of a model" in routes.listing()["error"]
    await routes.close()
