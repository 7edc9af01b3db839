"""The PyTorch backend: TorchScript and torch.export models, how config tensors meet the
model's arguments and results, datatypes, threads, devices and load errors."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from inferplex.backends import backend_for  # noqa: E402
from inferplex.backends.base import InstanceSpec  # noqa: E402
from inferplex.backends.pytorch import PyTorchBackend  # noqa: E402
from inferplex.config import ModelConfig  # noqa: E402
from inferplex.datatypes import V2_TO_NUMPY  # noqa: E402
from inferplex.errors import ConfigError, ModelExecutionError  # noqa: E402
from inferplex.lifecycle.planning import plan_model  # noqa: E402
from inferplex.security.encryption import encrypt_file, generate_key, parse_key  # noqa: E402
from tests.support import torch_models as tm  # noqa: E402

CPU = InstanceSpec(intra_op_threads=1)
PAIR = (torch.zeros(2, 4), torch.zeros(2, 4))
NUMERIC = sorted(d for d in V2_TO_NUMPY if d != "BYTES")


def config(inputs: list[str], outputs: list[str], datatype: str = "FP32") -> ModelConfig:
    return ModelConfig(
        name="m",
        platform="pytorch_libtorch",
        max_batch_size=8,
        input=[{"name": n, "data_type": datatype, "dims": [4]} for n in inputs],
        output=[{"name": n, "data_type": datatype, "dims": [4]} for n in outputs],
    )


@pytest.fixture(scope="module")
def add_sub_pt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tm.save_torchscript(tm.AddSub(), PAIR, tmp_path_factory.mktemp("pt") / "model.pt")


@pytest.fixture(scope="module")
def add_sub_pt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tm.save_exported(tm.AddSub(), PAIR, tmp_path_factory.mktemp("pt2") / "model.pt2")


def run(backend: PyTorchBackend, outputs: list[str], **inputs: np.ndarray) -> dict[str, Any]:
    return backend.execute(inputs, outputs)


A = np.arange(8, dtype=np.float32).reshape(2, 4)
B = np.full((2, 4), 10, dtype=np.float32)


@pytest.mark.parametrize("fixture", ["add_sub_pt", "add_sub_pt2"])
def test_triton_index_names_pick_arguments_and_results(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    path = request.getfixturevalue(fixture)
    # declared out of order on purpose: the __<n> suffix decides, not the order
    backend = PyTorchBackend(
        path, config(["INPUT__1", "INPUT__0"], ["OUTPUT__1", "OUTPUT__0"]), CPU
    )
    out = run(backend, ["OUTPUT__0", "OUTPUT__1"], INPUT__0=A, INPUT__1=B)
    np.testing.assert_array_equal(out["OUTPUT__0"], A + B)
    np.testing.assert_array_equal(out["OUTPUT__1"], A - B)


@pytest.mark.parametrize("fixture", ["add_sub_pt", "add_sub_pt2"])
def test_forward_argument_names_pick_arguments(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    path = request.getfixturevalue(fixture)
    backend = PyTorchBackend(path, config(["b", "a"], ["plus", "minus"]), CPU)
    out = run(backend, ["minus"], a=A, b=B)
    np.testing.assert_array_equal(out["minus"], A - B)  # a - b, whatever the config order


def test_other_names_follow_the_config_order(add_sub_pt: Path) -> None:
    backend = PyTorchBackend(add_sub_pt, config(["X", "Y"], ["S", "D"]), CPU)
    out = run(backend, ["D", "S"], X=B, Y=A)
    np.testing.assert_array_equal(out["D"], B - A)
    np.testing.assert_array_equal(out["S"], B + A)


def test_dict_results_answer_by_key(tmp_path: Path) -> None:
    path = tm.save_torchscript(tm.Named(), PAIR, tmp_path / "model.pt")
    backend = PyTorchBackend(path, config(["a", "b"], ["diff", "sum"]), CPU)
    out = run(backend, ["sum", "diff"], a=A, b=B)
    np.testing.assert_array_equal(out["sum"], A + B)
    np.testing.assert_array_equal(out["diff"], A - B)
    with pytest.raises(ModelExecutionError, match="without output 'other'"):
        run(backend, ["other"], a=A, b=B)


@pytest.mark.parametrize("datatype", NUMERIC)
def test_every_numeric_datatype(datatype: str, tmp_path: Path) -> None:
    dtype = V2_TO_NUMPY[datatype]
    example = torch.from_numpy(np.zeros((2, 4), dtype=dtype))
    path = tm.save_torchscript(tm.Identity(), (example,), tmp_path / "model.pt")
    backend = PyTorchBackend(path, config(["INPUT__0"], ["OUTPUT__0"], datatype), CPU)
    data = (np.arange(8) % 2 == 1) if datatype == "BOOL" else np.arange(8)
    data = data.astype(dtype).reshape(2, 4)
    out = run(backend, ["OUTPUT__0"], INPUT__0=data)["OUTPUT__0"]
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, data)


def test_read_only_inputs_are_never_written_through(tmp_path: Path) -> None:
    path = tm.save_torchscript(tm.InPlace(), (torch.zeros(2, 4),), tmp_path / "model.pt")
    backend = PyTorchBackend(path, config(["x"], ["y"]), CPU)
    wire = np.frombuffer(A.tobytes(), dtype=np.float32).reshape(2, 4)  # read-only, as decoded
    out = run(backend, ["y"], x=wire)["y"]
    np.testing.assert_array_equal(out, A + 1)
    np.testing.assert_array_equal(wire, A)


def test_each_worker_thread_gets_the_instance_thread_budget(add_sub_pt: Path) -> None:
    backend = PyTorchBackend(
        add_sub_pt, config(["a", "b"], ["s", "d"]), InstanceSpec("KIND_CPU", 0, 1)
    )
    seen: list[int] = []

    def worker() -> None:
        torch.set_num_threads(2)  # whatever the thread had before
        run(backend, ["s"], a=A, b=B)
        seen.append(torch.get_num_threads())

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [1]


def test_gpu_instance_without_cuda_is_a_clear_load_error(add_sub_pt: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert not PyTorchBackend.gpu_available()
    with pytest.raises(ConfigError, match=r"KIND_GPU asks for CUDA, but torch .* no CUDA"):
        PyTorchBackend(add_sub_pt, config(["a", "b"], ["s", "d"]), InstanceSpec("KIND_GPU"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
@pytest.mark.parametrize("fixture", ["add_sub_pt", "add_sub_pt2"])
def test_gpu_instance_runs_on_cuda(fixture: str, request: pytest.FixtureRequest) -> None:
    """Where CUDA exists (the device check, scripts/device_check.sh): a KIND_GPU instance
    holds its module on the GPU and answers as on the CPU."""
    path = request.getfixturevalue(fixture)
    backend = PyTorchBackend(path, config(["a", "b"], ["s", "d"]), InstanceSpec("KIND_GPU"))
    assert backend._device.type == "cuda"
    out = run(backend, ["s", "d"], a=A, b=B)
    np.testing.assert_array_equal(out["s"], A + B)
    np.testing.assert_array_equal(out["d"], A - B)
    with pytest.raises(ConfigError, match=r"asks for GPU 99, but torch sees \d+ CUDA"):
        PyTorchBackend(path, config(["a", "b"], ["s", "d"]), InstanceSpec("KIND_GPU", 99))


def test_missing_torch_is_a_clear_load_error(
    add_sub_pt: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    with pytest.raises(ConfigError, match=r"torch is not installed.*inferplex\[torch\]"):
        PyTorchBackend(add_sub_pt, config(["a", "b"], ["s", "d"]), CPU)
    assert not PyTorchBackend.gpu_available()


@pytest.mark.parametrize(
    ("inputs", "outputs", "datatype", "message"),
    [
        (["a", "b"], ["s"], "BYTES", "BYTES; the pytorch backend takes numeric tensors only"),
        (["a", "b", "c"], ["s"], "FP32", "declares 3 inputs but the model's forward takes 2"),
        (["IN__0", "IN__2"], ["s"], "FP32", "must be 0 to 1, once each"),
        ([], ["s"], "FP32", "must declare its inputs and outputs"),
    ],
)
def test_config_mismatches_are_load_errors(
    add_sub_pt: Path, inputs: list[str], outputs: list[str], datatype: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        PyTorchBackend(add_sub_pt, config(inputs, outputs, datatype), CPU)


def test_a_file_that_is_no_model_is_a_load_error(tmp_path: Path) -> None:
    for name, kind in (("model.pt", "TorchScript model"), ("model.pt2", "torch.export program")):
        path = tmp_path / name
        path.write_bytes(b"not a model")
        with pytest.raises(ConfigError, match=f"{name} is not a loadable {kind}"):
            PyTorchBackend(path, config(["a", "b"], ["s"]), CPU)


def test_too_few_results_is_an_execution_error(add_sub_pt: Path) -> None:
    backend = PyTorchBackend(add_sub_pt, config(["a", "b"], ["OUT__0", "OUT__2"]), CPU)
    with pytest.raises(ModelExecutionError, match="returned 2 output"):
        run(backend, ["OUT__2"], a=A, b=B)


def test_repository_plan_picks_the_backend(tmp_path: Path) -> None:
    inputs = [tm.tensor("INPUT__0", "FP32", [4]), tm.tensor("INPUT__1", "FP32", [4])]
    outputs = [tm.tensor("OUTPUT__0", "FP32", [4]), tm.tensor("OUTPUT__1", "FP32", [4])]
    folder = tm.write_model(
        tmp_path, "torch_add", tm.AddSub(), PAIR, inputs, outputs, max_batch_size=8
    )
    plan = plan_model(folder)
    assert plan.backend is PyTorchBackend
    assert plan.config.default_model_filename == "model.pt"
    assert backend_for(ModelConfig(name="x", backend="pytorch")) is PyTorchBackend
    exported = tm.write_model(
        tmp_path, "torch_add2", tm.AddSub(), PAIR, inputs, outputs, exported=True,
        max_batch_size=8,
    )  # fmt: skip
    assert plan_model(exported).version_files[1].name == "model.pt2"


def test_encrypted_models_load_from_memory(
    add_sub_pt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = generate_key()
    monkeypatch.setenv("INFERPLEX_MODEL_KEY", key)
    path = tmp_path / "model.pt"
    encrypt_file(add_sub_pt, path, parse_key(key, "test"))
    backend = PyTorchBackend(path, config(["a", "b"], ["s", "d"]), CPU)
    np.testing.assert_array_equal(run(backend, ["s"], a=A, b=B)["s"], A + B)


def test_an_output_of_another_datatype_is_an_error_not_a_cast(tmp_path: Path) -> None:
    """Float results declared INT32 would be truncated by a cast: refused as Triton does."""
    path = tm.save_torchscript(tm.Identity(), (torch.zeros(2, 4),), tmp_path / "model.pt")
    declared = config(["INPUT__0"], ["OUTPUT__0"])
    output = declared.output[0].model_copy(update={"data_type": "INT32"})
    backend = PyTorchBackend(path, declared.model_copy(update={"output": [output]}), CPU)
    with pytest.raises(ModelExecutionError, match=r"is torch.float32, but the config declares "):
        run(backend, ["OUTPUT__0"], INPUT__0=A)
