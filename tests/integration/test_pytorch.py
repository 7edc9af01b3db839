"""PyTorch models served by a real `inferplex serve` process, called with tritonclient over
HTTP and gRPC: a TorchScript model with Triton's INPUT__0 naming and dynamic batching, a
torch.export program with the forward's argument names, an INT64 model, and a model whose
load fails with its reason in the repository index."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")

from inferplex_tools.benchtool.launch import RunningServer, start_server  # noqa: E402
from tests.support import torch_models as tm  # noqa: E402

PAIR = (torch.zeros(2, 4), torch.zeros(2, 4))


def build_repository(repo: Path) -> Path:
    indexed_in = [tm.tensor("INPUT__0", "FP32", [4]), tm.tensor("INPUT__1", "FP32", [4])]
    indexed_out = [tm.tensor("OUTPUT__0", "FP32", [4]), tm.tensor("OUTPUT__1", "FP32", [4])]
    tm.write_model(
        repo, "torch_add_sub", tm.AddSub(), PAIR, indexed_in, indexed_out,
        max_batch_size=8, dynamic_batching={"max_queue_delay_microseconds": 2000},
        instance_group=[{"count": 1, "kind": "KIND_CPU"}],
    )  # fmt: skip
    named_in = [tm.tensor("b", "FP32", [4]), tm.tensor("a", "FP32", [4])]
    named_out = [tm.tensor("sum", "FP32", [4]), tm.tensor("diff", "FP32", [4])]
    tm.write_model(
        repo, "torch_export", tm.AddSub(), PAIR, named_in, named_out, exported=True,
        max_batch_size=8,
    )  # fmt: skip
    example = (torch.zeros(2, 3, dtype=torch.int64),)
    tm.write_model(
        repo, "torch_int64", tm.Identity(), example,
        [tm.tensor("x", "INT64", [3])], [tm.tensor("y", "INT64", [3])], max_batch_size=4,
    )  # fmt: skip
    tm.write_model(
        repo, "torch_gpu", tm.Identity(), (torch.zeros(1, 2),),
        [tm.tensor("x", "FP32", [2])], [tm.tensor("y", "FP32", [2])],
        instance_group=[{"kind": "KIND_GPU"}],
    )  # fmt: skip
    return repo


@pytest.fixture(scope="module")
def torch_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = build_repository(tmp_path_factory.mktemp("torch_repo"))
    running = start_server(repo, tmp_path_factory.mktemp("torch_server") / "server.log")
    yield running
    code = running.stop()
    assert code == 0, f"server exited with {code}:\n{running.log()}"


A = np.arange(8, dtype=np.float32).reshape(2, 4)
B = np.full((2, 4), 0.5, dtype=np.float32)


def infer(module: Any, client: Any, model: str, inputs: dict[str, np.ndarray]) -> Any:
    tensors = []
    for name, array in inputs.items():
        datatype = "INT64" if array.dtype == np.int64 else "FP32"
        tensor = module.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return client.infer(model, tensors)


@pytest.fixture(params=["http", "grpc"])
def client(request: pytest.FixtureRequest, torch_server: RunningServer) -> Iterator[Any]:
    if request.param == "http":
        with httpclient.InferenceServerClient(torch_server.http_url) as http:
            yield httpclient, http
    else:
        with grpcclient.InferenceServerClient(torch_server.grpc_url) as grpc:
            yield grpcclient, grpc


def test_torchscript_with_triton_names(client: tuple[Any, Any]) -> None:
    module, triton = client
    result = infer(module, triton, "torch_add_sub", {"INPUT__0": A, "INPUT__1": B})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), A + B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT__1"), A - B)
    config = triton.get_model_config("torch_add_sub")
    config = config if isinstance(config, dict) else {"platform": config.config.platform}
    assert config["platform"] == "pytorch_libtorch"


def test_exported_program_with_argument_names(client: tuple[Any, Any]) -> None:
    module, triton = client
    result = infer(module, triton, "torch_export", {"a": A, "b": B})
    np.testing.assert_array_equal(result.as_numpy("diff"), A - B)
    np.testing.assert_array_equal(result.as_numpy("sum"), A + B)


def test_integer_model(client: tuple[Any, Any]) -> None:
    module, triton = client
    x = np.array([[1, -2, 2**40]], dtype=np.int64)
    np.testing.assert_array_equal(infer(module, triton, "torch_int64", {"x": x}).as_numpy("y"), x)


def test_concurrent_requests_are_batched_and_answered_row_exactly(
    torch_server: RunningServer,
) -> None:
    def one(i: int) -> bool:
        with httpclient.InferenceServerClient(torch_server.http_url) as http:
            a = np.full((1, 4), i, dtype=np.float32)
            result = infer(httpclient, http, "torch_add_sub", {"INPUT__0": a, "INPUT__1": a})
            return bool(np.array_equal(result.as_numpy("OUTPUT__0"), a + a))

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(one, range(16)))


def test_gpu_model_without_cuda_is_unavailable_with_its_reason(
    torch_server: RunningServer,
) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with httpclient.InferenceServerClient(torch_server.http_url) as http:
        index = {m["name"]: m for m in http.get_model_repository_index()}
        assert index["torch_gpu"]["state"] == "UNAVAILABLE"
        assert "KIND_GPU" in index["torch_gpu"]["reason"]
        assert http.is_model_ready("torch_add_sub")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_gpu_model_serves_on_cuda(client: tuple[Any, Any]) -> None:
    """Where CUDA exists (the device check, scripts/device_check.sh)."""
    module, triton = client
    x = np.array([1.5, -2.0], dtype=np.float32)  # no batch dimension: max_batch_size 0
    np.testing.assert_array_equal(infer(module, triton, "torch_gpu", {"x": x}).as_numpy("y"), x)
