"""Large bodies leave the event loop, are checked from what they declare before their data is
decoded, and every client-caused decode failure is an InvalidInputError (issue 18, part 3)."""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson
import pytest

from inferplex.config.model_config import ModelConfig
from inferplex.core.validation import RequestValidator
from inferplex.dataplane import OFFLOAD_BYTES, CallMeta, DataPlane
from inferplex.dataplane import plane as plane_module
from inferplex.dataplane.checks import declared_checks
from inferplex.datatypes import serialize_bytes
from inferplex.errors import InvalidInputError, PayloadTooLargeError
from inferplex.protocol.v2 import generated as pb
from inferplex.protocol.v2 import grpc_codec, rest, rest_json
from inferplex.protocol.v2.codecs import GRPC, REST
from inferplex.protocol.v2.rest import decode_infer_request
from inferplex.protocol.v2.rest_encode import encode_infer_response
from inferplex.security.limits import RequestLimits
from inferplex.types import InferenceRequest, InferenceResponse, Tensor

BIG = OFFLOAD_BYTES + 1


def model_config() -> ModelConfig:
    return ModelConfig.model_validate(
        {
            "name": "m",
            "max_batch_size": 8,
            "input": [
                {"name": "TEXT", "data_type": "TYPE_STRING", "dims": [-1]},
                {"name": "IMAGE", "data_type": "TYPE_FP32", "dims": [3, 4]},
            ],
            "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [1]}],
        }
    )


class Models:
    """The engine's input_checks, for one model 'm'."""

    def __init__(self) -> None:
        self.validator = RequestValidator(model_config())
        self.asked: list[tuple[str, str]] = []

    def input_checks(self, name: str, version: str = "") -> RequestValidator | None:
        self.asked.append((name, version))
        return self.validator if name == "m" else None

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        """Its first input back as OUT."""
        first = request.inputs[0]
        return InferenceResponse("m", "1", [Tensor("OUT", first.datatype, first.shape, first.data)])

    async def stream(self, request: InferenceRequest) -> Any:
        raise AssertionError("these tests answer once")

    def model_config(self, name: str, version: str = "") -> ModelConfig:
        return model_config()

    shared_memory = None


def binary_body(name: str, shape: list[int], elements: list[bytes]) -> tuple[bytes, int]:
    raw = serialize_bytes(np.array([*elements, None], dtype=object)[:-1])
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": name,
                    "datatype": "BYTES",
                    "shape": shape,
                    "parameters": {"binary_data_size": len(raw)},
                }
            ]
        }
    )
    return header + raw, len(header)


@pytest.fixture
def never_decode_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to cut BYTES elements fails the test."""

    def refuse(*args: Any) -> Any:
        raise AssertionError("the BYTES data was decoded")

    monkeypatch.setattr(rest, "deserialize_bytes", refuse)
    monkeypatch.setattr(grpc_codec, "deserialize_bytes", refuse)
    monkeypatch.setattr(rest_json, "_bytes_from_json", refuse)


# -- what a request declares is checked before its data is decoded -------------------------


@pytest.mark.parametrize(
    ("name", "shape", "refusal", "message"),
    [
        ("TEXT", [1, 11], PayloadTooLargeError, "11 elements, above the limit of 10"),
        ("NOPE", [1, 2], InvalidInputError, "unknown input 'NOPE' for model 'm'"),
        ("IMAGE", [1, 2], InvalidInputError, "datatype BYTES, model 'm' expects FP32"),
        ("TEXT", [9, 1], InvalidInputError, "batch size 9, model 'm' accepts 1 to"),
        ("TEXT", [1, 1, 1], InvalidInputError, r"shape \[1, 1, 1\], model 'm' expects"),
    ],
)
def test_rest_checks_declared_inputs_before_decoding_them(
    never_decode_bytes: None,
    name: str,
    shape: list[int],
    refusal: type[Exception],
    message: str,
) -> None:
    body, header_length = binary_body(name, shape, [b""] * int(np.prod(shape)))
    checks = declared_checks(RequestLimits(10, 100), Models())
    with pytest.raises(refusal, match=message):
        decode_infer_request(body, header_length, "m", "", None, checks)
    json_body = orjson.dumps(
        {"inputs": [{"name": name, "datatype": "BYTES", "shape": shape, "data": ["a"]}]}
    )
    with pytest.raises(refusal, match=message):
        decode_infer_request(json_body, None, "m", "", None, checks)


def test_grpc_checks_declared_inputs_before_decoding_them(never_decode_bytes: None) -> None:
    message = pb.ModelInferRequest(model_name="m", model_version="2")
    message.inputs.add(name="TEXT", datatype="BYTES", shape=[1, 5])
    message.raw_input_contents.append(bytes(20))
    models = Models()
    checks = declared_checks(RequestLimits(4, 100), models)
    with pytest.raises(PayloadTooLargeError, match="5 elements, above the limit of 4"):
        grpc_codec.decode_infer_request_bytes(message.SerializeToString(), None, checks)
    assert models.asked == [("m", "2")]


def test_a_model_that_is_not_known_yet_gets_only_the_limits() -> None:
    body, header_length = binary_body("ANY", [1, 2], [b"a", b"b"])
    checks = declared_checks(RequestLimits(3, 100), Models())
    request = decode_infer_request(body, header_length, "other", "", None, checks)
    assert request.inputs[0].data.tolist() == [[b"a", b"b"]]


# -- large bodies in a worker thread, small ones on the loop --------------------------------


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the functions asyncio.to_thread ran."""
    seen: list[str] = []
    real = asyncio.to_thread

    async def to_thread(function: Callable[..., Any], *args: Any) -> Any:
        seen.append(function.__name__)
        return await real(function, *args)

    monkeypatch.setattr(plane_module.asyncio, "to_thread", to_thread)
    return seen


def rest_meta(model: str, header_length: int | None) -> CallMeta:
    return CallMeta(model, "", header_length=header_length)


async def test_large_rest_bodies_decode_and_encode_in_a_thread(hops: list[str]) -> None:
    limits = RequestLimits(10**9, 10**9)
    count = BIG // 4
    body, header_length = binary_body("TEXT", [1, count], [b""] * count)
    door = DataPlane(Models(), limits)
    _, payload, _ = await door.infer(REST, body, rest_meta("m", header_length))
    assert len(orjson.loads(payload)["outputs"][0]["data"]) == count
    assert hops == ["_decode", "encode"]


async def test_small_bodies_and_fixed_size_binary_tensors_stay_on_the_loop(
    hops: list[str],
) -> None:
    door = DataPlane(Models(), RequestLimits(10**9, 10**9))
    small, small_length = binary_body("TEXT", [1, 2], [b"a", b"b"])
    await door.infer(REST, small, rest_meta("m", small_length))
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "IMAGE",
                    "datatype": "FP32",
                    "shape": [1, BIG],
                    "parameters": {"binary_data_size": 4 * BIG},
                }
            ],
            "parameters": {"binary_data_output": True},
        }
    )
    image = np.ones((1, BIG), np.float32)
    assert REST.work(header + image.tobytes(), rest_meta("free", len(header))) == len(header)
    assert hops == []  # a view of the body: no work to move


async def test_large_grpc_messages_decode_in_a_thread_unless_seen_before(
    hops: list[str],
) -> None:
    door = DataPlane(Models(), RequestLimits(10**9, 10**9))
    message = pb.ModelInferRequest(model_name="free")  # no model checks
    message.inputs.add(name="IMAGE", datatype="FP32", shape=[1, BIG])
    message.raw_input_contents.append(np.ones(BIG, np.float32).tobytes())
    data = message.SerializeToString() + b""  # a message of a size no other test sends
    first = await door.infer(GRPC, data, CallMeta())
    assert hops == ["_decode", "encode"]
    again = await door.infer(GRPC, data, CallMeta())
    assert hops == ["_decode", "encode", "encode"]  # the second matched the first's layout
    assert first == again
    assert pb.ModelInferResponse.FromString(again).raw_output_contents[0] == data[-4 * BIG :]


async def test_limits_are_checked_on_the_decoded_request_either_way() -> None:
    door = DataPlane(Models(), RequestLimits(10**9, 4))
    for elements in ([b"12345"], [b"12345"] * (BIG // 9)):
        body, length = binary_body("TEXT", [1, len(elements)], elements)
        with pytest.raises(PayloadTooLargeError, match="element of 5 bytes"):
            await door.infer(REST, body, rest_meta("m", length))


# -- client errors are InvalidInputErrors, never a RecursionError or a 500 -----------------


@pytest.mark.parametrize("leaf", [b"NaN", b"1", b'"a"', b"Infinity"])
def test_deeply_nested_data_is_invalid_input(leaf: bytes) -> None:
    for datatype in (b"FP32", b"BYTES"):
        data = b"[" * 5000 + leaf + b"]" * 5000
        body = b'{"inputs":[{"name":"x","datatype":"' + datatype + b'","shape":[1],"data":'
        with pytest.raises(InvalidInputError):
            decode_infer_request(body + data + b"}]}", None, "m")


def test_nested_nan_past_the_recursion_limit_names_the_problem() -> None:
    data = b"[" * 3000 + b"NaN" + b"]" * 3000
    body = b'{"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":' + data + b"}]}"
    with pytest.raises(InvalidInputError, match=r"malformed JSON.*nested too deeply"):
        decode_infer_request(body, None, "m")


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("request", "request 'parameters' has a value nested more than 32 levels"),
        ("input", "input 'x': 'parameters' has a value nested more than 32 levels"),
        ("output", "output 'y': 'parameters' has a value nested more than 32 levels"),
    ],
)
def test_deeply_nested_parameters_are_invalid_input(where: str, message: str) -> None:
    """A Python handler's request is pickled: 900 levels made it a RecursionError (500)."""
    deep: Any = 1
    for _ in range(900):
        deep = {"a": deep}
    document: dict[str, Any] = {
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1.0]}],
        "outputs": [{"name": "y"}],
    }
    target = {"request": document, "input": document["inputs"][0]}.get(
        where, document["outputs"][0]
    )
    target["parameters"] = {"p": [deep]}
    body = json.dumps(document).encode()  # orjson refuses to write 900 levels
    with pytest.raises(InvalidInputError, match=message):
        decode_infer_request(body, None, "m")
    shallow = {"p": {"q": [1, {"r": "s"}]}}
    target["parameters"] = shallow
    decode_infer_request(orjson.dumps(document), None, "m")


# -- JSON data: nesting kept lenient, memory given back, GC paused for large bodies ----------


def test_bytes_data_may_nest_any_way_row_major() -> None:
    for data in (["a", "b", "c", "d"], [["a", "b"], ["c", "d"]], [["a"], "b", [["c"], "d"]]):
        tensor = {"name": "x", "datatype": "BYTES", "shape": [2, 2], "data": data}
        request = decode_infer_request(orjson.dumps({"inputs": [tensor]}), None, "m")
        assert request.inputs[0].data.tolist() == [[b"a", b"b"], [b"c", b"d"]]
    tensor = {"name": "x", "datatype": "BYTES", "shape": [2], "data": [["a"], [1]]}
    with pytest.raises(
        InvalidInputError, match="'x': BYTES 'data' must hold strings, got a number"
    ):
        decode_infer_request(orjson.dumps({"inputs": [tensor]}), None, "m")


def test_converted_json_values_are_let_go() -> None:
    """The caller gives up the lists it converts: their objects are freed as they go."""
    strings = [["a", "b"]] * 100_000
    numbers = [[1.5, 2.5]] * 100_000
    as_bytes = rest_json.array_from_json(
        strings, "BYTES", np.dtype(object), (200_000,), 200_000, "x"
    )
    as_floats = rest_json.array_from_json(
        numbers, "FP32", np.dtype(np.float32), (200_000,), 200_000, "y"
    )
    assert strings == numbers == []
    assert as_bytes[-1] == b"b" and as_floats[-1] == 2.5


def test_release_empties_nested_lists_of_any_shape() -> None:
    for values in ([[0] * 10] * 50_000, [[[0] * 200_000]], [1, [2] * 100_000, 3], []):
        rest_json.release(values)
        assert values == []


@pytest.mark.parametrize("enabled", [True, False])
def test_large_json_bodies_pause_the_collector_and_leave_it_as_it_was(
    monkeypatch: pytest.MonkeyPatch, enabled: bool
) -> None:
    seen: list[bool] = []
    real = rest_json.array_from_json

    def spy(*args: Any) -> np.ndarray:
        seen.append(gc.isenabled())
        return real(*args)

    monkeypatch.setattr(rest, "array_from_json", spy)
    data = [0.5] * (rest_json.GC_PAUSE_BYTES // 4)
    body = orjson.dumps(
        {"inputs": [{"name": "x", "datatype": "FP32", "shape": [len(data)], "data": data}]}
    )
    (gc.enable if enabled else gc.disable)()
    try:
        decode_infer_request(body, None, "m")
        with pytest.raises(InvalidInputError):
            decode_infer_request(body.replace(b"0.5]", b'"z"]'), None, "m")
        assert gc.isenabled() is enabled
    finally:
        gc.enable()
    assert seen == [False, False]
    small = orjson.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}]})
    decode_infer_request(small, None, "m")
    assert seen[-1] is True


def test_large_json_outputs_are_written_a_chunk_at_a_time() -> None:
    count = 3 * 65536 + 5
    values = np.linspace(-1, 1, count, dtype=np.float32)
    values[7] = np.nan
    outputs = [
        Tensor("f", "FP32", (count,), np.arange(count, dtype=np.float32)),
        Tensor("n", "FP32", (count,), values),
        Tensor(
            "s",
            "BYTES",
            (count,),
            np.array([b"ab", "\u00e9".encode()] * (count // 2) + [b"c"], dtype=object),
        ),
    ]
    payload, header_length = encode_infer_response(
        InferenceResponse("m", "1", outputs), InferenceRequest("m", [])
    )
    assert header_length is None
    written = json.loads(payload)["outputs"]
    assert written[0]["data"] == list(range(count))
    assert np.array_equal(np.array(written[1]["data"], np.float32), values, equal_nan=True)
    assert written[2]["data"][-3:] == ["ab", "\u00e9", "c"]
