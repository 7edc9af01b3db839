"""Cascade and routing configs: confidence, rule matching and the errors made at load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferplex.backends.base import InstanceSpec
from inferplex.backends.cascade import CascadeBackend, SizeRoutingBackend, confidence
from inferplex.config.composite import SizeRule
from inferplex.config.pbtxt import parse_pbtxt
from inferplex.config.readers import config_from_dict
from inferplex.errors import ConfigError
from inferplex.types import InferenceRequest, InferenceResponse


class NoCalls:
    """A caller for backends that are only constructed here."""

    def infer(self, request: InferenceRequest, timeout: float | None = None) -> InferenceResponse:
        raise AssertionError("not called")

    def submit(self, request: InferenceRequest) -> Any:
        raise AssertionError("not called")


SPEC = InstanceSpec(caller=NoCalls())


def cascade_raw(**changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "backend": "cascade",
        "max_batch_size": 8,
        "input": [{"name": "pixels", "data_type": "FP32", "dims": [64]}],
        "output": [
            {"name": "probabilities", "data_type": "FP32", "dims": [10]},
            {"name": "answered_by", "data_type": "BYTES", "dims": [1]},
        ],
        "cascade": {
            "light_model": "small",
            "heavy_model": "big",
            "confidence_output": "probabilities",
            "confidence": "max",
            "threshold": 0.9,
        },
    }
    raw.update(changes)
    return {k: v for k, v in raw.items() if v is not None}


def routing_raw(**changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "backend": "size_routing",
        "max_batch_size": 4,
        "input": [{"name": "image", "data_type": "FP32", "dims": [3, -1, -1]}],
        "output": [{"name": "logits", "data_type": "FP32", "dims": [10]}],
        "size_routing": {
            "input_name": "image",
            "rule": [
                {"model_name": "light_cnn", "max_dims": [-1, 64, 64]},
                {"model_name": "full_cnn"},
            ],
        },
    }
    raw.update(changes)
    return {k: v for k, v in raw.items() if v is not None}


def load(backend: type[CascadeBackend | SizeRoutingBackend], raw: dict[str, Any]) -> None:
    config = config_from_dict(raw, "m", "m/config.yaml")
    backend(Path("."), config, SPEC)


def test_confidence_of_logits_and_of_probabilities() -> None:
    logits = np.array([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1000.0, 0.0, -1000.0]])
    expected = [np.exp(2) / (np.exp(2) + 2), 1 / 3, 1.0]
    np.testing.assert_allclose(confidence(logits, "softmax"), expected)
    probabilities = np.array([[0.7, 0.2, 0.1], [0.4, 0.3, 0.3]], dtype=np.float32)
    np.testing.assert_allclose(confidence(probabilities, "max"), [0.7, 0.4], rtol=1e-6)
    # a row of NaN has no confidence the threshold could accept
    assert not confidence(np.array([[np.nan, 1.0]]), "softmax")[0] >= 0.5


def test_rule_matching() -> None:
    rule = SizeRule(model_name="m", max_dims=(-1, 64, 64))
    assert rule.accepts((3, 64, 32)) and rule.accepts((1, 8, 8))
    assert not rule.accepts((3, 65, 64)) and not rule.accepts((3, 64, 128))
    assert SizeRule(model_name="any").accepts((3, 4096, 4096))


def test_valid_configs_load_from_both_formats() -> None:
    load(CascadeBackend, cascade_raw())
    load(SizeRoutingBackend, routing_raw())
    text = """
    backend: "size_routing"
    max_batch_size: 4
    input [ { name: "image" data_type: TYPE_FP32 dims: [ 3, -1, -1 ] } ]
    output [ { name: "logits" data_type: TYPE_FP32 dims: [ 10 ] } ]
    size_routing {
      input_name: "image"
      rule { model_name: "light_cnn" max_dims: [ -1, 64, 64 ] }
      rule { model_name: "full_cnn" }
    }
    """
    config = config_from_dict(parse_pbtxt(text, "m/config.pbtxt"), "m", "m/config.pbtxt")
    assert config.size_routing is not None
    assert [r.model_name for r in config.size_routing.rule] == ["light_cnn", "full_cnn"]
    assert config.size_routing.rule[0].max_dims == (-1, 64, 64)
    assert config.to_triton_dict()["size_routing"]["rule"][1]["model_name"] == "full_cnn"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"cascade": None}, "backend 'cascade' needs a cascade section"),
        ({"max_batch_size": 0}, "needs max_batch_size > 0"),
        (
            {"output": [{"name": "answered_by", "data_type": "INT32", "dims": [1]}]},
            "output 'answered_by' .* must be declared BYTES with dims \\[1\\], not INT32",
        ),
    ],
)
def test_cascade_config_errors(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(CascadeBackend, cascade_raw(**changes))


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"threshold": 1.5}, r"cascade\.threshold: .*less than or equal to 1"),
        ({"confidence": "mean"}, r"cascade\.confidence: expected 'softmax' or 'max'"),
        ({"heavy_model": None}, r"cascade\.heavy_model: is required"),
    ],
)
def test_cascade_section_errors_name_the_field(section: dict[str, Any], message: str) -> None:
    raw = cascade_raw()
    fields = {k: v for k, v in {**raw["cascade"], **section}.items() if v is not None}
    with pytest.raises(ConfigError, match=message):
        load(CascadeBackend, {**raw, "cascade": fields})


@pytest.mark.parametrize(
    ("routing", "message"),
    [
        (
            {"input_name": "frame", "rule": [{"model_name": "a"}]},
            r"size_routing.input_name 'frame' is not an input of the model \(its inputs: 'image'",
        ),
        (
            {"input_name": "image", "rule": [{"model_name": "a", "max_dims": [64, 64]}]},
            r"size_routing.rule\[0\].max_dims \[64, 64\] has 2 dims but input 'image' has 3",
        ),
        (
            {"input_name": "image", "rule": [{"model_name": "a"}, {"model_name": "b"}]},
            r"rule\[0\] has no max_dims, so it takes every request .* put the rule without",
        ),
        (
            {"input_name": "image", "rule": [{"model_name": "a", "max_dims": [3, 0, 8]}]},
            r"rule\[0\].max_dims must be positive or -1",
        ),
        ({"input_name": "image", "rule": []}, r"size_routing\.rule: .*at least 1"),
    ],
)
def test_routing_config_errors(routing: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(SizeRoutingBackend, routing_raw(size_routing=routing))


def test_routing_needs_its_section() -> None:
    with pytest.raises(ConfigError, match="backend 'size_routing' needs a size_routing section"):
        load(SizeRoutingBackend, routing_raw(size_routing=None))
