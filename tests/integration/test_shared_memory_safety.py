"""Shared memory cannot crash the server, and a region is its registering principal's (issue
30), over HTTP and gRPC with tritonclient, against the built-in servers and the reference
twins (uvicorn, grpc.aio), each run with both tokens and --allow-shared-memory:

- an object its owner truncates after registration is a 400 / INVALID_ARGUMENT naming the
  region (inputs read on the loop and in a worker thread, outputs), and the server serves on;
- a client of another principal (the inference token) gets for the management token's region
  exactly the answer (status and message, byte for byte) it gets for a name nobody
  registered: inference, status, unregister; and it cannot unregister the region;
- registering and unregistering while requests use the region never takes the server down;
- a principal's regions are bounded in number, a tensor read from one in bytes."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from examples import modelgen
from inferplex.config.writers import write_config
from inferplex_tools.benchtool.launch import RunningServer, start_server
from tests.conftest import TWINS

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")
shm = pytest.importorskip("tritonclient.utils.shared_memory")
from tritonclient.utils import InferenceServerException  # noqa: E402

pytestmark = pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs Linux /dev/shm")

INFERENCE_TOKEN = "shm-inference-token"
MANAGEMENT_TOKEN = "shm-management-token"
SMALL = np.arange(16, dtype=np.float32).reshape(1, 16)  # read on the event loop
LARGE = np.arange(8192, dtype=np.float32).reshape(1, 8192)  # 32 KiB: in a worker thread
MAX_REGIONS = 4
MAX_REQUEST_BYTES = 1 << 20


@pytest.fixture(scope="module", params=list(TWINS))
def shm_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("shm_safety_repo")
    path = modelgen.identity(repo, "FP32")
    write_config(path.parent.parent, modelgen.model_config(path, max_batch_size=8))
    settings = {f"INFERPLEX_{key.upper()}": value for key, value in TWINS[request.param].items()}
    env = {
        "INFERPLEX_ALLOW_SHARED_MEMORY": "true",
        "INFERPLEX_INFERENCE_TOKEN": INFERENCE_TOKEN,
        "INFERPLEX_MANAGEMENT_TOKEN": MANAGEMENT_TOKEN,
        "INFERPLEX_MAX_SHARED_MEMORY_REGIONS": str(MAX_REGIONS),
        "INFERPLEX_MAX_REQUEST_BYTES": str(MAX_REQUEST_BYTES),
        **settings,
    }
    log = tmp_path_factory.mktemp("shm_safety_server") / "server.log"
    running = start_server(repo, log, env=env)
    yield running
    code = running.stop()
    assert code == 0, f"server exited with {code}:\n{running.log()}"


class Client:
    """One protocol's tritonclient, every call with one token."""

    def __init__(self, server: RunningServer, protocol: str, token: str) -> None:
        self.protocol = protocol
        if protocol == "http":
            self.module: Any = httpclient
            self.triton: Any = httpclient.InferenceServerClient(server.http_url)
            self.headers = {"Authorization": f"Bearer {token}"}
        else:
            self.module = grpcclient
            self.triton = grpcclient.InferenceServerClient(server.grpc_url)
            self.headers = {"authorization": f"Bearer {token}"}

    def token(self) -> dict[str, str]:
        """The headers of one call (tritonclient's HTTP client adds to the dict it is given)."""
        return dict(self.headers)

    def register(self, name: str, key: str, byte_size: int) -> None:
        self.triton.register_system_shared_memory(name, key, byte_size, headers=self.token())

    def unregister(self, name: str = "") -> None:
        self.triton.unregister_system_shared_memory(name, headers=self.token())

    def status(self, name: str = "") -> Any:
        return self.triton.get_system_shared_memory_status(name, headers=self.token())

    def infer(self, region: str, shape: list[int], out_region: str = "", size: int = 0) -> Any:
        """identity_fp32 with INPUT0 from ``region`` (or ones in the request when empty),
        OUTPUT0 into ``out_region`` when given."""
        tensor = self.module.InferInput("INPUT0", shape, "FP32")
        nbytes = int(np.prod(shape)) * 4
        if region:
            tensor.set_shared_memory(region, nbytes)
        else:
            tensor.set_data_from_numpy(np.ones(shape, np.float32))
        outputs = None
        if out_region:
            output = self.module.InferRequestedOutput("OUTPUT0")
            output.set_shared_memory(out_region, size or nbytes)
            outputs = [output]
        return self.triton.infer("identity_fp32", [tensor], outputs=outputs, headers=self.token())

    def close(self) -> None:
        self.triton.close()


@pytest.fixture(params=["http", "grpc"])
def clients(request: pytest.FixtureRequest, shm_server: RunningServer) -> Iterator[Any]:
    """(the management token's client, the inference token's), one protocol; each region
    the owner registered is unregistered afterwards."""
    owner = Client(shm_server, request.param, MANAGEMENT_TOKEN)
    other = Client(shm_server, request.param, INFERENCE_TOKEN)
    yield owner, other
    owner.unregister()
    owner.close()
    other.close()


class Objects:
    """POSIX shared-memory objects made with tritonclient's utilities, destroyed after."""

    def __init__(self) -> None:
        self.handles: list[Any] = []

    def create(self, data: np.ndarray | None, byte_size: int = 0) -> tuple[str, str, Path]:
        name = f"r{uuid.uuid4().hex[:10]}"
        key = f"/inferplex_{name}"
        handle = shm.create_shared_memory_region(name, key, byte_size or data.nbytes)
        self.handles.append(handle)
        if data is not None:
            shm.set_shared_memory_region(handle, [data])
        return name, key, Path("/dev/shm") / key[1:]

    def destroy(self) -> None:
        for handle in self.handles:  # unmaps without touching the (maybe truncated) pages
            shm.destroy_shared_memory_region(handle)


@pytest.fixture
def objects() -> Iterator[Objects]:
    made = Objects()
    yield made
    made.destroy()


def answer(call: Callable[[], Any]) -> tuple[str, str]:
    """The status and message of a call that must fail."""
    with pytest.raises(InferenceServerException) as info:
        call()
    return str(info.value.status()), str(info.value.message())


def invalid(status: str) -> bool:
    return status in ("400", "StatusCode.INVALID_ARGUMENT")


def serves_on(server: RunningServer, client: Client) -> None:
    assert server.process.poll() is None, f"the server died:\n{server.log()}"
    result = client.infer("", [1, 4])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.ones((1, 4), np.float32))


@pytest.mark.parametrize("data", [SMALL, LARGE], ids=["on-the-loop", "in-a-thread"])
def test_an_input_object_truncated_after_registration_is_a_400(
    shm_server: RunningServer, clients: Any, objects: Objects, data: np.ndarray
) -> None:
    owner, _ = clients
    name, key, path = objects.create(data)
    owner.register(name, key, data.nbytes)
    read = owner.infer(name, list(data.shape)).as_numpy("OUTPUT0")
    np.testing.assert_array_equal(read, data)
    os.truncate(path, 0)  # the owner shrinks it under the registration
    status, message = answer(lambda: owner.infer(name, list(data.shape)))
    assert invalid(status), (status, message)
    assert f"shared memory region '{name}' was registered as {data.nbytes} bytes" in message
    assert "now has 0 bytes" in message and "input 'INPUT0'" in message
    serves_on(shm_server, owner)


def test_an_output_object_truncated_after_registration_is_a_400(
    shm_server: RunningServer, clients: Any, objects: Objects
) -> None:
    owner, _ = clients
    name, key, path = objects.create(None, 4096)
    owner.register(name, key, 4096)
    os.truncate(path, 16)
    status, message = answer(lambda: owner.infer("", [1, 64], out_region=name))
    assert invalid(status), (status, message)
    assert f"region '{name}' was registered as 4096 bytes" in message
    assert "now has 16 bytes" in message and "output 'OUTPUT0'" in message
    assert path.stat().st_size == 16  # not grown back by the refused write
    serves_on(shm_server, owner)


def test_another_principal_cannot_tell_a_region_from_a_name_nobody_registered(
    shm_server: RunningServer, clients: Any, objects: Objects
) -> None:
    owner, other = clients
    name, key, _ = objects.create(SMALL)
    output, output_key, _ = objects.create(None, SMALL.nbytes)
    calls: dict[str, Callable[[], Any]] = {
        "infer": lambda: other.infer(name, [1, 16]),
        "infer into": lambda: other.infer("", [1, 16], out_region=output),
        "status": lambda: other.status(name),
        "unregister": lambda: other.unregister(name),
        "unregister all": lambda: other.unregister(),
    }
    unknown = {what: answer(call) for what, call in calls.items()}  # nobody registered them
    owner.register(name, key, SMALL.nbytes)
    owner.register(output, output_key, SMALL.nbytes)
    for what, call in calls.items():
        assert answer(call) == unknown[what], what  # status and message, byte for byte
    assert invalid(unknown["infer"][0])
    assert unknown["infer"][1].endswith(f"no shared memory region '{name}' is registered")
    # the owner's regions are untouched and its own
    result = owner.infer(name, [1, 16], out_region=output)
    assert result.get_output("OUTPUT0") is not None
    status = owner.status()
    names = {r["name"] for r in status} if isinstance(status, list) else set(status.regions)
    assert names == {name, output}


def test_unregistering_while_requests_use_a_region_never_takes_the_server_down(
    shm_server: RunningServer, clients: Any, objects: Objects
) -> None:
    owner, _ = clients
    name, key, _ = objects.create(LARGE)
    owner.register(name, key, LARGE.nbytes)
    errors: list[str] = []
    done = threading.Event()

    def toggle() -> None:
        toggler = Client(shm_server, owner.protocol, MANAGEMENT_TOKEN)
        try:
            while not done.is_set():
                toggler.unregister(name)
                toggler.register(name, key, LARGE.nbytes)
        finally:
            toggler.close()

    thread = threading.Thread(target=toggle)
    thread.start()
    try:
        for _ in range(40):
            try:
                owner.infer(name, list(LARGE.shape))
            except InferenceServerException as exc:
                errors.append(f"{exc.status()} {exc.message()}")
    finally:
        done.set()
        thread.join(30)
    for error in errors:  # refused while unregistered, never anything else
        assert f"no shared memory region '{name}' is registered" in error, error
    serves_on(shm_server, owner)


def test_a_principal_holds_a_bounded_number_of_regions(clients: Any, objects: Objects) -> None:
    owner, _ = clients
    _, key, _ = objects.create(SMALL)
    for index in range(MAX_REGIONS):
        owner.register(f"r{index}", key, 8)
    status, message = answer(lambda: owner.register("one-more", key, 8))
    assert status in ("429", "StatusCode.RESOURCE_EXHAUSTED"), (status, message)
    assert f"INFERPLEX_MAX_SHARED_MEMORY_REGIONS ({MAX_REGIONS})" in message
    owner.unregister("r0")
    owner.register("one-more", key, 8)


def test_a_tensor_read_from_a_region_is_bounded_like_a_request_body(
    clients: Any, objects: Objects
) -> None:
    owner, _ = clients
    data = np.zeros((1, MAX_REQUEST_BYTES // 4 + 1), np.float32)
    name, key, _ = objects.create(data)
    owner.register(name, key, data.nbytes)
    status, message = answer(lambda: owner.infer(name, list(data.shape)))
    assert status in ("413", "StatusCode.RESOURCE_EXHAUSTED"), (status, message)
    assert f"above the limit of {MAX_REQUEST_BYTES} bytes" in message
