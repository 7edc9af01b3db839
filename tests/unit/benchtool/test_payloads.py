"""Inputs from metadata, and the encodings checked against the server's own codecs."""

from __future__ import annotations

import numpy as np
import pytest

from inferplex.datatypes import V2_DATATYPES
from inferplex.protocol.v2 import generated as pb
from inferplex.protocol.v2 import grpc_codec, rest, rest_encode
from inferplex.types import InferenceResponse, Tensor
from inferplex_tools.benchtool import BenchError
from inferplex_tools.benchtool.payloads import (
    TensorPlan,
    check_outputs,
    decode_grpc,
    decode_http,
    grpc_request,
    http_request,
    parse_shapes,
    plan_inputs,
    synthesize,
)

METADATA = {
    "name": "m",
    "inputs": [
        {"name": "A", "datatype": "FP32", "shape": [-1, 16]},
        {"name": "B", "datatype": "INT64", "shape": [-1, -1]},
    ],
    "outputs": [{"name": "Y", "datatype": "FP32", "shape": [-1, 16]}],
}


def test_parse_shapes() -> None:
    assert parse_shapes(["A:1,16", "ns:name:2"]) == {"A": (1, 16), "ns:name": (2,)}
    for bad in ("A", "A:", "A:x", ":1", "A:-1"):
        with pytest.raises(BenchError, match="--shape"):
            parse_shapes([bad])


def test_batch_dimension_takes_the_batch_size_and_variable_dims_need_a_shape() -> None:
    with pytest.raises(BenchError, match="--shape B:4,4"):
        plan_inputs(METADATA, max_batch_size=8, batch_size=4, shapes={})
    plans = plan_inputs(METADATA, 8, 4, {"B": (4, 3)})
    assert plans == [TensorPlan("A", "FP32", (4, 16)), TensorPlan("B", "INT64", (4, 3))]


def test_bad_batch_sizes_and_unknown_inputs_are_named() -> None:
    with pytest.raises(BenchError, match="batches of 1 to 8"):
        plan_inputs(METADATA, 8, 9, {"B": (9, 1)})
    with pytest.raises(BenchError, match="does not batch"):
        plan_inputs(METADATA, 0, 2, {})
    # a shape for an input of another model of the run is left alone
    assert len(plan_inputs(METADATA, 8, 1, {"B": (1, 2), "C": (1,)})) == 2


@pytest.mark.parametrize("datatype", sorted(V2_DATATYPES))
@pytest.mark.parametrize("binary", [True, False])
def test_http_request_decodes_with_the_servers_codec(datatype: str, binary: bool) -> None:
    plans = [TensorPlan("X", datatype, (2, 3))]
    inputs = synthesize(plans, seed=1)
    raw = http_request("h", "m", "2", plans, inputs, ["Y"], binary)
    head, body = raw.split(b"\r\n\r\n", 1)
    assert head.startswith(b"POST /v2/models/m/versions/2/infer HTTP/1.1")
    length = None
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"inference-header-content-length"):
            length = int(line.split(b":")[1])
    assert (length is not None) == binary
    request = rest.decode_infer_request(body, length, "m", "2")
    (tensor,) = request.inputs
    assert tensor.datatype == datatype and tensor.shape == (2, 3)
    np.testing.assert_array_equal(tensor.data.reshape(2, 3), inputs["X"])


@pytest.mark.parametrize("datatype", sorted(V2_DATATYPES))
def test_grpc_request_decodes_with_the_servers_codec(datatype: str) -> None:
    plans = [TensorPlan("X", datatype, (3,))]
    inputs = synthesize(plans, seed=2)
    message = pb.ModelInferRequest.FromString(grpc_request("m", "", plans, inputs, ["Y"]))
    request = grpc_codec.decode_infer_request(message)
    np.testing.assert_array_equal(request.inputs[0].data.reshape(3), inputs["X"])


@pytest.mark.parametrize("binary", [True, False])
def test_http_answers_decode(binary: bool) -> None:
    plans = [TensorPlan("X", "FP32", (1, 4))]
    inputs = synthesize(plans)
    raw = http_request("h", "m", "", plans, inputs, ["Y", "S"], binary)
    head, body = raw.split(b"\r\n\r\n", 1)
    length = (
        int(head.split(b"Inference-Header-Content-Length: ")[1].split(b"\r\n")[0])
        if binary
        else None
    )
    request = rest.decode_infer_request(body, length, "m")
    strings = np.array([b"ab", b"c"], dtype=np.object_)
    response = InferenceResponse(
        "m", "1", [Tensor("Y", "FP32", (1, 4), inputs["X"]), Tensor("S", "BYTES", (2,), strings)]
    )
    payload, header_length = rest_encode.encode_infer_response(response, request)
    answer_head = b"HTTP/1.1 200 OK\r\n" + (
        f"inference-header-content-length: {header_length}\r\n".encode() if header_length else b""
    )
    got = decode_http(answer_head, payload)
    np.testing.assert_array_equal(got["Y"][1], inputs["X"])
    assert list(got["S"][1]) == [b"ab", b"c"]
    check_outputs(got, [{"name": "Y", "datatype": "FP32"}, {"name": "S", "datatype": "BYTES"}])
    with pytest.raises(BenchError, match="output Z missing"):
        check_outputs(got, [{"name": "Z", "datatype": "FP32"}])
    with pytest.raises(BenchError, match="datatype FP32, the metadata says INT8"):
        check_outputs(got, [{"name": "Y", "datatype": "INT8"}])


def test_grpc_answers_decode() -> None:
    data = np.arange(6, dtype=np.int32).reshape(2, 3)
    response = InferenceResponse("m", "1", [Tensor("Y", "INT32", (2, 3), data)])
    message = grpc_codec.encode_infer_response(response)
    got = decode_grpc(message.SerializeToString())
    assert got["Y"][0] == "INT32"
    np.testing.assert_array_equal(got["Y"][1], data)
