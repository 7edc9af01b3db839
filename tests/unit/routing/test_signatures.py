"""A route's targets must agree on their inputs and outputs: the differences named, the
route refusing requests while they differ, and a target compared once its config is known."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferplex.config.model_config import ModelConfig, TensorConfig
from inferplex.errors import ModelNotReadyError
from inferplex.routing.config import ROUTING_FILE, RouteConfig, parse_routing
from inferplex.routing.route import Route
from inferplex.routing.signatures import SignatureCheck, differences
from inferplex.routing.table import RouteTable
from inferplex.types import InferenceRequest, Tensor
from tests.unit.routing.test_route import Models


def config(
    name: str,
    x: tuple[str, tuple[int, ...]] = ("FP32", (4,)),
    outputs: tuple[str, ...] = ("y",),
    batch: int = 8,
) -> ModelConfig:
    return ModelConfig(
        name=name,
        max_batch_size=batch,
        input=(TensorConfig(name="x", data_type=x[0], dims=x[1]),),
        output=tuple(TensorConfig(name=o, data_type="FP32", dims=(4,)) for o in outputs),
    )


def split(*targets: dict[str, Any]) -> RouteConfig:
    return parse_routing({"routes": {"r": {"targets": list(targets)}}}).routes["r"]


def request() -> InferenceRequest:
    x = np.ones((1, 4), dtype=np.float32)
    return InferenceRequest("r", [Tensor("x", "FP32", x.shape, x)])


def test_differences_name_each_tensor_and_what_differs() -> None:
    a = config("a")
    assert differences("a", a, "b", config("b")) == []
    assert differences("a", a, "b", config("b", x=("FP16", (4,)))) == [
        "input 'x' is FP32 [-1, 4] in 'a' but FP16 [-1, 4] in 'b'"
    ]
    assert differences("a", a, "b", config("b", x=("FP32", (8,)))) == [
        "input 'x' is FP32 [-1, 4] in 'a' but FP32 [-1, 8] in 'b'"
    ]
    assert differences("a", a, "b", config("b", batch=0)) == [
        "input 'x' is FP32 [-1, 4] in 'a' but FP32 [4] in 'b'",
        "output 'y' is FP32 [-1, 4] in 'a' but FP32 [4] in 'b'",
    ]
    assert differences("a", a, "b", config("b", outputs=("y", "z"))) == ["output 'z' only in 'b'"]
    assert differences("a", config("a", outputs=("w",)), "b", a) == [
        "output 'w' only in 'a'",
        "output 'y' only in 'b'",
    ]


def test_versions_of_one_model_are_not_compared() -> None:
    members = split({"model": "a", "version": 1}, {"model": "a", "version": 2}).members
    check = SignatureCheck("r", members, lambda model: config(model))
    assert check.check() == ""


def test_a_target_is_compared_once_its_config_is_known_and_again_when_it_changes() -> None:
    configs: dict[str, ModelConfig] = {"a": config("a")}
    members = split({"model": "a"}, {"model": "b", "label": "canary"}).members
    check = SignatureCheck("r", members, configs.get)
    assert check.check() == ""  # b is not known yet
    configs["b"] = config("b", x=("INT64", (4,)))
    error = check.check()
    assert error.startswith("route 'r': targets 'a' and 'canary' have different inputs")
    assert "input 'x' is FP32 [-1, 4] in 'a' but INT64 [-1, 4] in 'canary'" in error
    configs["b"] = config("b")  # reloaded with a config that agrees
    assert check.check() == ""


async def test_a_route_whose_targets_differ_refuses_requests_until_they_agree() -> None:
    models = Models()
    configs = {"a": config("a"), "b": config("b", outputs=("z",))}
    route = Route(
        "r",
        split({"model": "a"}, {"model": "b"}),
        models.serve,
        models.queued,
        models.breaker_open,
        config_of=configs.get,
    )
    with pytest.raises(ModelNotReadyError, match=r"route 'r': targets 'a' and 'b'") as caught:
        await route.infer(request())
    assert "output 'y' only in 'a'; output 'z' only in 'b'" in caught.value.message
    assert models.calls == [] and route.requests == 0
    assert not route.ready("", lambda model, version: True)
    assert "output 'z' only in 'b'" in route.describe()["error"]
    configs["b"] = config("b")
    assert route.ready("", lambda model, version: True)
    await route.infer(request())
    assert len(models.calls) == 1 and "error" not in route.describe()


async def test_the_table_lists_the_error_at_load(tmp_path: Path) -> None:
    models = Models()
    configs = {"a": config("a"), "b": config("b", x=("FP32", (5,)))}
    table = RouteTable(models.serve, models.queued, models.breaker_open, configs.get)
    (tmp_path / ROUTING_FILE).write_text("routes: {r: {targets: [{model: a}, {model: b}]}}\n")
    await table.reload(tmp_path, ["a", "b"])
    listing = table.listing()
    assert "route 'r': targets 'a' and 'b'" in listing["error"]
    assert "FP32 [-1, 5] in 'b'" in listing["routes"][0]["error"]
