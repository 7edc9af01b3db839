"""``pb_utils.ModelConfig``, what ``auto_complete_config`` gets: Triton's rules."""

from __future__ import annotations

import json

import pytest

from inferplex.handler.triton_config import ModelConfig

FP32_4 = {"name": "IN", "data_type": "TYPE_FP32", "dims": [4]}


def test_a_bare_config_gets_tensors_and_settings() -> None:
    config = ModelConfig(json.dumps({"name": "m"}))
    assert config.as_dict() == {"name": "m", "max_batch_size": 0, "input": [], "output": []}
    config.add_input({**FP32_4, "optional": True})
    config.add_output({"name": "OUT", "data_type": "TYPE_STRING", "dims": [1]})
    config.set_max_batch_size(4)
    config.set_dynamic_batching()
    config.set_model_transaction_policy({"decoupled": False})
    assert config.as_dict() == {
        "name": "m",
        "max_batch_size": 4,
        "input": [{**FP32_4, "optional": True}],
        "output": [{"name": "OUT", "data_type": "TYPE_STRING", "dims": [1]}],
        "dynamic_batching": {},
        "model_transaction_policy": {"decoupled": False},
    }


def test_a_tensor_the_config_has_must_agree() -> None:
    config = ModelConfig({"name": "m", "input": [dict(FP32_4)]})
    config.add_input(FP32_4)  # the same: nothing changes
    assert config.as_dict()["input"] == [FP32_4]
    with pytest.raises(ValueError, match="data_type TYPE_INT32 but the model configuration"):
        config.add_input({**FP32_4, "data_type": "TYPE_INT32"})
    with pytest.raises(ValueError, match=r"dims \[8\] but the model configuration"):
        config.add_input({**FP32_4, "dims": [8]})


def test_malformed_tensors_are_refused() -> None:
    config = ModelConfig({"name": "m"})
    with pytest.raises(ValueError, match="missing the 'dims' property"):
        config.add_input({"name": "IN", "data_type": "TYPE_FP32"})
    with pytest.raises(ValueError, match=r"properties other than .*: optional"):
        config.add_output({**FP32_4, "optional": True})


def test_settings_the_config_contradicts_are_refused() -> None:
    config = ModelConfig({"name": "m", "max_batch_size": 8, "sequence_batching": {}})
    with pytest.raises(ValueError, match="configuration specified max_batch_size 8"):
        config.set_max_batch_size(4)
    config.set_max_batch_size(16)
    with pytest.raises(ValueError, match="'sequence_batching'"):
        config.set_dynamic_batching()
    config.set_model_transaction_policy({"decoupled": True})
    with pytest.raises(ValueError, match="already set to 'True'"):
        config.set_model_transaction_policy({"decoupled": False})
    with pytest.raises(ValueError, match="other than 'decoupled'"):
        config.set_model_transaction_policy({"streaming": True})
