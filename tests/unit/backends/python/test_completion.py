"""A Python model's ``auto_complete_config``, run in a process of its own at load."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferplex.backends.python.completion import auto_complete
from inferplex.config.model_config import ModelConfig
from inferplex.errors import ConfigError

COMPLETING = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        print("a model that prints to stdout")  # must not spoil the answer
        config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [4], "optional": True})
        config.add_output({"name": "OUT", "data_type": "TYPE_STRING", "dims": [1]})
        config.set_max_batch_size(8)
        config.set_dynamic_batching()
        config.set_model_transaction_policy({"decoupled": True})
        return config

    def execute(self, requests):
        return []
"""


def model(tmp_path: Path, code: str) -> Path:
    path = tmp_path / "m" / "1" / "model.py"
    path.parent.mkdir(parents=True)
    path.write_text(code)
    return path


def test_a_model_without_a_config_file_completes_one(tmp_path: Path) -> None:
    config = auto_complete(model(tmp_path, COMPLETING), None, "m", "")
    assert config is not None
    assert config.name == "m"
    assert config.max_batch_size == 8
    assert config.dynamic_batching is not None
    assert config.model_transaction_policy.decoupled
    assert [(t.name, t.data_type, t.dims, t.optional) for t in config.input] == [
        ("IN", "FP32", (4,), True)
    ]
    assert [(t.name, t.data_type) for t in config.output] == [("OUT", "BYTES")]


def test_what_the_config_file_says_stays(tmp_path: Path) -> None:
    given = ModelConfig.model_validate(
        {
            "name": "m",
            "backend": "python",
            "input": [{"name": "IN", "data_type": "FP32", "dims": [4]}],
            "parameters": {"keep": "me"},
        }
    )
    config = auto_complete(model(tmp_path, COMPLETING), given, "m", "")
    assert config is not None
    assert config.parameters == {"keep": "me"}
    assert config.backend == "python"
    assert [t.name for t in config.output] == ["OUT"]


def test_a_contradiction_fails_the_load_with_the_reason(tmp_path: Path) -> None:
    given = ModelConfig.model_validate(
        {"name": "m", "input": [{"name": "IN", "data_type": "FP32", "dims": [2]}]}
    )
    with pytest.raises(ConfigError) as failed:
        auto_complete(model(tmp_path, COMPLETING), given, "m", "")
    message = failed.value.message
    assert "model 'm': auto_complete_config failed: ValueError:" in message
    assert "dims [4] but the model configuration specifies [2]" in message
    assert "(model.py line 8, in auto_complete_config)" in message


def test_it_must_return_the_config(tmp_path: Path) -> None:
    code = COMPLETING.replace("        return config\n", "        return None\n")
    with pytest.raises(ConfigError, match=r"must return the pb_utils\.ModelConfig"):
        auto_complete(model(tmp_path, code), None, "m", "")


def test_a_model_without_the_method_is_left_as_it_is(tmp_path: Path) -> None:
    given = ModelConfig(name="m")
    code = "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
    assert auto_complete(model(tmp_path, code), given, "m", "") is given
    assert auto_complete(model(tmp_path / "x", code), None, "m", "") is None
