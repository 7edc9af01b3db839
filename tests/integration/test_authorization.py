"""Authorization is decided on the route that runs, never on the raw path.

Every spelling of a management path that is not its canonical form is refused with 400 on
every listener, whatever token comes with it; the canonical form gets exactly the answer its
scope calls for; a query string changes neither (Triton ignores it, tritonclient sends its
``query_params``). Requests go out through http.client, which sends the path as written
(requests and urllib3 would remove dot segments). A request with a body is refused before
its body is read.
"""

from __future__ import annotations

import http.client
import socket
from collections.abc import Iterator

import grpc
import orjson
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from examples.modelgen import add_sub
from inferplex.config.server_config import ServerConfig
from inferplex.server import Server
from tests.conftest import TWINS
from tests.support.h2client import INFER, SERVICE, H2Client

TOKENS = {
    "no token": None,
    "inference token": "inference-token",
    "management token": "management-token",
}

#: spellings of POST /v2/repository/models/add_sub/load that are not canonical
VARIANTS = [
    "//v2/repository/models/add_sub/load",
    "/v2//repository/models/add_sub/load",
    "/v2/repository//models/add_sub/load",
    "/v2/repository/models//add_sub/load",
    "/v2/repository/models/add_sub/load/",
    "/v2/repository/models/add_sub/load//",
    "/v2/./repository/models/add_sub/load",
    "/v2/repository/models/./add_sub/load",
    "/v2/models/../repository/models/add_sub/load",
    "/v2/models/x/../../repository/models/add_sub/load",
    "/v2/repository%2Fmodels/add_sub/load",
    "/v2/repository%2fmodels/add_sub/load",
    "/v2%2Frepository%2Fmodels%2Fadd_sub%2Fload",
    "/v2/%2E/repository/models/add_sub/load",
    "/v2/models/%2E%2E/repository/models/add_sub/load",
    "/v2/repository/models/add_sub%00/load",
]


@pytest.fixture(scope="module", params=list(TWINS))
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """The built-in HTTP and gRPC servers, then their reference twins (tests/conftest.py)."""
    repository = tmp_path_factory.mktemp("authz-repo")
    add_sub(repository)
    config = ServerConfig(
        model_repository=repository,
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        management_port=0,
        model_control_mode="explicit",
        inference_token="inference-token",
        management_token="management-token",
        **TWINS[request.param],
    )
    with Server(config) as running:
        yield running


def post(port: int, path: str, token: str | None, body: bytes = b"{}") -> tuple[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    try:
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def loaded(server: Server) -> bool:
    return any(entry.get("state") == "READY" for entry in server.engine.repository_index(False))


@pytest.mark.parametrize("token", TOKENS.values(), ids=TOKENS.keys())
@pytest.mark.parametrize("listener", ["public", "management"])
@pytest.mark.parametrize("path", VARIANTS)
def test_a_path_variant_never_reaches_the_management_api(
    server: Server, path: str, listener: str, token: str | None
) -> None:
    port = server.http_port if listener == "public" else server.management_port
    status, body = post(port, path, token)
    assert status == 400, body
    assert "error" in orjson.loads(body)
    assert not loaded(server)


@pytest.mark.parametrize(
    ("listener", "token", "status"),
    [
        ("public", None, 403),
        ("public", "inference-token", 403),
        ("public", "management-token", 403),
        ("management", None, 401),
        ("management", "inference-token", 403),
    ],
)
def test_the_canonical_path_gets_the_answer_of_its_scope(
    server: Server, listener: str, token: str | None, status: int
) -> None:
    port = server.http_port if listener == "public" else server.management_port
    # percent-encoding that decodes to the canonical path is that path, and a query string
    # is no part of it: same answer
    for path in (
        "/v2/repository/models/add_sub/load",
        "/%762/repository/models/add_sub/load",
        "/v2/repository/models/add_sub/load?x=1",
        "/v2/repository/models/add_sub/load?next=/../../v2/health/live",
        "/v2/repository/models/add_sub/load?",
    ):
        assert post(port, path, token)[0] == status, path
    assert not loaded(server)


def test_the_management_token_on_the_management_listener_loads(server: Server) -> None:
    try:
        status, body = post(
            server.management_port, "/v2/repository/models/add_sub/load", "management-token"
        )
        assert status == 200, body
        assert loaded(server)
    finally:
        post(server.management_port, "/v2/repository/models/add_sub/unload", "management-token")


@pytest.mark.parametrize("path", ["/v2/models/add_sub/infer", "/v2/models/add_sub/infer?a=b"])
def test_a_request_is_refused_before_its_body_is_read(server: Server, path: str) -> None:
    """Headers announcing 200 MB and no token: the answer comes without a byte of the body,
    and the connection is closed."""
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=10) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
            f"Content-Length: {200 << 20}\r\n\r\n".encode()
            + b"\0" * 1024
        )
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head = answer.split(b"\r\n\r\n", 1)[0].lower()
    assert head.startswith(b"http/1.1 401") or head.startswith(b"http/1.1 400"), answer
    assert b"connection: close" in head


def test_tritonclient_query_params_are_accepted_and_ignored(server: Server) -> None:
    """Triton's HTTP examples pass ``query_params`` on every call: the route and its scope
    are the path's alone."""
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    try:
        params = {"test_1": 1, "test_2": "/../v2/repository/models/add_sub/load"}
        assert client.is_server_live(query_params=params)
        with pytest.raises(InferenceServerException, match=r"401|[Uu]nauthori"):
            client.get_model_repository_index(query_params=params)
        bearer = {"Authorization": "Bearer inference-token"}
        index = client.get_model_repository_index(headers=bearer, query_params=params)
        assert [entry["name"] for entry in index] == ["add_sub"]
    finally:
        client.close()
    assert not loaded(server)


def test_unauthenticated_answers_name_the_scheme(server: Server) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    connection.request("POST", "/v2/models/add_sub/infer", body=b"{}")
    response = connection.getresponse()
    assert response.status == 401
    assert response.getheader("www-authenticate") == "Bearer"
    connection.close()


def test_head_and_get_need_the_same_token(server: Server) -> None:
    for method in ("GET", "HEAD"):
        connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
        connection.request(method, "/v2/repository/memory")
        assert connection.getresponse().status == 401
        connection.close()
        connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
        connection.request(method, "/v2/health/live")
        assert connection.getresponse().status == 200
        connection.close()


# --- gRPC: the method path is resolved exactly, and checked on HEADERS ----------------------

UNAUTHENTICATED, PERMISSION_DENIED, UNIMPLEMENTED = 16, 7, 12


def test_grpc_checks_the_token_on_headers_before_any_message(server: Server) -> None:
    with H2Client(server.grpc_port) as client:
        # the call's message never comes: the refusal must not wait for it
        stream_id = client.open_stream(INFER)
        assert client.wait_finished(stream_id).grpc_status == UNAUTHENTICATED
        client.live()


@pytest.mark.parametrize(
    "path",
    [
        SERVICE + "/RepositoryModelLoad",
        SERVICE + "RepositoryModelLoad/",
        "/" + SERVICE + "RepositoryModelLoad",
        SERVICE + "./RepositoryModelLoad",
        SERVICE.replace("/inference.", "/x/../inference.") + "RepositoryModelLoad",
        SERVICE + "RepositoryModelLoad?x=1",
        SERVICE + "repositorymodelload",
    ],
)
def test_grpc_path_variants_are_unimplemented(server: Server, path: str) -> None:
    with H2Client(server.grpc_port) as client:
        extra = [(b"authorization", b"Bearer management-token")]
        stream_id = client.open_stream(path, extra=extra)
        assert client.wait_finished(stream_id).grpc_status == UNIMPLEMENTED
    assert not loaded(server)


@pytest.mark.parametrize("token", TOKENS.values(), ids=TOKENS.keys())
def test_grpc_management_lives_on_the_http_management_listener(
    server: Server, token: str | None
) -> None:
    with H2Client(server.grpc_port) as client:
        extra = [(b"authorization", f"Bearer {token}".encode())] if token else []
        stream_id = client.open_stream(SERVICE + "RepositoryModelLoad", extra=extra)
        assert client.wait_finished(stream_id).grpc_status == PERMISSION_DENIED
    assert not loaded(server)


def test_grpc_health_and_reflection_need_no_token_the_health_list_does(server: Server) -> None:
    """grpc.health.v1 Check (Kubernetes probes) and reflection (the API's definitions) are
    open, as /v2/health/* is; the health List names every model: the inference scope."""
    health_pb2 = pytest.importorskip("grpc_health.v1.health_pb2")
    health_pb2_grpc = pytest.importorskip("grpc_health.v1.health_pb2_grpc")
    database = pytest.importorskip("grpc_reflection.v1alpha.proto_reflection_descriptor_database")
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        assert health.Check(health_pb2.HealthCheckRequest(), timeout=10).status == 1  # SERVING
        services = database.ProtoReflectionDescriptorDatabase(channel).get_services()
        assert "inference.GRPCInferenceService" in services
        with pytest.raises(grpc.RpcError) as refused:
            health.List(health_pb2.HealthListRequest(), timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        token = [("authorization", "Bearer inference-token")]
        assert (
            "" in health.List(health_pb2.HealthListRequest(), timeout=10, metadata=token).statuses
        )
