"""The V2 REST codec: JSON and binary tensor data <-> core types, and every bad input."""

from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplex.datatypes import V2_TO_NUMPY, serialize_bytes
from inferplex.errors import InvalidInputError
from inferplex.protocol.v2 import rest
from inferplex.protocol.v2.rest import decode_infer_request, parse_header_length
from inferplex.protocol.v2.rest_encode import encode_infer_response
from inferplex.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor

DATATYPES = sorted(V2_TO_NUMPY)


def sample(datatype: str, shape: tuple[int, ...] = (2, 3)) -> np.ndarray:
    """Values that exercise each type's range (extremes, signs, fractions, non-ASCII)."""
    count = math.prod(shape)
    if datatype == "BYTES":
        values = [b"", b"abc", "\u00e9t\u00e9".encode(), b"x" * 40, b"0", b"\x7f"]
        return np.array((values * count)[:count], dtype=np.object_).reshape(shape)
    dtype = V2_TO_NUMPY[datatype]
    if datatype == "BOOL":
        return (np.arange(count) % 2 == 0).reshape(shape)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        values = [info.min, info.max, 0, 1, info.max // 3, info.min // 5]
    else:
        values = [-1.5, 0.0, 0.25, 1e3, -2.0, float(np.finfo(dtype).max)]
    return np.array((values * count)[:count], dtype=dtype).reshape(shape)


def json_values(array: np.ndarray) -> list[Any]:
    if array.dtype == np.object_:
        return [item.decode() for item in array.reshape(-1)]
    return array.reshape(-1).tolist()


def binary_of(datatype: str, array: np.ndarray) -> bytes:
    return serialize_bytes(array) if datatype == "BYTES" else array.tobytes()


def decode(
    document: Any, binary: bytes = b"", header_length: int | None = None
) -> InferenceRequest:
    header = orjson.dumps(document)
    if binary and header_length is None:
        header_length = len(header)
    return decode_infer_request(header + binary, header_length, "model", "1")


def request_with(**input_fields: Any) -> dict[str, Any]:
    """A one-input request; fields given as None are left out."""
    tensor = {"name": "INPUT0", "shape": [2], "datatype": "FP32", "data": [1.0, 2.0]}
    tensor.update(input_fields)
    return {"inputs": [{k: v for k, v in tensor.items() if v is not None}]}


def split_response(body: bytes, header_length: int | None) -> tuple[dict[str, Any], bytes]:
    if header_length is None:
        return orjson.loads(body), b""
    return orjson.loads(body[:header_length]), body[header_length:]


def response_arrays(body: bytes, header_length: int | None) -> dict[str, np.ndarray]:
    """Decode a response the way tritonclient does."""
    header, rest = split_response(body, header_length)
    arrays: dict[str, np.ndarray] = {}
    offset = 0
    for output in header["outputs"]:
        datatype, shape = output["datatype"], output["shape"]
        if "parameters" in output:
            assert set(output["parameters"]) == {"binary_data_size"}
            size = output["parameters"]["binary_data_size"]
            chunk = rest[offset : offset + size]
            offset += size
            if datatype == "BYTES":
                request = decode(
                    {"inputs": [{"name": "x", "shape": shape, "datatype": "BYTES",
                                 "parameters": {"binary_data_size": size}}]},
                    chunk,
                )  # fmt: skip
                arrays[output["name"]] = request.inputs[0].data
            else:
                arrays[output["name"]] = np.frombuffer(chunk, V2_TO_NUMPY[datatype]).reshape(shape)
        else:
            values = output["data"]
            if datatype == "BYTES":
                values = [v.encode() for v in values]
            dtype = V2_TO_NUMPY[datatype]
            arrays[output["name"]] = np.array(values, dtype=dtype).reshape(shape)
    assert offset == len(rest)
    return arrays


def echo(request: InferenceRequest, **response_fields: Any) -> InferenceResponse:
    """A response returning every input as an output of the same name."""
    return InferenceResponse(
        model_name=request.model_name,
        model_version="1",
        outputs=list(request.inputs),
        id=request.id,
        **response_fields,
    )


def assert_same(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype
    assert actual.tolist() == expected.tolist()


# -- round trips ---------------------------------------------------------------------------
@pytest.mark.parametrize("datatype", DATATYPES)
def test_json_round_trip_every_datatype(datatype: str) -> None:
    array = sample(datatype)
    request = decode(
        {"id": "r1", "inputs": [{"name": "INPUT0", "shape": [2, 3], "datatype": datatype,
                                 "data": json_values(array)}]}
    )  # fmt: skip
    (tensor,) = request.inputs
    assert (tensor.name, tensor.datatype, tensor.shape) == ("INPUT0", datatype, (2, 3))
    assert_same(tensor.data, array)

    body, header_length = encode_infer_response(echo(request), request)
    assert header_length is None
    header = orjson.loads(body)
    assert header["id"] == "r1"
    assert "parameters" not in header["outputs"][0]
    assert_same(response_arrays(body, None)["INPUT0"], array)


@pytest.mark.parametrize("datatype", DATATYPES)
def test_binary_round_trip_every_datatype(datatype: str) -> None:
    array = sample(datatype)
    raw = binary_of(datatype, array)
    request = decode(
        {"inputs": [{"name": "INPUT0", "shape": [2, 3], "datatype": datatype,
                     "parameters": {"binary_data_size": len(raw)}}],
         "parameters": {"binary_data_output": True}},
        raw,
    )  # fmt: skip
    assert_same(request.inputs[0].data, array)

    body, header_length = encode_infer_response(echo(request), request)
    assert header_length is not None
    header, rest = split_response(body, header_length)
    assert header["outputs"][0]["parameters"] == {"binary_data_size": len(raw)}
    assert rest == raw
    assert_same(response_arrays(body, header_length)["INPUT0"], array)


def test_binary_inputs_are_views_of_the_body() -> None:
    array = np.arange(8, dtype=np.float32)
    request = decode(
        {"inputs": [{"name": "A", "shape": [2, 4], "datatype": "FP32",
                     "parameters": {"binary_data_size": 32}}]},
        array.tobytes(),
    )  # fmt: skip
    data = request.inputs[0].data
    assert not data.flags.owndata
    assert not data.flags.writeable  # a view of the immutable body, not a copy
    assert_same(data, array.reshape(2, 4))


@pytest.mark.parametrize("writable", [bytearray, lambda data: memoryview(bytearray(data))])
def test_a_body_read_in_place_gives_read_only_views_too(writable: Any) -> None:
    """The HTTP server reads a large body into a writable buffer: the tensors over it are
    read-only views all the same, on the first decode of a header and on the cached one."""
    header = orjson.dumps(REPEATED)
    for value in (1.0, 2.0):
        body = writable(header + repeated_body(value, b"abc"))
        request = decode_infer_request(body, len(header), "model", "1")
        data = request.inputs[0].data
        assert not data.flags.owndata
        assert not data.flags.writeable
        assert_same(data, np.array([[value, value]], np.float32))
        assert_same(request.inputs[1].data, np.array([b"abc", b"abc"], dtype=np.object_))


def test_a_json_body_read_in_place_decodes_as_bytes_would() -> None:
    values = list(range(20_000))  # a JSON body large enough to be read into place
    document = {"inputs": [{"name": "A", "shape": [20_000], "datatype": "INT64", "data": values}]}
    body = orjson.dumps(document)
    for sent in (body, memoryview(bytearray(body))):
        request = decode_infer_request(sent, None, "model", "1")
        assert_same(request.inputs[0].data, np.arange(20_000, dtype=np.int64))


def test_mixed_json_and_binary_inputs_consume_binary_in_order() -> None:
    first = np.array([1, 2, 3], dtype=np.int64)
    second = np.array([b"a", b"bc"], dtype=np.object_)
    request = decode(
        {"inputs": [
            {"name": "A", "shape": [3], "datatype": "INT64",
             "parameters": {"binary_data_size": 24}},
            {"name": "J", "shape": [1], "datatype": "FP64", "data": [0.5]},
            {"name": "B", "shape": [2], "datatype": "BYTES",
             "parameters": {"binary_data_size": len(serialize_bytes(second))}},
        ]},
        first.tobytes() + serialize_bytes(second),
    )  # fmt: skip
    assert [t.name for t in request.inputs] == ["A", "J", "B"]
    assert_same(request.inputs[0].data, first)
    assert_same(request.inputs[1].data, np.array([0.5]))
    assert_same(request.inputs[2].data, second)


REPEATED = {
    "id": "r",
    "inputs": [
        {"name": "A", "shape": [1, 2], "datatype": "FP32", "parameters": {"binary_data_size": 8}},
        {"name": "B", "shape": [2], "datatype": "BYTES", "parameters": {"binary_data_size": 14}},
    ],
    "outputs": [{"name": "Y", "parameters": {"binary_data": True}}],
    "parameters": {"binary_data_output": True},
}


def repeated_body(value: float, text: bytes) -> bytes:
    return np.array([value, value], np.float32).tobytes() + serialize_bytes(
        np.array([text, text], dtype=np.object_)
    )


def test_a_header_sent_again_decodes_each_body_of_its_own() -> None:
    """Clients send one JSON header with every request; its decoded form is kept, the tensors
    always come from the body at hand."""
    first = decode(REPEATED, repeated_body(1.0, b"abc"))
    second = decode(REPEATED, repeated_body(2.0, b"xyz"))
    assert_same(first.inputs[0].data, np.array([[1.0, 1.0]], np.float32))
    assert_same(second.inputs[0].data, np.array([[2.0, 2.0]], np.float32))
    assert_same(second.inputs[1].data, np.array([b"xyz", b"xyz"], dtype=np.object_))
    assert not second.inputs[0].data.flags.writeable
    assert (second.id, second.parameters) == ("r", {"binary_data_output": True})
    assert [(o.name, o.parameters) for o in second.outputs] == [("Y", {"binary_data": True})]
    assert (second.model_name, second.model_version) == ("model", "1")


@pytest.mark.parametrize("binary", [b"\0" * 4, repeated_body(1.0, b"abc") + b"\0"])
def test_a_header_sent_again_with_a_wrong_body_fails_as_it_would_the_first_time(
    binary: bytes,
) -> None:
    decode(REPEATED, repeated_body(1.0, b"abc"))
    with pytest.raises(InvalidInputError) as again:
        decode(REPEATED, binary)
    rest._LAYOUTS.clear()
    with pytest.raises(InvalidInputError) as first:
        decode(REPEATED, binary)
    assert again.value.message == first.value.message


def test_nested_json_data_is_read_row_major() -> None:
    request = decode(request_with(shape=[2, 2, 2], datatype="INT32",
                                  data=[[[1, 2], [3, 4]], [[5, 6], [7, 8]]]))  # fmt: skip
    assert_same(request.inputs[0].data, np.arange(1, 9, dtype=np.int32).reshape(2, 2, 2))


def test_nested_bytes_and_flat_data_for_a_matrix() -> None:
    request = decode(request_with(shape=[2, 2], datatype="BYTES", data=[["a", "b"], ["c", "d"]]))
    assert request.inputs[0].data.tolist() == [[b"a", b"b"], [b"c", b"d"]]
    request = decode(request_with(shape=[2, 2], datatype="FP32", data=[1, 2, 3, 4]))
    assert_same(request.inputs[0].data, np.arange(1, 5, dtype=np.float32).reshape(2, 2))


def test_fp16_from_json_numbers_and_back() -> None:
    request = decode(request_with(datatype="FP16", shape=[3], data=[0.5, -2, 65504]))
    data = request.inputs[0].data
    assert data.dtype == np.float16
    body, _ = encode_infer_response(echo(request), request)
    assert orjson.loads(body)["outputs"][0]["data"] == [0.5, -2.0, 65504.0]


def test_zero_element_tensors() -> None:
    request = decode(request_with(shape=[0, 3], data=[]))
    assert request.inputs[0].data.shape == (0, 3)
    request = decode(
        request_with(shape=[0], datatype="INT8", data=None, parameters={"binary_data_size": 0}),
        b"",
        header_length=None,
    )
    assert request.inputs[0].data.shape == (0,)


def test_request_fields_are_carried() -> None:
    document = request_with()
    document.update(
        id="abc",
        parameters={"priority": 2},
        outputs=[{"name": "OUT1", "parameters": {"binary_data": True}}, {"name": "OUT0"}],
    )
    request = decode(document)
    assert (request.model_name, request.model_version, request.id) == ("model", "1", "abc")
    assert request.parameters == {"priority": 2}
    assert request.outputs == [
        RequestedOutput("OUT1", {"binary_data": True}),
        RequestedOutput("OUT0", {}),
    ]


def test_header_length_equal_to_the_whole_body_is_json_mode() -> None:
    header = orjson.dumps(request_with())
    request = decode_infer_request(header, len(header), "model")
    assert request.inputs[0].data.tolist() == [1.0, 2.0]


# -- response encoding ---------------------------------------------------------------------
def response_for(request: InferenceRequest, **fields: Any) -> tuple[dict[str, Any], bytes]:
    outputs = [
        Tensor("OUT0", "FP32", (2,), np.array([1.0, 2.0], dtype=np.float32)),
        Tensor("OUT1", "INT32", (2,), np.array([3, 4], dtype=np.int32)),
    ]
    response = InferenceResponse("model", "1", outputs, **fields)
    return split_response(*encode_infer_response(response, request))


def test_binary_data_output_with_an_explicit_json_override() -> None:
    request = InferenceRequest(
        "model",
        [],
        outputs=[RequestedOutput("OUT0", {"binary_data": False}), RequestedOutput("OUT1")],
        parameters={"binary_data_output": True},
    )
    header, rest = response_for(request)
    out0, out1 = header["outputs"]
    assert out0 == {"name": "OUT0", "datatype": "FP32", "shape": [2], "data": [1.0, 2.0]}
    assert out1["parameters"] == {"binary_data_size": 8}
    assert rest == np.array([3, 4], dtype=np.int32).tobytes()


def test_per_output_binary_request_and_json_default() -> None:
    request = InferenceRequest(
        "model", [], outputs=[RequestedOutput("OUT1", {"binary_data": True})]
    )
    header, rest = response_for(request)
    assert "data" in header["outputs"][0]
    assert header["outputs"][1]["parameters"] == {"binary_data_size": 8}
    assert len(rest) == 8


def test_id_and_parameters_only_when_present() -> None:
    header, _ = response_for(InferenceRequest("model", []))
    assert set(header) == {"model_name", "model_version", "outputs"}
    header, _ = response_for(InferenceRequest("model", []), id="x", parameters={"k": 1})
    assert (header["id"], header["parameters"]) == ("x", {"k": 1})


def test_nan_and_inf_are_literals_in_json_and_exact_in_binary() -> None:
    values = np.array([np.nan, np.inf, -np.inf, 1.0], dtype=np.float32)
    tensor = Tensor("OUT0", "FP32", (4,), values)
    json_request = InferenceRequest("model", [])
    body, _ = encode_infer_response(InferenceResponse("m", "1", [tensor]), json_request)
    assert b'"data":[NaN,Infinity,-Infinity,1.0]' in body
    request = decode_infer_request(
        b'{"inputs":[{"name":"x","datatype":"FP32","shape":[3],"data":[NaN,-Infinity,2]}]}',
        None,
        "m",
        "",
    )
    np.testing.assert_array_equal(request.inputs[0].data, [np.nan, -np.inf, 2])
    binary_request = InferenceRequest("model", [], parameters={"binary_data_output": True})
    body, length = encode_infer_response(InferenceResponse("m", "1", [tensor]), binary_request)
    assert body[length:] == values.tobytes()


def test_a_lone_surrogate_beside_a_nan_is_a_400_naming_the_input() -> None:
    """NaN sends the body through Python's json, which lets an unpaired \\ud800 through as a
    str that UTF-8 cannot encode (was a UnicodeEncodeError: a 500)."""
    body = (
        b'{"inputs":[{"name":"y","datatype":"FP32","shape":[1],"data":[NaN]},'
        b'{"name":"x","datatype":"BYTES","shape":[1],"data":["\\ud800"]}]}'
    )
    with pytest.raises(InvalidInputError, match="input 'x': a string holds a lone UTF-16"):
        decode_infer_request(body, None, "m", "")


def test_outputs_are_coerced_to_their_declared_datatype() -> None:
    tensor = Tensor("OUT0", "FP32", (2, 2), np.arange(4, dtype=">f8").reshape(2, 2).T)
    request = InferenceRequest("model", [], parameters={"binary_data_output": True})
    body, length = encode_infer_response(InferenceResponse("m", "1", [tensor]), request)
    expected = np.array([[0, 2], [1, 3]], dtype=np.float32)
    assert_same(response_arrays(body, length)["OUT0"], expected)


def test_bytes_output_that_is_not_utf8_asks_for_binary_data() -> None:
    tensor = Tensor("OUT0", "BYTES", (1,), np.array([b"\xff\xfe"], dtype=np.object_))
    with pytest.raises(InvalidInputError, match=r"OUT0.*binary_data"):
        encode_infer_response(InferenceResponse("m", "1", [tensor]), InferenceRequest("m", []))


def test_bytes_output_of_str_elements() -> None:
    tensor = Tensor("OUT0", "BYTES", (2,), np.array(["a", "\u00e9"], dtype=np.object_))
    body, _ = encode_infer_response(
        InferenceResponse("m", "1", [tensor]), InferenceRequest("m", [])
    )
    assert orjson.loads(body)["outputs"][0]["data"] == ["a", "\u00e9"]


# -- bad input: each message names the field -----------------------------------------------
BAD_DOCUMENTS: list[tuple[str, Any, str]] = [
    ("not an object", [1, 2], "JSON object"),
    ("inputs missing", {"id": "x"}, "'inputs'"),
    ("inputs not a list", {"inputs": {"name": "a"}}, "'inputs'"),
    ("input not an object", {"inputs": [3]}, r"inputs\[0\]"),
    ("name missing", request_with(name=None), r"inputs\[0\]: 'name'"),
    ("name empty", request_with(name=""), r"inputs\[0\]: 'name'"),
    ("unknown datatype", request_with(datatype="FLOAT32"), "INPUT0.*unknown datatype 'FLOAT32'"),
    ("datatype missing", request_with(datatype=None), "INPUT0.*unknown datatype"),
    ("shape missing", request_with(shape=None), "INPUT0.*'shape'"),
    ("negative dim", request_with(shape=[-1]), "INPUT0.*'shape'"),
    ("fractional dim", request_with(shape=[2.0]), "INPUT0.*'shape'"),
    ("boolean dim", request_with(shape=[True, 2]), "INPUT0.*'shape'"),
    ("too few elements", request_with(shape=[3]), "INPUT0.*needs 3 elements.*has 2"),
    ("too many nested", request_with(shape=[1, 1], data=[[1], [2]]), "INPUT0.*needs 1 elements"),
    ("ragged", request_with(shape=[3], data=[[1, 2], [3]]), "INPUT0.*rectangular"),
    ("data not a list", request_with(data=1.0, shape=[1]), "INPUT0.*'data' must be a list"),
    ("no data", request_with(data=None), "INPUT0.*no data"),
    ("strings for FP32", request_with(data=["1", "2"]), "INPUT0.*numbers for datatype FP32"),
    ("null in data", request_with(data=[1, None]), "INPUT0.*numbers"),
    ("object in data", request_with(data=[1, {"a": 1}]), "INPUT0.*numbers"),
    ("bool for INT32", request_with(datatype="INT32", data=[True, False]), "INPUT0.*integers"),
    ("float for INT32", request_with(datatype="INT32", data=[1.5, 2]), "INPUT0.*integers"),
    ("int for BOOL", request_with(datatype="BOOL", data=[1, 0]), "INPUT0.*true/false"),
    ("UINT8 overflow", request_with(datatype="UINT8", data=[1, 256]), "INPUT0.*range of UINT8"),
    ("UINT32 negative", request_with(datatype="UINT32", data=[-1, 0]), "INPUT0.*range of UINT32"),
    ("INT8 underflow", request_with(datatype="INT8", data=[-129, 0]), "INPUT0.*range of INT8"),
    ("INT64 overflow", request_with(datatype="INT64", data=[-1, 2**63]), "INPUT0.*range of INT64"),
    ("UINT64 fraction", request_with(datatype="UINT64", data=[2**63, 0.5]), "INPUT0.*integers"),
    ("FP16 overflow", request_with(datatype="FP16", data=[1e6, 0]), "INPUT0.*range of FP16"),
    ("number for BYTES", request_with(datatype="BYTES", data=["a", 1]), "INPUT0.*strings"),
    ("BYTES count", request_with(datatype="BYTES", data=[["a"], []]), "INPUT0.*needs 2"),
    ("id not a string", {**request_with(), "id": 7}, "'id'"),
    ("parameters not object", {**request_with(), "parameters": []}, "request 'parameters'"),
    (
        "input parameters not object",
        request_with(parameters=[1]),
        "INPUT0.*'parameters'",
    ),
    (
        "binary_data_output not bool",
        {**request_with(), "parameters": {"binary_data_output": "yes"}},
        "binary_data_output",
    ),
    ("shared memory input", request_with(parameters={"shared_memory_region": "r"}), "INPUT0"),
    ("outputs not a list", {**request_with(), "outputs": {"name": "o"}}, "'outputs'"),
    ("output not object", {**request_with(), "outputs": ["o"]}, r"outputs\[0\]"),
    ("output name missing", {**request_with(), "outputs": [{}]}, r"outputs\[0\]: 'name'"),
    (
        "output binary_data not bool",
        {**request_with(), "outputs": [{"name": "O", "parameters": {"binary_data": 1}}]},
        "output 'O'.*binary_data",
    ),
    (
        "classification not a count",
        {**request_with(), "outputs": [{"name": "O", "parameters": {"classification": 2.5}}]},
        "output 'O'.*'classification' must be a non-negative integer",
    ),
]


@pytest.mark.parametrize(
    ("document", "message"),
    [case[1:] for case in BAD_DOCUMENTS],
    ids=[case[0] for case in BAD_DOCUMENTS],
)
def test_bad_json_requests_name_the_field(document: Any, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        decode(document)


@pytest.mark.parametrize(
    "body", [b"", b"{", b'{"inputs": [}', b"\xff\xfe", b"nan", b'{"inputs": []} trailing']
)
def test_malformed_json(body: bytes) -> None:
    with pytest.raises(InvalidInputError, match="malformed JSON"):
        decode_infer_request(body, None, "model")


def binary_request(size: Any, datatype: str = "FP32", shape: list[int] | None = None) -> Any:
    return request_with(
        data=None, datatype=datatype, shape=shape or [2], parameters={"binary_data_size": size}
    )


BAD_BINARY: list[tuple[str, Any, bytes, str]] = [
    ("size too small for shape", binary_request(4), b"\0" * 4, "INPUT0.*4 bytes.*needs 8"),
    ("size too large for shape", binary_request(12), b"\0" * 12, "INPUT0.*12 bytes.*needs 8"),
    ("body shorter than size", binary_request(8), b"\0" * 6, "INPUT0.*only 6 bytes"),
    ("bytes left over", binary_request(8), b"\0" * 10, "2 bytes of binary data.*no input"),
    ("negative size", binary_request(-8), b"\0" * 8, "INPUT0.*binary_data_size"),
    ("size not an int", binary_request("8"), b"\0" * 8, "INPUT0.*binary_data_size"),
    ("size a float", binary_request(8.0), b"\0" * 8, "INPUT0.*binary_data_size"),
    ("size and data", request_with(parameters={"binary_data_size": 8}), b"\0" * 8, "INPUT0.*both"),
    (
        "BYTES truncated",
        binary_request(9, "BYTES"),
        serialize_bytes(np.array([b"abc", b"de"], dtype=object))[:9],
        "INPUT0.*BYTES",
    ),
    (
        "BYTES left over",
        binary_request(8, "BYTES", [1]),
        serialize_bytes(np.array([b"ab"], dtype=object)) + b"xy",
        "INPUT0.*left over",
    ),
]


@pytest.mark.parametrize(
    ("document", "binary", "message"),
    [case[1:] for case in BAD_BINARY],
    ids=[case[0] for case in BAD_BINARY],
)
def test_bad_binary_requests_name_the_field(document: Any, binary: bytes, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        decode(document, binary)


def test_binary_size_without_the_header_length() -> None:
    with pytest.raises(InvalidInputError, match=r"INPUT0.*Inference-Header-Content-Length"):
        decode(binary_request(8))


def test_header_length_larger_than_body() -> None:
    body = orjson.dumps(request_with())
    with pytest.raises(
        InvalidInputError, match=r"Inference-Header-Content-Length is \d+ but the body has only"
    ):
        decode_infer_request(body, len(body) + 1, "model")


@pytest.mark.parametrize("value", [b"-1", b"abc", b"", b"1.5"])
def test_bad_header_length_values(value: bytes) -> None:
    with pytest.raises(InvalidInputError, match="Inference-Header-Content-Length"):
        parse_header_length(value)


def test_header_length_value_parses() -> None:
    assert parse_header_length(b"123") == 123


# -- property: the decoder fails only with InvalidInputError -------------------------------
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)  # what orjson can write
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values_strategy = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)
input_like = st.fixed_dictionaries(
    {},
    optional={
        "name": st.text(max_size=3) | json_values_strategy,
        "shape": st.lists(st.integers(-2, 4), max_size=3) | json_values_strategy,
        "datatype": st.sampled_from(DATATYPES) | json_values_strategy,
        "data": st.lists(json_scalars, max_size=6) | json_values_strategy,
        "parameters": st.fixed_dictionaries(
            {}, optional={"binary_data_size": st.integers(-2, 40) | json_values_strategy}
        )
        | json_values_strategy,
    },
)
request_like = st.fixed_dictionaries(
    {},
    optional={
        "id": st.text(max_size=3) | json_values_strategy,
        "inputs": st.lists(input_like, max_size=3) | json_values_strategy,
        "outputs": st.lists(
            st.fixed_dictionaries({}, optional={"name": st.text(max_size=3),
                                                "parameters": json_values_strategy}),
            max_size=2,
        )
        | json_values_strategy,
        "parameters": json_values_strategy,
    },
)  # fmt: skip


def decode_or_invalid(body: bytes, header_length: int | None) -> None:
    with contextlib.suppress(InvalidInputError):
        decode_infer_request(body, header_length, "model")


@settings(max_examples=300, deadline=None)
@given(request_like, st.binary(max_size=48), st.integers(-4, 4))
def test_decoder_only_raises_invalid_input_on_structured_bodies(
    document: dict[str, Any], binary: bytes, shift: int
) -> None:
    header = orjson.dumps(document)
    decode_or_invalid(header + binary, max(0, len(header) + shift) if binary else None)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.none() | st.integers(0, 220))
def test_decoder_only_raises_invalid_input_on_random_bytes(
    body: bytes, header_length: int | None
) -> None:
    decode_or_invalid(body, header_length)
