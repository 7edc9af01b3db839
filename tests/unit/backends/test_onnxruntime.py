"""The ONNX Runtime backend: session options from the model's parameters, and execute."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from examples import modelgen
from inferplex.backends.base import InstanceSpec
from inferplex.backends.onnxruntime import SPINNING_PARAMETER, OnnxRuntimeBackend
from inferplex.config import ModelConfig
from inferplex.errors import ConfigError, InvalidInputError


def config(parameters: dict[str, str] | None = None) -> ModelConfig:
    tensors = [{"name": n, "data_type": "FP32", "dims": [16]} for n in ("INPUT0", "INPUT1")]
    return ModelConfig(
        name="add_sub",
        max_batch_size=8,
        input=tensors,
        output=[{"name": n, "data_type": "FP32", "dims": [16]} for n in ("OUTPUT0", "OUTPUT1")],
        parameters=parameters or {},
    )


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return modelgen.add_sub(tmp_path_factory.mktemp("repo"))


def spinning(backend: OnnxRuntimeBackend) -> str:
    return backend._session.get_session_options().get_session_config_entry(SPINNING_PARAMETER)


def test_intra_op_threads_do_not_spin_unless_the_model_asks(model: Path) -> None:
    spec = InstanceSpec(intra_op_threads=2)
    assert spinning(OnnxRuntimeBackend(model, config(), spec)) == "0"
    assert spinning(OnnxRuntimeBackend(model, config({SPINNING_PARAMETER: "1"}), spec)) == "1"


def test_close_lets_go_of_the_native_session(model: Path) -> None:
    backend = OnnxRuntimeBackend(model, config(), InstanceSpec())
    native = backend._session._sess
    backend.close()
    assert sys.getrefcount(native) == 2  # ``native`` and the call's argument: freed with them


def test_a_bad_spinning_value_fails_the_model(model: Path) -> None:
    with pytest.raises(ConfigError, match=SPINNING_PARAMETER):
        OnnxRuntimeBackend(model, config({SPINNING_PARAMETER: "yes"}), InstanceSpec())


def test_execute_returns_the_requested_outputs(model: Path) -> None:
    backend = OnnxRuntimeBackend(model, config(), InstanceSpec())
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.ones((2, 16), dtype=np.float32)
    outputs = backend.execute({"INPUT0": a, "INPUT1": b}, ["OUTPUT1"])
    assert list(outputs) == ["OUTPUT1"]
    np.testing.assert_array_equal(outputs["OUTPUT1"], a - b)


def test_an_optional_input_the_graph_needs_is_refused_by_name(model: Path, caplog) -> None:
    marked = config()
    tensors = [t.model_copy(update={"optional": t.name == "INPUT1"}) for t in marked.input]
    backend = OnnxRuntimeBackend(
        model, marked.model_copy(update={"input": tensors}), InstanceSpec(intra_op_threads=1)
    )
    assert "are optional in the config but the ONNX graph needs them" in caplog.text
    with pytest.raises(InvalidInputError, match=r"\['INPUT1'\] missing"):
        backend.execute({"INPUT0": np.zeros((1, 16), np.float32)}, ["OUTPUT0"])
    both = {n: np.ones((1, 16), np.float32) for n in ("INPUT0", "INPUT1")}
    np.testing.assert_array_equal(backend.execute(both, ["OUTPUT0"])["OUTPUT0"], 2 * both["INPUT0"])


def test_a_config_without_an_input_the_graph_needs_fails_the_load(model: Path) -> None:
    """A config taken as written (no auto-complete) that leaves out INPUT1: the load fails
    naming it, in Triton's onnxruntime words, instead of every request failing."""
    written = config()
    lacking = written.model_copy(update={"input": written.input[:1]})
    with pytest.raises(ConfigError) as info:
        OnnxRuntimeBackend(model, lacking, InstanceSpec())
    assert str(info.value).startswith(
        "unable to load model 'add_sub', configuration expects 1 inputs, model provides 2"
    )
    assert "'INPUT1'" in str(info.value)


def test_a_config_declaring_an_input_the_graph_lacks_fails_the_load(model: Path) -> None:
    written = config()
    extra = written.input[0].model_copy(update={"name": "INPUT9"})
    with pytest.raises(ConfigError, match="unexpected inference input 'INPUT9', allowed inputs"):
        OnnxRuntimeBackend(
            model, written.model_copy(update={"input": (*written.input, extra)}), InstanceSpec()
        )
