"""The system shared-memory extension over HTTP and gRPC with tritonclient's own
shared-memory utilities, against a real `inferplex serve --allow-shared-memory` process:
register / status / unregister, inputs and outputs by region name, offset and size, clear
errors for bad references, CUDA shared memory refused, and the opt-in (the session `server`
runs without the flag)."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from examples import modelgen
from inferplex.config.writers import write_config
from inferplex_tools.benchtool.launch import RunningServer, start_server

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")
shm = pytest.importorskip("tritonclient.utils.shared_memory")
from tritonclient.utils import InferenceServerException, serialize_byte_tensor  # noqa: E402

pytestmark = pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs Linux /dev/shm")

A = np.arange(32, dtype=np.float32).reshape(2, 16)
B = np.full((2, 16), 0.5, dtype=np.float32)


@pytest.fixture(scope="module")
def shm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("shm_repo")
    path = modelgen.add_sub(repo)
    write_config(repo / "add_sub", modelgen.model_config(path, max_batch_size=8))
    for datatype in ("FP32", "BYTES"):
        path = modelgen.identity(repo, datatype)
        write_config(path.parent.parent, modelgen.model_config(path, max_batch_size=8))
    log = tmp_path_factory.mktemp("shm_server") / "server.log"
    running = start_server(repo, log, env={"INFERPLEX_ALLOW_SHARED_MEMORY": "true"})
    yield running
    code = running.stop()
    assert code == 0, f"server exited with {code}:\n{running.log()}"


class Regions:
    """Client-side regions (tritonclient's utilities), destroyed at the end of a test."""

    def __init__(self) -> None:
        self.handles: list[Any] = []

    def create(self, byte_size: int) -> tuple[str, str, Any]:
        name = f"r{uuid.uuid4().hex[:10]}"
        key = f"/inferplex_{name}"
        handle = shm.create_shared_memory_region(name, key, byte_size)
        self.handles.append(handle)
        return name, key, handle

    def destroy(self) -> None:
        for handle in self.handles:
            shm.destroy_shared_memory_region(handle)


@pytest.fixture
def regions() -> Iterator[Regions]:
    made = Regions()
    yield made
    made.destroy()


@pytest.fixture(params=["http", "grpc"])
def client(request: pytest.FixtureRequest, shm_server: RunningServer) -> Iterator[Any]:
    """(client module, client) for one protocol; every region unregistered afterwards."""
    if request.param == "http":
        triton: Any = httpclient.InferenceServerClient(shm_server.http_url)
        module: Any = httpclient
    else:
        triton = grpcclient.InferenceServerClient(shm_server.grpc_url)
        module = grpcclient
    yield module, triton
    triton.unregister_system_shared_memory()
    triton.close()


def status(triton: Any, name: str = "") -> dict[str, dict[str, Any]]:
    """Region name -> {key, offset, byte_size}, from either client's answer."""
    answer = triton.get_system_shared_memory_status(name)
    if isinstance(answer, list):  # HTTP: a JSON list
        return {r["name"]: {k: int(v) if k != "key" else v for k, v in r.items() if k != "name"}
                for r in answer}  # fmt: skip
    return {
        n: {"key": r.key, "offset": r.offset, "byte_size": r.byte_size}
        for n, r in answer.regions.items()
    }


def error_of(call: Any) -> str:
    with pytest.raises(InferenceServerException) as info:
        call()
    return f"{info.value.status()} {info.value.message()}"


def test_register_status_unregister(client: tuple[Any, Any], regions: Regions) -> None:
    _, triton = client
    name, key, _ = regions.create(256)
    triton.register_system_shared_memory(name, key, 128, offset=64)
    assert status(triton) == {name: {"key": key, "offset": 64, "byte_size": 128}}
    assert status(triton, name) == status(triton)
    triton.unregister_system_shared_memory(name)
    assert status(triton) == {}


def test_inputs_and_outputs_in_shared_memory(client: tuple[Any, Any], regions: Regions) -> None:
    module, triton = client
    size = A.nbytes
    inputs_name, inputs_key, inputs = regions.create(2 * size)
    outputs_name, outputs_key, outputs = regions.create(64 + size)
    shm.set_shared_memory_region(inputs, [A, B])  # one after the other
    triton.register_system_shared_memory(inputs_name, inputs_key, 2 * size)
    triton.register_system_shared_memory(outputs_name, outputs_key, 64 + size)

    tensors = [module.InferInput(n, list(A.shape), "FP32") for n in ("INPUT0", "INPUT1")]
    tensors[0].set_shared_memory(inputs_name, size)
    tensors[1].set_shared_memory(inputs_name, size, offset=size)
    # OUTPUT0 into shared memory at an offset, OUTPUT1 in the response as usual
    shared = module.InferRequestedOutput("OUTPUT0")
    shared.set_shared_memory(outputs_name, size, offset=64)
    plain = module.InferRequestedOutput("OUTPUT1")
    result = triton.infer("add_sub", tensors, outputs=[shared, plain])

    out = result.get_output("OUTPUT0")
    shape = out["shape"] if isinstance(out, dict) else list(out.shape)
    written = shm.get_contents_as_numpy(outputs, np.float32, shape, offset=64)
    np.testing.assert_array_equal(written, A + B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)


def test_bytes_tensors_through_shared_memory(client: tuple[Any, Any], regions: Regions) -> None:
    module, triton = client
    text = np.array([[b"one", "tw\u00f6".encode()]], dtype=np.object_)
    raw = serialize_byte_tensor(text)
    size = len(raw.item()) if raw.dtype == np.object_ else raw.nbytes
    inputs_name, inputs_key, inputs = regions.create(size)
    outputs_name, outputs_key, outputs = regions.create(size)
    shm.set_shared_memory_region(inputs, [raw])  # the serialised tensor, as Triton wants
    triton.register_system_shared_memory(inputs_name, inputs_key, size)
    triton.register_system_shared_memory(outputs_name, outputs_key, size)
    tensor = module.InferInput("INPUT0", [1, 2], "BYTES")
    tensor.set_shared_memory(inputs_name, size)
    output = module.InferRequestedOutput("OUTPUT0")
    output.set_shared_memory(outputs_name, size)
    triton.infer("identity_bytes", [tensor], outputs=[output])
    back = shm.get_contents_as_numpy(outputs, np.object_, [1, 2])
    assert back.tolist() == text.tolist()


@pytest.mark.parametrize(
    ("offset", "byte_size", "words"),
    [
        (100, 128, "past the end of shared memory region"),
        (0, 100, "needs 128 bytes"),
    ],
)
def test_bad_offsets_and_sizes_are_invalid_arguments(
    client: tuple[Any, Any], regions: Regions, offset: int, byte_size: int, words: str
) -> None:
    module, triton = client
    name, key, _ = regions.create(256)
    triton.register_system_shared_memory(name, key, 200)
    tensor = module.InferInput("INPUT0", [2, 16], "FP32")
    tensor.set_shared_memory(name, byte_size, offset=offset)
    message = error_of(lambda: triton.infer("identity_fp32", [tensor]))
    assert "input 'INPUT0'" in message and words in message
    assert "400" in message or "INVALID_ARGUMENT" in message


def test_output_region_too_small_is_refused_before_inference(
    client: tuple[Any, Any], regions: Regions
) -> None:
    module, triton = client
    name, key, _ = regions.create(64)
    triton.register_system_shared_memory(name, key, 64)
    tensor = module.InferInput("INPUT0", [2, 16], "FP32")
    tensor.set_data_from_numpy(A)
    output = module.InferRequestedOutput("OUTPUT0")
    output.set_shared_memory(name, 128)
    message = error_of(lambda: triton.infer("identity_fp32", [tensor], outputs=[output]))
    assert "output 'OUTPUT0'" in message and "past the end" in message


def test_registration_errors(client: tuple[Any, Any], regions: Regions) -> None:
    _, triton = client
    name, key, _ = regions.create(64)
    message = error_of(lambda: triton.register_system_shared_memory(name, key, 65))
    assert "past the end of shared memory object" in message
    message = error_of(lambda: triton.register_system_shared_memory(name, "/no_such_obj", 8))
    assert "cannot open shared memory object" in message
    message = error_of(lambda: triton.register_system_shared_memory(name, "/../etc/passwd", 8))
    assert "must name a POSIX shared memory object" in message
    triton.register_system_shared_memory(name, key, 64)
    message = error_of(lambda: triton.register_system_shared_memory(name, key, 64))
    assert "already registered" in message
    message = error_of(lambda: triton.get_system_shared_memory_status("unknown"))
    assert "404" in message or "NOT_FOUND" in message


def test_unregistered_region_is_an_invalid_argument(
    client: tuple[Any, Any], regions: Regions
) -> None:
    module, triton = client
    name, key, handle = regions.create(A.nbytes)
    shm.set_shared_memory_region(handle, [A])
    triton.register_system_shared_memory(name, key, A.nbytes)
    tensor = module.InferInput("INPUT0", [2, 16], "FP32")
    tensor.set_shared_memory(name, A.nbytes)
    np.testing.assert_array_equal(triton.infer("identity_fp32", [tensor]).as_numpy("OUTPUT0"), A)
    triton.unregister_system_shared_memory(name)
    message = error_of(lambda: triton.infer("identity_fp32", [tensor]))
    assert f"no shared memory region '{name}' is registered" in message


def test_cuda_shared_memory_is_unsupported(client: tuple[Any, Any]) -> None:
    _, triton = client
    message = error_of(
        lambda: triton.register_cuda_shared_memory("c", base64.b64encode(b"h"), 0, 64)
    )
    assert "CUDA shared memory is not supported" in message
    assert "501" in message or "UNIMPLEMENTED" in message
    # none registered: listing and unregistering all work, as perf_analyzer does first
    status = triton.get_cuda_shared_memory_status()
    assert (status if isinstance(status, list) else list(status.regions)) == []
    triton.unregister_cuda_shared_memory()
    message = error_of(lambda: triton.get_cuda_shared_memory_status("c"))
    assert "404" in message or "NOT_FOUND" in message


def test_the_extension_is_advertised(shm_server: RunningServer) -> None:
    metadata = requests.get(f"http://{shm_server.http_url}/v2", timeout=10).json()
    assert "system_shared_memory" in metadata["extensions"]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_registration_is_off_without_the_flag(
    server: RunningServer, regions: Regions, protocol: str
) -> None:
    name, key, _ = regions.create(64)
    if protocol == "http":
        triton: Any = httpclient.InferenceServerClient(server.http_url)
    else:
        triton = grpcclient.InferenceServerClient(server.grpc_url)
    with triton:
        message = error_of(lambda: triton.register_system_shared_memory(name, key, 64))
    assert "--allow-shared-memory" in message
    assert "403" in message or "PERMISSION_DENIED" in message
