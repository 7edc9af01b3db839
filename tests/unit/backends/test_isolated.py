"""Process isolation: which class serves a model, the config checks, isolated ONNX Runtime
and PyTorch instances in real worker processes (results, error codes, their end at close),
and error codes from a Python handler's worker."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import psutil
import pytest

from examples import modelgen
from inferplex.backends.base import InstanceSpec
from inferplex.backends.ensemble import EnsembleBackend
from inferplex.backends.isolated import IsolatedBackend, served_backend
from inferplex.backends.onnxruntime import OnnxRuntimeBackend
from inferplex.backends.python import PythonBackend
from inferplex.backends.worker.process_backend import WorkerError
from inferplex.config import ModelConfig
from inferplex.config.writers import write_config
from inferplex.errors import ConfigError, ErrorCode
from inferplex.lifecycle.planning import plan_model


def config(backend: str = "onnxruntime", **parameters: str) -> ModelConfig:
    return ModelConfig(name="m", backend=backend, parameters=parameters)


def test_the_model_s_own_backend_serves_unless_the_config_asks_for_a_process() -> None:
    assert served_backend(OnnxRuntimeBackend, config()) is OnnxRuntimeBackend
    assert served_backend(OnnxRuntimeBackend, config(isolation="none")) is OnnxRuntimeBackend
    assert served_backend(OnnxRuntimeBackend, config(isolation="process")) is IsolatedBackend
    # a Python model's instances run in worker processes already
    assert served_backend(PythonBackend, config("python", isolation="process")) is PythonBackend


@pytest.mark.parametrize(
    ("backend", "parameters", "message"),
    [
        (
            OnnxRuntimeBackend,
            {"isolation": "thread"},
            "model 'm': parameter isolation must be one of 'none', 'process', got 'thread'",
        ),
        (
            EnsembleBackend,
            {"isolation": "process"},
            "parameter isolation 'process' applies to backends that run a model",
        ),
    ],
    ids=["unknown-mode", "composite"],
)
def test_bad_isolation_settings_are_config_errors(
    backend: type[OnnxRuntimeBackend | EnsembleBackend], parameters: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        served_backend(backend, config(backend.names[0], **parameters))


def test_the_plan_of_an_isolated_model_names_the_isolated_backend(tmp_path: Path) -> None:
    path = modelgen.add_sub(tmp_path)
    fields = modelgen.model_config(path, max_batch_size=8)
    fields["parameters"] = {"isolation": "process"}
    write_config(tmp_path / "add_sub", fields, fmt="yaml")
    plan = plan_model(tmp_path / "add_sub")
    assert plan.backend is IsolatedBackend
    assert plan.config.parameters["isolation"] == "process"


@pytest.fixture(scope="module")
def strings(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ModelConfig]:
    path = modelgen.identity(tmp_path_factory.mktemp("repo"), "BYTES", name="m")
    fields = modelgen.model_config(path, max_batch_size=4)
    fields["parameters"] = {"isolation": "process"}
    return path, ModelConfig.model_validate(fields)


def test_an_isolated_instance_runs_in_its_own_process_until_closed(
    strings: tuple[Path, ModelConfig],
) -> None:
    backend = IsolatedBackend(*strings, InstanceSpec())
    try:
        pid = backend.pid
        assert pid is not None and psutil.Process(pid).ppid() == psutil.Process().pid
        data = np.array([[b"a", "\u00e9".encode()]], dtype=object)
        out = backend.execute({"INPUT0": data}, ["OUTPUT0"])
        assert out["OUTPUT0"].tolist() == [[b"a", "\u00e9".encode()]]
        # the backend's own error, raised in the worker, keeps its code (a 400, not a 500)
        with pytest.raises(WorkerError) as caught:
            backend.execute({"INPUT0": np.array([[b"\xff"]], dtype=object)}, ["OUTPUT0"])
        assert caught.value.code is ErrorCode.INVALID_ARGUMENT
        assert caught.value.message == (
            "model 'm': the onnxruntime backend failed: input 'INPUT0': element [0, 0] is not "
            "UTF-8; ONNX Runtime string tensors hold UTF-8 text"
        )
        assert backend.pid == pid  # an error is no crash: the same worker goes on
    finally:
        backend.close()
    assert not psutil.pid_exists(pid)


def test_a_pytorch_model_runs_isolated_too(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from tests.support import torch_models as tm

    pair = [tm.tensor(n, "FP32", [4]) for n in ("INPUT__0", "INPUT__1")]
    folder = tm.write_model(
        tmp_path,
        "ts",
        tm.AddSub(),
        (torch.zeros(2, 4), torch.zeros(2, 4)),
        pair,
        [tm.tensor(n, "FP32", [4]) for n in ("OUTPUT__0", "OUTPUT__1")],
        max_batch_size=8,
        parameters=[{"key": "isolation", "value": {"string_value": "process"}}],
    )
    plan = plan_model(folder)
    assert plan.backend is IsolatedBackend
    backend = plan.backend(plan.version_files[1], plan.config, plan.instances[0])
    try:
        a = np.arange(8, dtype=np.float32).reshape(2, 4)
        out = backend.execute({"INPUT__0": a, "INPUT__1": a}, ["OUTPUT__0", "OUTPUT__1"])
        np.testing.assert_array_equal(out["OUTPUT__0"], a + a)
        np.testing.assert_array_equal(out["OUTPUT__1"], np.zeros_like(a))
    finally:
        backend.close()


def test_a_handler_s_own_inferplex_error_keeps_its_code(tmp_path: Path) -> None:
    """The worker reports an error's code for Python models as for isolated ones."""
    model = tmp_path / "py" / "1" / "model.py"
    model.parent.mkdir(parents=True)
    model.write_text(
        "from inferplex.errors import InvalidInputError\n"
        "class Handler:\n"
        "    def inference(self, data):\n"
        "        raise InvalidInputError('INPUT0 must be positive')\n"
    )
    fields = {
        "name": "py",
        "backend": "python",
        "input": [{"name": "INPUT0", "data_type": "FP32", "dims": [1]}],
        "output": [{"name": "OUTPUT0", "data_type": "FP32", "dims": [1]}],
    }
    backend = PythonBackend(model, ModelConfig.model_validate(fields), InstanceSpec())
    try:
        with pytest.raises(WorkerError) as caught:
            backend.execute({"INPUT0": np.zeros(1, np.float32)}, ["OUTPUT0"])
    finally:
        backend.close()
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert caught.value.message == "model 'py': the handler failed: INPUT0 must be positive"
