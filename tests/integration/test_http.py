"""The V2 HTTP/REST frontend against a real server: tritonclient, raw HTTP, and bad input."""

from __future__ import annotations

import gzip
import math
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import orjson
import pytest
import requests
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferplex.datatypes import V2_TO_NUMPY
from tests.conftest import MAX_REQUEST_BYTES

DATATYPES = sorted(V2_TO_NUMPY)


@pytest.fixture(scope="module")
def client(twin_server: Any) -> Iterator[httpclient.InferenceServerClient]:
    """A client of the built-in server, then of its reference twin (tests/conftest.py)."""
    triton = httpclient.InferenceServerClient(twin_server.http_url)
    yield triton
    triton.close()


@pytest.fixture(scope="module")
def base(twin_server: Any) -> str:
    return f"http://{twin_server.http_url}"


def values_for(datatype: str, shape: tuple[int, ...]) -> np.ndarray:
    """Values across each type's range; BYTES are UTF-8 so that JSON can carry them."""
    count = math.prod(shape)
    if datatype == "BYTES":
        items = [b"", b"abc", "\u00e9t\u00e9".encode(), b"0123456789" * 3]
        return np.array((items * count)[:count], dtype=np.object_).reshape(shape)
    if datatype == "BOOL":
        return (np.arange(count) % 3 == 0).reshape(shape)
    dtype = V2_TO_NUMPY[datatype]
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        items = [info.min, info.max, 0, 1, info.max // 7]
    else:
        items = [-1.5, 0.0, 0.25, 1024.0, float(np.finfo(dtype).max)]
    return np.array((items * count)[:count], dtype=dtype).reshape(shape)


def add_sub_inputs(a: np.ndarray, b: np.ndarray, binary: bool = True) -> list[Any]:
    inputs = []
    for name, array in (("INPUT0", a), ("INPUT1", b)):
        tensor = httpclient.InferInput(name, list(array.shape), "FP32")
        tensor.set_data_from_numpy(array, binary_data=binary)
        inputs.append(tensor)
    return inputs


def assert_add_sub_works(client: httpclient.InferenceServerClient) -> None:
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.full((2, 16), 0.5, dtype=np.float32)
    result = client.infer("add_sub", add_sub_inputs(a, b))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def add_sub_document(batch: int = 1, **changes: Any) -> dict[str, Any]:
    """A valid JSON add_sub request; ``changes`` update INPUT0's fields."""
    data = list(range(16 * batch))
    first = {"name": "INPUT0", "shape": [batch, 16], "datatype": "FP32", "data": data}
    second = {"name": "INPUT1", "shape": [batch, 16], "datatype": "FP32", "data": data}
    first.update(changes)
    return {"inputs": [first, second]}


def assert_error(response: requests.Response, status: int, *fragments: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    message = response.json()["error"]
    for fragment in fragments:
        assert fragment in message, message


# -- health and metadata through tritonclient ----------------------------------------------
def test_health(client: httpclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("add_sub")
    assert client.is_model_ready("add_sub", "1")
    assert not client.is_model_ready("broken")
    assert not client.is_model_ready("no_such_model")


def test_server_metadata(client: httpclient.InferenceServerClient) -> None:
    metadata = client.get_server_metadata()
    assert metadata["name"] == "inferplex"
    assert metadata["version"]
    assert "binary_tensor_data" in metadata["extensions"]
    assert "classification" in metadata["extensions"]


def test_model_metadata(client: httpclient.InferenceServerClient) -> None:
    metadata = client.get_model_metadata("add_sub")
    assert metadata["name"] == "add_sub"
    assert "1" in metadata["versions"]
    assert [(t["name"], t["datatype"], t["shape"]) for t in metadata["inputs"]] == [
        ("INPUT0", "FP32", [-1, 16]),
        ("INPUT1", "FP32", [-1, 16]),
    ]
    assert {t["name"] for t in metadata["outputs"]} == {"OUTPUT0", "OUTPUT1"}
    assert client.get_model_metadata("add_sub", "1")["name"] == "add_sub"


def test_model_config(client: httpclient.InferenceServerClient) -> None:
    config = client.get_model_config("add_sub")
    assert config["name"] == "add_sub"
    assert config["max_batch_size"] == 8
    assert [t["name"] for t in config["input"]] == ["INPUT0", "INPUT1"]
    # the platform named in config.pbtxt and the backend that serves it, as Triton shows them
    assert (config["platform"], config["backend"]) == ("onnxruntime_onnx", "onnxruntime")


def test_repository_index_lists_the_broken_model(client: httpclient.InferenceServerClient) -> None:
    index = client.get_model_repository_index()
    by_name = {entry["name"]: entry for entry in index}
    assert by_name["add_sub"]["state"] == "READY"
    assert by_name["broken"]["state"] == "UNAVAILABLE"
    assert by_name["broken"]["reason"]


def test_repository_index_ready_only(base: str) -> None:
    response = requests.post(f"{base}/v2/repository/index", json={"ready": True}, timeout=10)
    assert response.status_code == 200
    names = {entry["name"] for entry in response.json()}
    assert "add_sub" in names
    assert "broken" not in names
    response = requests.post(f"{base}/v2/repository/index", json={"ready": 1}, timeout=10)
    assert_error(response, 400, "'ready'")
    # a body up to --max-small-request-bytes is JSON all the same; a larger one is refused
    padded = b'{"ready": true}' + b" " * (15 << 10)
    response = requests.post(f"{base}/v2/repository/index", data=padded, timeout=10)
    assert response.status_code == 200
    assert "broken" not in {entry["name"] for entry in response.json()}
    response = requests.post(f"{base}/v2/repository/index", data=b" " * (15 << 10), timeout=10)
    assert "broken" in {entry["name"] for entry in response.json()}
    response = requests.post(f"{base}/v2/repository/index", data=padded * 8, timeout=10)
    assert_error(response, 413, "INFERPLEX_MAX_SMALL_REQUEST_BYTES")


def test_statistics_increase_after_inference(client: httpclient.InferenceServerClient) -> None:
    def counts() -> tuple[int, int]:
        stats = client.get_inference_statistics("add_sub")["model_stats"]
        (entry,) = [s for s in stats if s["version"] == "1"]
        return entry["inference_count"], entry["inference_stats"]["success"]["count"]

    before = counts()
    assert_add_sub_works(client)
    after = counts()
    assert after[0] >= before[0] + 2  # two rows in the batch
    assert after[1] >= before[1] + 1


def test_statistics_of_every_model(base: str) -> None:
    response = requests.get(f"{base}/v2/models/stats", timeout=10)
    assert response.status_code == 200
    names = {entry["name"] for entry in response.json()["model_stats"]}
    assert {"add_sub", "identity_fp32"} <= names
    assert_error(requests.get(f"{base}/v2/models/nope/stats", timeout=10), 404, "nope")


# -- inference through tritonclient --------------------------------------------------------
@pytest.mark.parametrize(("binary_in", "binary_out"), [(True, True), (False, False), (True, False)])
def test_add_sub(
    client: httpclient.InferenceServerClient, binary_in: bool, binary_out: bool
) -> None:
    a = np.linspace(-4, 4, 48, dtype=np.float32).reshape(3, 16)
    b = np.linspace(1, 2, 48, dtype=np.float32).reshape(3, 16)
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary_out),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary_out),
    ]
    result = client.infer("add_sub", add_sub_inputs(a, b, binary_in), outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    response = result.get_response()
    assert response["model_name"] == "add_sub"
    assert response["model_version"] == "1"
    for output in response["outputs"]:
        assert ("parameters" in output) is binary_out


@pytest.mark.parametrize("datatype", DATATYPES)
@pytest.mark.parametrize(
    ("binary_in", "binary_out"),
    [(True, True), (False, False), (True, False), (False, True)],
    ids=["bin-bin", "json-json", "bin-json", "json-bin"],
)
def test_identity_round_trip(
    client: httpclient.InferenceServerClient, datatype: str, binary_in: bool, binary_out: bool
) -> None:
    array = values_for(datatype, (2, 5))
    tensor = httpclient.InferInput("INPUT0", [2, 5], datatype)
    tensor.set_data_from_numpy(array, binary_data=binary_in)
    output = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary_out)
    result = client.infer(f"identity_{datatype.lower()}", [tensor], outputs=[output])
    returned = result.as_numpy("OUTPUT0")
    assert returned.shape == (2, 5)
    if datatype == "BYTES" and not binary_out:
        # tritonclient keeps JSON strings as str
        array = np.vectorize(bytes.decode, otypes=[object])(array)
    assert returned.tolist() == array.tolist()
    if datatype != "BYTES":
        assert returned.dtype == array.dtype


def test_all_outputs_binary_by_default(client: httpclient.InferenceServerClient) -> None:
    a = np.ones((1, 16), dtype=np.float32)
    result = client.infer("add_sub", add_sub_inputs(a, a))  # binary_data_output: true
    for output in result.get_response()["outputs"]:
        assert set(output["parameters"]) == {"binary_data_size"}
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)


def test_request_id_is_echoed(client: httpclient.InferenceServerClient) -> None:
    a = np.ones((1, 16), dtype=np.float32)
    result = client.infer("add_sub", add_sub_inputs(a, a), request_id="req-42")
    assert result.get_response()["id"] == "req-42"
    result = client.infer("add_sub", add_sub_inputs(a, a))
    assert "id" not in result.get_response()


def test_requested_output_subset(client: httpclient.InferenceServerClient) -> None:
    a = np.full((1, 16), 3, dtype=np.float32)
    b = np.ones((1, 16), dtype=np.float32)
    outputs = [httpclient.InferRequestedOutput("OUTPUT1", binary_data=False)]
    result = client.infer("add_sub", add_sub_inputs(a, b), outputs=outputs)
    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT1"]
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_explicit_version(client: httpclient.InferenceServerClient) -> None:
    a = np.ones((1, 16), dtype=np.float32)
    result = client.infer("add_sub", add_sub_inputs(a, a), model_version="1")
    assert result.get_response()["model_version"] == "1"


@pytest.mark.parametrize("datatype", ["FP16", "FP32", "FP64"])
@pytest.mark.parametrize("binary_in", [True, False])
@pytest.mark.parametrize("binary_out", [True, False])
def test_nan_and_inf_pass_through(
    client: httpclient.InferenceServerClient, datatype: str, binary_in: bool, binary_out: bool
) -> None:
    """perf_analyzer sends random bits; NaN must neither crash nor change. In JSON they are
    the literals NaN / Infinity / -Infinity both ways, as Triton reads and writes them."""
    array = np.array([[np.nan, np.inf, -np.inf, 1.5]], dtype=V2_TO_NUMPY[datatype])
    tensor = httpclient.InferInput("INPUT0", [1, 4], datatype)
    tensor.set_data_from_numpy(array, binary_data=binary_in)
    model = f"identity_{datatype.lower()}"
    wanted = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary_out)]
    result = client.infer(model, [tensor], outputs=wanted)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), array)


def test_json_infinity_is_no_overflow_but_a_large_number_is(base: str) -> None:
    document = add_sub_document()
    document["inputs"][0]["data"] = [1e39] + [0.0] * 15
    response = requests.post(f"{base}/v2/models/add_sub/infer", json=document, timeout=10)
    assert_error(response, 400, "INPUT0", "outside the range of FP32")
    body = orjson.dumps(add_sub_document()).replace(b"[0,", b"[-Infinity,", 1)
    response = requests.post(f"{base}/v2/models/add_sub/infer", data=body, timeout=10)
    assert response.status_code == 200, response.text
    assert "-Infinity" in response.text


# -- raw HTTP ------------------------------------------------------------------------------
def test_json_mode_with_header_length_equal_to_the_body(base: str) -> None:
    """perf_analyzer's JSON mode sends Inference-Header-Content-Length = the whole body."""
    body = orjson.dumps(add_sub_document())
    response = requests.post(
        f"{base}/v2/models/add_sub/infer",
        data=body,
        headers={"Inference-Header-Content-Length": str(len(body))},
        timeout=10,
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    outputs = {o["name"]: o for o in response.json()["outputs"]}
    assert outputs["OUTPUT0"]["data"] == [2.0 * x for x in range(16)]
    assert "parameters" not in outputs["OUTPUT0"]


def test_binary_response_headers(base: str) -> None:
    document = add_sub_document()
    document["parameters"] = {"binary_data_output": True}
    response = requests.post(f"{base}/v2/models/add_sub/infer", json=document, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/octet-stream"
    header_length = int(response.headers["inference-header-content-length"])
    header = orjson.loads(response.content[:header_length])
    sizes = [o["parameters"]["binary_data_size"] for o in header["outputs"]]
    assert sizes == [64, 64]
    assert len(response.content) == header_length + 128


def test_health_endpoints_return_empty_bodies(base: str) -> None:
    for path in ("/v2/health/live", "/v2/health/ready", "/v2/models/add_sub/ready"):
        response = requests.get(base + path, timeout=10)
        assert (response.status_code, response.content) == (200, b"")
    assert requests.get(f"{base}/v2/models/broken/ready", timeout=10).status_code == 503


def test_unknown_path_and_wrong_method(base: str) -> None:
    assert_error(requests.get(f"{base}/v2/nothing/here", timeout=10), 404, "/v2/nothing/here")
    assert_error(requests.get(f"{base}/v3", timeout=10), 404, "/v3")
    response = requests.get(f"{base}/v2/models/add_sub/infer", timeout=10)
    assert_error(response, 405, "GET", "POST")
    assert response.headers["allow"] == "POST"
    assert_error(requests.post(f"{base}/v2/health/live", timeout=10), 405, "POST", "GET")


def test_unknown_model_metadata_and_ready(base: str) -> None:
    assert_error(requests.get(f"{base}/v2/models/nope", timeout=10), 404, "nope")
    assert_error(requests.get(f"{base}/v2/models/nope/ready", timeout=10), 404, "nope")
    assert_error(requests.get(f"{base}/v2/models/nope/config", timeout=10), 404, "nope")
    response = requests.get(f"{base}/v2/models/add_sub/versions/99/ready", timeout=10)
    assert_error(response, 404, "99")


def test_a_model_that_failed_to_load_answers_unavailable(base: str) -> None:
    """Its metadata, config and statistics alike: 503 with the reason."""
    for path in ("", "/config", "/stats"):
        response = requests.get(f"{base}/v2/models/broken{path}", timeout=10)
        assert_error(response, 503, "broken")
    assert requests.get(f"{base}/v2/models/broken/ready", timeout=10).status_code == 503
    response = requests.post(f"{base}/v2/models/broken/infer", json=add_sub_document(), timeout=10)
    # Triton's words, then why
    assert_error(response, 503, "Request for unknown model: 'broken' has no available versions; ")


def binary_add_sub(declared: int, sent: int) -> tuple[bytes, dict[str, str]]:
    """An add_sub request whose INPUT0 declares ``declared`` bytes and carries ``sent``."""
    header = orjson.dumps(
        {"inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
             "parameters": {"binary_data_size": declared}},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [0.0] * 16},
        ]}
    )  # fmt: skip
    headers = {"Inference-Header-Content-Length": str(len(header))}
    return header + b"\0" * sent, headers


BAD_INFER: list[tuple[str, str, Any, int, tuple[str, ...]]] = [
    ("malformed JSON", "add_sub", b'{"inputs": [', 400, ("malformed JSON",)),
    (
        "unknown model",
        "nope",
        add_sub_document(),
        404,
        ("Request for unknown model: 'nope' is not found",),  # Triton's words
    ),
    (
        "unknown version",
        "add_sub/versions/99",
        add_sub_document(),
        404,
        ("Request for unknown model: 'add_sub' version 99 is not found; served versions: 1",),
    ),
    ("unknown input", "add_sub", add_sub_document(name="INPUT9"), 400, ("INPUT9",)),
    (
        "missing input",
        "add_sub",
        {"inputs": add_sub_document()["inputs"][:1]},
        400,
        ("INPUT1",),
    ),
    (
        "wrong datatype",
        "add_sub",
        add_sub_document(datatype="INT32"),
        400,
        ("INPUT0", "INT32", "FP32"),
    ),
    ("unknown datatype", "add_sub", add_sub_document(datatype="FLOAT"), 400, ("INPUT0", "FLOAT")),
    (
        "wrong shape",
        "add_sub",
        add_sub_document(shape=[2, 8], data=list(range(16))),
        400,
        ("INPUT0", "[2, 8]"),
    ),
    (
        "wrong element count",
        "add_sub",
        add_sub_document(data=list(range(15))),
        400,
        ("INPUT0", "16", "15"),
    ),
    ("non-numeric data", "add_sub", add_sub_document(data=["x"] * 16), 400, ("INPUT0",)),
    ("batch above max_batch_size", "add_sub", add_sub_document(batch=9), 400, ("INPUT0", "8")),
]


@pytest.mark.parametrize(
    ("path", "document", "status", "fragments"),
    [case[1:] for case in BAD_INFER],
    ids=[case[0] for case in BAD_INFER],
)
def test_bad_inference_requests(
    base: str,
    client: httpclient.InferenceServerClient,
    path: str,
    document: Any,
    status: int,
    fragments: tuple[str, ...],
) -> None:
    body = document if isinstance(document, bytes) else orjson.dumps(document)
    response = requests.post(f"{base}/v2/models/{path}/infer", data=body, timeout=10)
    assert_error(response, status, *fragments)
    assert_add_sub_works(client)


@pytest.mark.parametrize(
    ("declared", "sent", "fragments"),
    [(60, 64, ("INPUT0", "60", "64")), (64, 60, ("INPUT0", "64", "60")), (64, 70, ("6 bytes",))],
    ids=["size below shape", "body shorter than size", "bytes left over"],
)
def test_binary_size_mismatch(
    base: str,
    client: httpclient.InferenceServerClient,
    declared: int,
    sent: int,
    fragments: tuple[str, ...],
) -> None:
    body, headers = binary_add_sub(declared, sent)
    response = requests.post(
        f"{base}/v2/models/add_sub/infer", data=body, headers=headers, timeout=10
    )
    assert_error(response, 400, *fragments)
    assert_add_sub_works(client)


def test_header_length_beyond_the_body(base: str, client: httpclient.InferenceServerClient) -> None:
    body = orjson.dumps(add_sub_document())
    headers = {"Inference-Header-Content-Length": str(len(body) + 10)}
    response = requests.post(
        f"{base}/v2/models/add_sub/infer", data=body, headers=headers, timeout=10
    )
    assert_error(response, 400, "Inference-Header-Content-Length")
    assert_add_sub_works(client)


def test_tritonclient_sees_the_error_message(client: httpclient.InferenceServerClient) -> None:
    tensor = httpclient.InferInput("INPUT0", [9, 16], "FP32")
    tensor.set_data_from_numpy(np.zeros((9, 16), dtype=np.float32))
    other = httpclient.InferInput("INPUT1", [9, 16], "FP32")
    other.set_data_from_numpy(np.zeros((9, 16), dtype=np.float32))
    with pytest.raises(InferenceServerException) as caught:
        client.infer("add_sub", [tensor, other])
    assert caught.value.status() == "400"
    assert "max_batch_size" in caught.value.message()


def test_body_above_the_limit(base: str, client: httpclient.InferenceServerClient) -> None:
    body = b" " * (MAX_REQUEST_BYTES + 1)
    response = requests.post(f"{base}/v2/models/add_sub/infer", data=body, timeout=30)
    assert_error(response, 413, str(MAX_REQUEST_BYTES))
    assert_add_sub_works(client)


def test_chunked_body_above_the_limit(base: str, client: httpclient.InferenceServerClient) -> None:
    """Without a Content-Length the limit is enforced on the bytes received so far."""
    chunk = b" " * 65536
    chunks = (chunk for _ in range(MAX_REQUEST_BYTES // len(chunk) + 2))
    response = requests.post(f"{base}/v2/models/add_sub/infer", data=chunks, timeout=30)
    assert_error(response, 413, str(MAX_REQUEST_BYTES))
    assert_add_sub_works(client)


@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_requests_and_responses(
    client: httpclient.InferenceServerClient, algorithm: str, binary: bool
) -> None:
    """tritonclient's request_compression_algorithm and response_compression_algorithm, as
    Triton's HTTP endpoint takes them."""
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.float32)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0",)]
    result = client.infer(
        "add_sub",
        add_sub_inputs(a, b, binary),
        outputs=outputs,
        request_compression_algorithm=algorithm,
        response_compression_algorithm=algorithm,
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    assert result.get_response()["model_name"] == "add_sub"


def test_compressed_response_is_what_the_client_accepts(base: str) -> None:
    body, headers = binary_add_sub(64, 64)
    for accept, coding in (("br, deflate;q=0.5", "deflate"), ("gzip;q=0, br", None)):
        response = requests.post(
            f"{base}/v2/models/add_sub/infer",
            data=body,
            headers={**headers, "Accept-Encoding": accept},
            timeout=10,
            stream=True,  # the raw bytes, as they came
        )
        raw = response.raw.read(decode_content=False)
        assert response.status_code == 200
        assert response.headers.get("Content-Encoding") == coding
        plain = zlib.decompress(raw) if coding else raw
        assert orjson.loads(plain)["model_name"] == "add_sub"  # JSON outputs: all JSON


def test_bad_compressed_requests(base: str, client: httpclient.InferenceServerClient) -> None:
    url = f"{base}/v2/models/add_sub/infer"
    response = requests.post(url, data=b"\x1f\x8bxx", headers={"Content-Encoding": "gzip"})
    assert_error(response, 400, "the gzip request body could not be read")
    response = requests.post(url, data=b"x", headers={"Content-Encoding": "br"}, timeout=10)
    assert_error(response, 501, "Content-Encoding br is not supported", "gzip, deflate")
    # a small body that inflates past the limit is refused without inflating all of it
    bomb = gzip.compress(b" " * (MAX_REQUEST_BYTES + 1))
    response = requests.post(url, data=bomb, headers={"Content-Encoding": "gzip"}, timeout=30)
    assert_error(response, 413, "once decompressed", str(MAX_REQUEST_BYTES))
    assert_add_sub_works(client)
