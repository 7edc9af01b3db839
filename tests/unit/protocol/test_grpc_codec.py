"""The gRPC codec: ModelInferRequest -> InferenceRequest, InferenceResponse ->
ModelInferResponse, and the metadata / config / statistics / index renderings."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from google.protobuf import json_format

from inferplex.config.model_config import ModelConfig
from inferplex.errors import InvalidInputError, UnsupportedError
from inferplex.protocol.v2 import generated as pb
from inferplex.protocol.v2 import grpc_codec as codec
from inferplex.protocol.v2 import grpc_messages as messages
from inferplex.protocol.v2.grpc_contents import TYPED_CONTENTS
from inferplex.types import InferenceResponse, Tensor

DATATYPES = [
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
    "FP16", "FP32", "FP64", "BYTES",
]  # fmt: skip
TYPED = [dt for dt in DATATYPES if dt != "FP16"]


def sample(datatype: str, shape: tuple[int, ...] = (2, 3)) -> np.ndarray:
    """Values that use the edges of each type's range."""
    count = int(np.prod(shape))
    if datatype == "BOOL":
        return (np.arange(count) % 2 == 0).reshape(shape)
    if datatype == "BYTES":
        items = [b"", b"a", b"\x00\xff", "é".encode(), b"x" * 300, b"last"]
        out = np.empty(count, dtype=np.object_)
        out[:] = [items[i % len(items)] for i in range(count)]
        return out.reshape(shape)
    dtype = {"FP16": np.float16, "FP32": np.float32, "FP64": np.float64}.get(datatype)
    if dtype is not None:
        return np.linspace(-1e3, 1e3, count).astype(dtype).reshape(shape)
    info = np.iinfo(np.dtype(datatype.lower()))
    values = [info.min, info.max, 0, 1, info.max - 1, info.min + 1]
    return np.array([values[i % len(values)] for i in range(count)], dtype=info.dtype).reshape(
        shape
    )


def raw_bytes(array: np.ndarray) -> bytes:
    """The V2 raw layout, written independently of the codec."""
    if array.dtype == np.object_:
        return b"".join(struct.pack("<I", len(x)) + x for x in array.reshape(-1))
    return array.astype(array.dtype.newbyteorder("<")).tobytes()


def request(*inputs: dict, raw: list[bytes] | None = None, **fields) -> object:
    return pb.ModelInferRequest(
        model_name="m", inputs=list(inputs), raw_input_contents=raw or [], **fields
    )


def tensor(name: str, datatype: str, shape, **fields) -> dict:
    return {"name": name, "datatype": datatype, "shape": list(shape), **fields}


def assert_same(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype
    assert actual.tolist() == expected.tolist()


# ---- inputs ----


@pytest.mark.parametrize("datatype", DATATYPES)
def test_raw_input_round_trips_every_datatype(datatype: str) -> None:
    data = sample(datatype)
    msg = request(tensor("IN", datatype, data.shape), raw=[raw_bytes(data)])
    decoded = codec.decode_infer_request(msg).inputs[0]
    assert (decoded.name, decoded.datatype, decoded.shape) == ("IN", datatype, (2, 3))
    assert_same(decoded.data, data)


@pytest.mark.parametrize("datatype", TYPED)
def test_typed_contents_round_trip_every_datatype(datatype: str) -> None:
    data = sample(datatype)
    field, _ = TYPED_CONTENTS[datatype]
    contents = {field: data.reshape(-1).tolist()}
    msg = request(tensor("IN", datatype, data.shape, contents=contents))
    assert_same(codec.decode_infer_request(msg).inputs[0].data, data)


def test_raw_fixed_size_input_is_a_view_of_the_message_bytes() -> None:
    data = sample("FP32", (4, 4))
    decoded = codec.decode_infer_request(
        request(tensor("IN", "FP32", (4, 4)), raw=[data.tobytes()])
    )
    array = decoded.inputs[0].data
    assert not array.flags.owndata
    assert not array.flags.writeable


def test_empty_tensor_is_accepted() -> None:
    decoded = codec.decode_infer_request(request(tensor("IN", "FP32", (0, 3))))
    assert decoded.inputs[0].data.shape == (0, 3)


def test_several_raw_inputs_map_in_order() -> None:
    a, b = sample("INT32", (1, 4)), sample("BYTES", (1, 2))
    msg = request(tensor("A", "INT32", a.shape), tensor("B", "BYTES", b.shape), raw=[
        raw_bytes(a), raw_bytes(b)
    ])  # fmt: skip
    decoded = codec.decode_infer_request(msg).inputs
    assert_same(decoded[0].data, a)
    assert_same(decoded[1].data, b)


# ---- bad inputs: each error names the tensor and the field ----


def bad(msg, error=InvalidInputError) -> str:
    with pytest.raises(error) as info:
        codec.decode_infer_request(msg)
    return info.value.message


def test_raw_size_mismatch_names_input_and_entry() -> None:
    message = bad(request(tensor("IN0", "FP32", (2, 2)), raw=[b"\x00" * 12]))
    assert "IN0" in message
    assert "raw_input_contents[0]" in message
    assert "12 bytes" in message and "16" in message


def test_raw_entry_count_must_match_inputs() -> None:
    one = sample("FP32", (1,)).tobytes()
    message = bad(request(tensor("A", "FP32", (1,)), tensor("B", "FP32", (1,)), raw=[one]))
    assert "raw_input_contents has 1 entries" in message and "2 inputs" in message


def test_raw_and_typed_contents_cannot_be_mixed() -> None:
    message = bad(
        request(
            tensor("A", "FP32", (1,)),
            tensor("B", "FP32", (1,), contents={"fp32_contents": [1.0]}),
            raw=[b"\x00" * 4, b"\x00" * 4],
        )
    )
    # Triton's text, which its grpc_explicit_int_content_client checks
    assert (
        "contents field must not be specified when using raw_input_contents for 'B' for "
        "model 'm'" in message
    )


def test_typed_count_mismatch_names_the_field() -> None:
    message = bad(request(tensor("X", "FP32", (2, 2), contents={"fp32_contents": [1.0] * 3})))
    assert "'X'" in message and "contents.fp32_contents" in message
    assert "needs 4 elements" in message and "has 3" in message


def test_typed_data_in_the_wrong_field_says_where_it_went() -> None:
    message = bad(request(tensor("X", "FP32", (2,), contents={"int64_contents": [1, 2]})))
    assert "contents.fp32_contents" in message and "contents.int64_contents" in message


def test_missing_data_is_an_error() -> None:
    assert "contents.int64_contents has 0" in bad(request(tensor("X", "INT64", (3,))))


def test_fp16_has_no_typed_field() -> None:
    message = bad(request(tensor("H", "FP16", (1,), contents={"fp32_contents": [1.0]})))
    assert "'H'" in message and "raw_input_contents" in message


@pytest.mark.parametrize(
    ("datatype", "value"), [("INT8", 128), ("INT16", -32769), ("UINT8", 256), ("UINT16", 70000)]
)
def test_narrow_integer_out_of_range(datatype: str, value: int) -> None:
    field, _ = TYPED_CONTENTS[datatype]
    message = bad(request(tensor("N", datatype, (2,), contents={field: [0, value]})))
    assert "'N'" in message and f"contents.{field}" in message and datatype in message


def test_unknown_datatype_names_input() -> None:
    message = bad(request(tensor("Q", "FP8", (1,)), raw=[b"\x00"]))
    assert "'Q'" in message and "FP8" in message and "FP32" in message


def test_negative_dimension_names_input() -> None:
    message = bad(request(tensor("S", "FP32", (-1, 2)), raw=[b""]))
    assert "'S'" in message and "[-1, 2]" in message


@pytest.mark.parametrize(
    ("buffer", "words"),
    [
        (struct.pack("<I", 1) + b"a", "need at least 8 bytes of data, got 5"),
        (struct.pack("<I", 1) + b"a\0\0\0", "ends after 1 of 2"),
        (struct.pack("<I", 9) + b"abcd", "declares 9 bytes"),
        (raw_bytes(sample("BYTES", (2,))) + b"!", "left over"),
    ],
)
def test_bad_raw_bytes_layout(buffer: bytes, words: str) -> None:
    message = bad(request(tensor("T", "BYTES", (2,)), raw=[buffer]))
    assert "'T'" in message and words in message


@pytest.mark.parametrize("where", ["input", "output"])
def test_shared_memory_is_refused_clearly(where: str) -> None:
    params = {"shared_memory_region": {"string_param": "region0"}}
    extra = {"parameters": params} if where == "input" else {}
    msg = request(tensor("I", "FP32", (1,), contents={"fp32_contents": [1.0]}, **extra))
    if where == "output":
        msg.outputs.add(name="O").parameters["shared_memory_region"].string_param = "r"
    assert "shared-memory" in bad(msg, UnsupportedError)


# ---- request fields and parameters ----


def test_request_fields_parameters_and_requested_outputs() -> None:
    msg = request(
        tensor("IN", "INT32", (1,), contents={"int_contents": [5]},
               parameters={"p": {"int64_param": -3}}),
        id="req-7",
        model_version="2",
        parameters={
            "flag": {"bool_param": True},
            "count": {"int64_param": -(2**40)},
            "name": {"string_param": "é"},
            "ratio": {"double_param": 0.25},
            "big": {"uint64_param": 2**64 - 1},
            "unset": {},
        },
        outputs=[{"name": "OUT1", "parameters": {"binary_data": {"bool_param": True}}},
                 {"name": "OUT0"}],
    )  # fmt: skip
    decoded = codec.decode_infer_request(msg)
    assert (decoded.model_name, decoded.model_version, decoded.id) == ("m", "2", "req-7")
    assert decoded.parameters == {
        "flag": True, "count": -(2**40), "name": "é", "ratio": 0.25, "big": 2**64 - 1,
        "unset": None,
    }  # fmt: skip
    assert decoded.inputs[0].parameters == {"p": -3}
    assert [(o.name, o.parameters) for o in decoded.outputs] == [
        ("OUT1", {"binary_data": True}),
        ("OUT0", {}),
    ]


def test_parameters_keep_their_python_types() -> None:
    msg = pb.ModelInferResponse()
    values = {"b": False, "i": -7, "u": 2**63, "f": 1.5, "s": "x", "by": b"y", "o": 3j}
    codec.fill_parameters(msg.parameters, values)
    assert {k: v.WhichOneof("parameter_choice") for k, v in msg.parameters.items()} == {
        "b": "bool_param", "i": "int64_param", "u": "uint64_param", "f": "double_param",
        "s": "string_param", "by": "string_param", "o": "string_param",
    }  # fmt: skip
    assert codec.parameters_from_proto(msg.parameters) == {**values, "by": "y", "o": "3j"}


# ---- responses ----


def test_response_carries_every_datatype_in_raw_output_contents() -> None:
    outputs = [
        Tensor(f"OUT_{dt}", dt, sample(dt).shape, sample(dt), {"note": dt}) for dt in DATATYPES
    ]
    response = InferenceResponse("m", "3", outputs, id="abc", parameters={"p": 1})
    msg = codec.encode_infer_response(response)
    assert (msg.model_name, msg.model_version, msg.id) == ("m", "3", "abc")
    assert codec.parameters_from_proto(msg.parameters) == {"p": 1}
    assert len(msg.raw_output_contents) == len(DATATYPES)
    for out, raw, dt in zip(msg.outputs, msg.raw_output_contents, DATATYPES, strict=True):
        assert (out.name, out.datatype, list(out.shape)) == (f"OUT_{dt}", dt, [2, 3])
        assert out.parameters["note"].string_param == dt
        assert not out.HasField("contents")
        assert raw == raw_bytes(sample(dt))


def test_response_is_readable_by_tritonclient() -> None:
    grpc_client = pytest.importorskip("tritonclient.grpc")
    from tritonclient.grpc import service_pb2

    outputs = [Tensor(dt, dt, sample(dt).shape, sample(dt)) for dt in DATATYPES]
    wire = codec.encode_infer_response(InferenceResponse("m", "1", outputs)).SerializeToString()
    result = grpc_client.InferResult(service_pb2.ModelInferResponse.FromString(wire))
    for dt in DATATYPES:
        expected = sample(dt)
        got = result.as_numpy(dt)
        assert got.shape == expected.shape
        assert got.tolist() == expected.tolist()


def test_response_converts_data_to_the_declared_datatype() -> None:
    # A backend answering float64 for an FP32 output must not send 8-byte elements.
    out = Tensor("O", "FP32", (2,), np.array([1.5, 2.5]))
    raw = codec.encode_infer_response(InferenceResponse("m", "1", [out])).raw_output_contents[0]
    assert np.frombuffer(raw, dtype="<f4").tolist() == [1.5, 2.5]


def test_bytes_output_accepts_str_elements() -> None:
    out = Tensor("O", "BYTES", (2,), np.array(["ab", "é"], dtype=object))
    raw = codec.encode_infer_response(InferenceResponse("m", "1", [out])).raw_output_contents[0]
    assert raw == struct.pack("<I", 2) + b"ab" + struct.pack("<I", 2) + "é".encode()


# ---- the wire fast path ----


def wire_request(*arrays: np.ndarray, **fields) -> bytes:
    inputs = [tensor(f"IN{i}", "FP32", a.shape) for i, a in enumerate(arrays)]
    raw = [a.astype("<f4").tobytes() for a in arrays]
    return request(*inputs, raw=raw, outputs=[{"name": "OUT"}], **fields).SerializeToString()


def decoded(request: object) -> tuple:
    return (
        request.model_name,
        request.model_version,
        request.id,
        request.parameters,
        [(o.name, o.parameters) for o in request.outputs],
        [(t.name, t.datatype, t.shape, t.parameters, t.data.tolist()) for t in request.inputs],
    )


def full_decode(data: bytes) -> tuple:
    return decoded(codec.decode_infer_request(pb.ModelInferRequest.FromString(data)))


def test_wire_requests_decode_like_messages_also_when_sent_again() -> None:
    a, b = sample("FP32", (1, 3)), sample("FP32", (2, 2))
    first = wire_request(a, b, id="x", model_version="2")
    again = wire_request(a + 1, b * 2, id="x", model_version="2")
    for data in (first, again, first):
        request = codec.decode_infer_request_bytes(data)
        assert decoded(request) == full_decode(data)
        assert not request.inputs[0].data.flags.writeable
    other = wire_request(a, b, id="y", model_version="2")  # same length, other prefix
    assert decoded(codec.decode_infer_request_bytes(other)) == full_decode(other)


def test_wire_request_with_other_tensor_sizes_takes_the_full_path() -> None:
    shape = (1, 3)
    codec.decode_infer_request_bytes(wire_request(sample("FP32", shape)))
    msg = pb.ModelInferRequest.FromString(wire_request(sample("FP32", shape)))
    msg.raw_input_contents[0] = b"\0" * 16  # a different length: 4 floats for a shape of 3
    with pytest.raises(InvalidInputError, match="holds 16 bytes, expected 12"):
        codec.decode_infer_request_bytes(msg.SerializeToString())


def test_wire_request_with_raw_contents_first_still_decodes() -> None:
    a = sample("FP32", (1, 3))
    data = wire_request(a)
    raw_field = b"\x3a\x0c" + a.astype("<f4").tobytes()
    reordered = raw_field + data[: -len(raw_field)]  # protobuf accepts fields in any order
    for message in (reordered, reordered):
        assert decoded(codec.decode_infer_request_bytes(message)) == full_decode(data)


def test_malformed_wire_request_is_invalid_input() -> None:
    with pytest.raises(InvalidInputError, match="malformed ModelInferRequest"):
        codec.decode_infer_request_bytes(b"\xff\xff\xff")


@pytest.mark.parametrize(
    "response",
    [
        InferenceResponse("m", "1", [Tensor("A", "FP32", (2, 3), sample("FP32"))]),
        InferenceResponse("m", "", [Tensor("A", "INT64", (), np.array(7))], id="r"),
        InferenceResponse("m", "1", [Tensor("S", "BYTES", (2, 3), sample("BYTES"))]),
        InferenceResponse("m", "1", [Tensor("A", "FP32", (2,), np.ones(2))], parameters={"p": 1}),
        InferenceResponse("m", "1", [Tensor("A", "FP16", (1,), np.ones(1), {"q": "x"})]),
        InferenceResponse("m", "1", [Tensor(dt, dt, (2, 3), sample(dt)) for dt in DATATYPES]),
    ],
)
def test_wire_responses_are_the_messages_bytes(response: InferenceResponse) -> None:
    expected = codec.encode_infer_response(response).SerializeToString()
    assert codec.encode_infer_response_bytes(response) == expected
    assert codec.encode_infer_response_bytes(response) == expected  # from the known layout


def test_wire_response_of_known_layout_with_other_bytes_lengths() -> None:
    short = np.array([b"a", b"b"], dtype=object)
    long = np.array([b"a" * 200, b"b"], dtype=object)
    for data in (short, long, short):
        response = InferenceResponse("m", "1", [Tensor("S", "BYTES", (2,), data)])
        expected = codec.encode_infer_response(response).SerializeToString()
        assert codec.encode_infer_response_bytes(response) == expected


# ---- metadata, config, statistics, index ----


def test_server_and_model_metadata() -> None:
    server = messages.encode_server_metadata(
        {"name": "inferplex", "version": "0.1.0", "extensions": ["statistics"]}
    )
    assert (server.name, server.version, list(server.extensions)) == (
        "inferplex", "0.1.0", ["statistics"]
    )  # fmt: skip
    model = messages.encode_model_metadata({
        "name": "add_sub", "versions": ["1"], "platform": "onnxruntime_onnx",
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 16]}],
        "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, 16]}],
    })  # fmt: skip
    assert model.name == "add_sub" and list(model.versions) == ["1"]
    assert [(t.name, t.datatype, list(t.shape)) for t in model.inputs] == [
        ("INPUT0", "FP32", [-1, 16])
    ]
    assert model.outputs[0].name == "OUTPUT0"


def enum_name(message, field: str) -> str:
    enum = message.DESCRIPTOR.fields_by_name[field].enum_type
    return enum.values_by_number[getattr(message, field)].name


#: ModelConfig fields, as read from a config file.
FULL_CONFIG = {
    "name": "full",
    "platform": "onnxruntime_onnx",
    "backend": "onnxruntime",
    "max_batch_size": 8,
    "version_policy": {"policy": "specific", "versions": [1, 3]},
    "input": [
        {"name": "IN", "data_type": "TYPE_FP32", "dims": [16], "reshape": [4, 4],
         "optional": True, "is_shape_tensor": False},
        {"name": "TEXT", "data_type": "TYPE_STRING", "dims": [-1]},
    ],
    "output": [{"name": "OUT", "data_type": "FP16", "dims": [-1]}],
    "instance_group": [{"name": "g", "count": 2, "kind": "KIND_CPU"}],
    "dynamic_batching": {
        "preferred_batch_size": [4, 8],
        "max_queue_delay_microseconds": 100,
        "priority_levels": 2,
        "default_priority_level": 1,
        "default_queue_policy": {"timeout_action": "DELAY", "max_queue_size": 10},
        "priority_queue_policy": {2: {"timeout_action": "REJECT",
                                      "default_timeout_microseconds": 5}},
    },
    "parameters": {"k": "v"},
    "default_model_filename": "model.onnx",
}  # fmt: skip


def test_model_config_renders_every_field_of_to_triton_dict() -> None:
    triton = ModelConfig.model_validate(FULL_CONFIG).to_triton_dict()
    # Strict parse: a key to_triton_dict renders that the proto lacks would fail here.
    strict = json_format.ParseDict(triton, pb.ModelConfig())
    config = messages.encode_model_config(triton).config
    assert config == strict
    assert (config.name, config.platform, config.backend, config.max_batch_size) == (
        "full", "onnxruntime_onnx", "onnxruntime", 8
    )  # fmt: skip
    assert list(config.version_policy.specific.versions) == [1, 3]
    first, text = config.input
    assert (first.name, list(first.dims), list(first.reshape.shape)) == ("IN", [16], [4, 4])
    assert first.optional
    assert enum_name(first, "data_type") == "TYPE_FP32"
    assert enum_name(text, "data_type") == "TYPE_STRING"
    assert enum_name(config.output[0], "data_type") == "TYPE_FP16"
    assert config.instance_group[0].count == 2
    assert enum_name(config.instance_group[0], "kind") == "KIND_CPU"
    batching = config.dynamic_batching
    assert config.WhichOneof("scheduling_choice") == "dynamic_batching"
    assert list(batching.preferred_batch_size) == [4, 8]
    assert batching.max_queue_delay_microseconds == 100
    assert enum_name(batching.default_queue_policy, "timeout_action") == "DELAY"
    assert batching.default_queue_policy.max_queue_size == 10
    assert batching.priority_queue_policy[2].default_timeout_microseconds == 5
    assert config.parameters["k"].string_value == "v"
    assert config.default_model_filename == "model.onnx"


@pytest.mark.parametrize(
    ("policy", "choice"),
    [({"policy": "latest", "num_versions": 2}, "latest"), ({"policy": "all"}, "all")],
)
def test_model_config_version_policies(policy: dict, choice: str) -> None:
    triton = ModelConfig(name="m", version_policy=policy).to_triton_dict()
    config = messages.encode_model_config(triton).config
    assert config.version_policy.WhichOneof("policy_choice") == choice
    assert config.WhichOneof("scheduling_choice") is None


def test_model_config_skips_keys_the_proto_does_not_declare() -> None:
    config = messages.encode_model_config({"name": "m", "some_future_field": {"x": 1}}).config
    assert config.name == "m"


def test_model_statistics() -> None:
    duration = {"count": 3, "ns": 1500}
    stats = [{
        "name": "add_sub", "version": "1", "last_inference": 1_700_000_000_000,
        "inference_count": 5, "execution_count": 3,
        "inference_stats": {key: duration for key in (
            "success", "fail", "queue", "compute_input", "compute_infer", "compute_output",
            "cache_hit", "cache_miss")},
        "batch_stats": [{"batch_size": 2, "compute_input": duration,
                         "compute_infer": duration, "compute_output": duration}],
    }]  # fmt: skip
    msg = messages.encode_model_statistics(stats)
    assert json_format.MessageToDict(msg, preserving_proto_field_name=True)["model_stats"][0] == (
        json_format.MessageToDict(json_format.ParseDict(stats[0], pb.ModelStatistics()),
                                  preserving_proto_field_name=True)
    )  # fmt: skip
    model = msg.model_stats[0]
    assert (model.name, model.version, model.inference_count, model.execution_count) == (
        "add_sub", "1", 5, 3
    )  # fmt: skip
    assert model.last_inference == 1_700_000_000_000
    assert (model.inference_stats.success.count, model.inference_stats.cache_miss.ns) == (3, 1500)
    assert model.batch_stats[0].batch_size == 2
    assert model.batch_stats[0].compute_infer.count == 3


def test_model_statistics_carry_why_batches_closed() -> None:
    stats = [{"name": "m", "version": "1", "batch_close_reasons": {"full": 4, "idle": 2}}]
    (model,) = messages.encode_model_statistics(stats).model_stats
    assert dict(model.batch_close_reasons) == {"full": 4, "idle": 2}


def test_repository_index() -> None:
    msg = messages.encode_repository_index([
        {"name": "add_sub", "version": "1", "state": "READY", "reason": ""},
        {"name": "broken", "version": "", "state": "UNAVAILABLE", "reason": "bad dims"},
    ])  # fmt: skip
    assert [(m.name, m.version, m.state, m.reason) for m in msg.models] == [
        ("add_sub", "1", "READY", ""),
        ("broken", "", "UNAVAILABLE", "bad dims"),
    ]


# found by the fuzz test: no elements, but dims whose product numpy cannot represent
HUGE_EMPTY = (0, 6340, 11884951, 122406104)


@pytest.mark.parametrize("datatype", ["UINT16", "BYTES"])
@pytest.mark.parametrize("raw", [False, True], ids=["typed", "raw"])
def test_an_empty_shape_too_big_for_numpy_is_an_input_error(datatype: str, raw: bool) -> None:
    msg = request(tensor("IN", datatype, HUGE_EMPTY), raw=[b""] if raw else None)
    message = bad(msg)
    assert "input 'IN'" in message and "is not usable" in message
