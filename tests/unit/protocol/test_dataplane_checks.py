"""The data plane (issue 19, item 2): the checks of a decoded tensor, shared memory, output
parameters, limits and the routing key are decided once, so the REST and gRPC codecs answer
the same request with the same error, and the in-process API gets the same checks."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from inferplex.config.model_config import ModelConfig
from inferplex.config.server_config import ServerConfig
from inferplex.core.streaming import SingleResponse
from inferplex.dataplane import ROUTING_KEY, CallMeta, DataPlane, checks, classes
from inferplex.dataplane.classification import ClassifiedOutputs
from inferplex.dataplane.local import LOCAL
from inferplex.errors import InferplexError, InvalidInputError, PayloadTooLargeError
from inferplex.protocol.v2 import generated as pb
from inferplex.protocol.v2 import grpc_codec, rest
from inferplex.security.limits import RequestLimits
from inferplex.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor

# -- one tensor, two wire formats -----------------------------------------------------------


def rest_decode(
    name: str, datatype: str, shape: list[int], raw: bytes, outputs: dict[str, Any]
) -> InferenceRequest:
    tensor = {"name": name, "datatype": datatype, "shape": shape}
    tensor["parameters"] = {"binary_data_size": len(raw)}
    document: dict[str, Any] = {"inputs": [tensor]}
    if outputs:
        document["outputs"] = [{"name": n, "parameters": p} for n, p in outputs.items()]
    header = orjson.dumps(document)
    return rest.decode_infer_request(header + raw, len(header), "m", "1")


def grpc_decode(
    name: str, datatype: str, shape: list[int], raw: bytes, outputs: dict[str, Any]
) -> InferenceRequest:
    message = pb.ModelInferRequest(model_name="m", model_version="1")
    message.inputs.add(name=name, datatype=datatype, shape=shape)
    message.raw_input_contents.append(raw)
    for output, parameters in outputs.items():
        requested = message.outputs.add(name=output)
        grpc_codec.fill_parameters(requested.parameters, parameters)
    return grpc_codec.decode_infer_request_bytes(message.SerializeToString())


Decode = Callable[[str, str, list[int], bytes, dict[str, Any]], InferenceRequest]
CODECS: dict[str, Decode] = {"rest": rest_decode, "grpc": grpc_decode}

BAD_TENSORS: list[tuple[str, str, list[int], bytes, dict[str, Any], str]] = [
    ("unknown datatype", "FLOAT", [2], b"\0" * 8, {}, "input 'X': unknown datatype 'FLOAT'"),
    (
        "negative dimension",
        "FP32",
        [-1, 2],
        b"",
        {},
        "input 'X': 'shape' [-1, 2] has a negative dimension",
    ),
    (
        "raw size",
        "FP32",
        [1, 3],
        b"\0" * 16,
        {},
        "holds 16 bytes, expected 12: shape [1, 3] of FP32 needs 12 bytes (3 elements of 4)",
    ),
    (
        "classification count",
        "FP32",
        [2],
        b"\0" * 8,
        {"OUT": {"classification": -2}},
        "output 'OUT': parameter 'classification' must be a non-negative integer",
    ),
    (
        "classification in shared memory",
        "FP32",
        [2],
        b"\0" * 8,
        {"OUT": {"classification": 2, "shared_memory_region": "r"}},
        "output 'OUT': parameters 'classification' and 'shared_memory_region' together",
    ),
]


def refusal(decode: Decode, case: tuple[str, str, list[int], bytes, dict[str, Any], str]) -> str:
    _, datatype, shape, raw, outputs, _ = case
    with pytest.raises(InvalidInputError) as refused:
        decode("X", datatype, shape, raw, outputs)
    return refused.value.message


@pytest.mark.parametrize("case", BAD_TENSORS, ids=[case[0] for case in BAD_TENSORS])
@pytest.mark.parametrize("protocol", list(CODECS))
def test_a_bad_tensor_gets_the_data_planes_error(protocol: str, case: Any) -> None:
    assert case[-1] in refusal(CODECS[protocol], case)


@pytest.mark.parametrize("case", BAD_TENSORS, ids=[case[0] for case in BAD_TENSORS])
def test_rest_and_grpc_refuse_alike(case: Any) -> None:
    """The same words over both protocols but for where the data was (the field names)."""
    words = {p: refusal(decode, case) for p, decode in CODECS.items()}
    if case[0] == "raw size":
        assert words["rest"].split(" holds ")[1] == words["grpc"].split(" holds ")[1]
    else:
        assert words["rest"] == words["grpc"]


def test_json_data_and_typed_contents_are_counted_and_ranged_alike() -> None:
    """The element count and the range of values: the same words over REST's JSON 'data'
    and gRPC's typed contents, but for the field's name."""

    def rest_json(values: list[int], shape: list[int]) -> str:
        document = {"inputs": [{"name": "X", "datatype": "UINT8", "shape": shape, "data": values}]}
        with pytest.raises(InvalidInputError) as refused:
            rest.decode_infer_request(orjson.dumps(document), None, "m")
        return refused.value.message

    def grpc_typed(values: list[int], shape: list[int]) -> str:
        message = pb.ModelInferRequest(model_name="m")
        message.inputs.add(name="X", datatype="UINT8", shape=shape).contents.uint_contents.extend(
            values
        )
        with pytest.raises(InvalidInputError) as refused:
            grpc_codec.decode_infer_request_bytes(message.SerializeToString())
        return refused.value.message

    for values, shape in (([1, 2], [3]), ([1, 256], [2])):
        json_words = rest_json(values, shape)
        typed_words = grpc_typed(values, shape)
        assert json_words.replace("'data'", "contents.uint_contents") == typed_words
    assert rest_json([1, 2], [3]) == "input 'X': shape [3] needs 3 elements but 'data' has 2"
    assert "outside the range of UINT8 [0, 255]" in grpc_typed([1, 256], [2])


@pytest.mark.parametrize("protocol", list(CODECS))
def test_a_classified_output_marks_the_requested_outputs(protocol: str) -> None:
    decode = CODECS[protocol]
    plain = decode("X", "FP32", [2], b"\0" * 8, {"OUT": {"classification": 0}, "B": {}})
    assert type(plain.outputs) is list and plain.outputs[0].name == "OUT"
    asked = decode("X", "FP32", [2], b"\0" * 8, {"A": {}, "OUT": {"classification": 3}})
    assert type(asked.outputs) is ClassifiedOutputs
    assert [(o.name, o.parameters.get("classification")) for o in asked.outputs] == [
        ("A", None),
        ("OUT", 3),
    ]


# -- the plane ---------------------------------------------------------------------------------


class Engine:
    """Answers every request with SCORES (2 rows of 4) and its inputs as they came."""

    shared_memory = None

    def __init__(self, config: ModelConfig | None = None) -> None:
        self.seen: list[InferenceRequest] = []
        self.config = config if config is not None else model_config()

    def input_checks(self, name: str, version: str = "") -> None:
        return None

    def model_config(self, name: str, version: str = "") -> ModelConfig:
        return self.config

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        self.seen.append(request)
        scores = Tensor("SCORES", "FP32", (2, 4), SCORES)
        return InferenceResponse(request.model_name, "1", [scores, *request.inputs])

    async def stream(self, request: InferenceRequest) -> SingleResponse:
        return SingleResponse(functools.partial(self.infer, request))


SCORES = np.array([[1.1, 3.3, 0.5, 2.4], [0.0, -1.0, 7.0, 7.0]], np.float32)


def model_config(labels: str = "") -> ModelConfig:
    return ModelConfig.model_validate(
        {
            "name": "m",
            "max_batch_size": 4,
            "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [-1]}],
            "output": [
                {"name": "SCORES", "data_type": "TYPE_FP32", "dims": [4], "label_filename": labels}
            ],
        }
    )


def plane(routing_header: str = "", elements: int = 100, string_bytes: int = 10) -> DataPlane:
    return DataPlane(Engine(), RequestLimits(elements, string_bytes), routing_header)


def request(shape: tuple[int, ...] = (1, 2), **parameters: Any) -> InferenceRequest:
    data = np.zeros(shape if min(shape, default=0) >= 0 else (0,), np.float32)
    return InferenceRequest("m", [Tensor("X", "FP32", shape, data)], parameters=parameters)


def test_from_config_takes_the_limits_and_routing_header() -> None:
    config = ServerConfig(
        model_repository="/tmp",
        max_tensor_elements=7,
        max_string_bytes=3,
        routing_header="X-User",
    )
    built = DataPlane.from_config(Engine(), config)
    assert (built.limits.max_tensor_elements, built.limits.max_string_bytes) == (7, 3)
    assert built.routing_header == b"x-user" and built.routing_metadata == "x-user"


async def test_admission_runs_the_limits() -> None:
    with pytest.raises(PayloadTooLargeError, match="'X' has 8 elements"):
        await plane(elements=4).infer_local(request((2, 4)))
    texts = np.array([b"short", b"far too long"], dtype=object)
    with pytest.raises(PayloadTooLargeError, match="element of 12 bytes"):
        await plane().infer_local(InferenceRequest("m", [Tensor("S", "BYTES", (2,), texts)]))


async def test_an_ordinary_call_is_one_coroutine() -> None:
    door = plane()
    answer = door.infer(LOCAL, request(), CallMeta())
    # the hot path: the coroutine that does the work, no wrapper awaiting it
    assert asyncio.iscoroutine(answer) and answer.cr_code.co_name == "_infer"
    assert (await answer).model_name == "m"


def test_the_routing_key_becomes_a_parameter_unless_the_request_has_one() -> None:
    door = plane("x-user")
    shared: dict[str, Any] = {}
    first = request()
    first.parameters = shared  # as a codec's layout cache shares a decoded dict
    door.route(first, "u1")
    assert first.parameters == {ROUTING_KEY: "u1"} and shared == {}
    mine = request(routing_key="mine")
    door.route(mine, "u2")
    assert mine.parameters == {ROUTING_KEY: "mine"}


def test_the_routing_key_in_grpc_metadata() -> None:
    door = plane("X-User")
    assert door.routing_value([("other", "a"), ("x-user", "u7")]) == "u7"
    assert door.routing_value([("x-user-bin", b"\xff")]) is None
    door = plane("x-user-bin")
    assert door.routing_value([("x-user-bin", b"u\xff")]) == "u\ufffd"


async def test_in_process_requests_get_the_checks_of_a_decoded_one() -> None:
    door = plane(elements=4)
    with pytest.raises(InvalidInputError, match=r"'shape' \[-1, 2\] has a negative dimension"):
        await door.infer_local(request((-1, 2)))
    bad = request()
    bad.inputs[0].datatype = "FLOAT"
    with pytest.raises(InvalidInputError, match="unknown datatype 'FLOAT'"):
        await door.infer_local(bad)
    classify = request()
    classify.outputs = [RequestedOutput("OUT", {"classification": "1"})]
    with pytest.raises(InvalidInputError, match="'classification' must be a non-negative"):
        await door.infer_local(classify)
    classify.outputs = [RequestedOutput("SCORES", {"classification": 1})]
    answer = await door.infer_local(classify)
    assert answer.outputs[0].data.tolist() == [[b"3.300000:1"], [b"7.000000:2"]]
    with pytest.raises(PayloadTooLargeError):
        await door.infer_local(request((1, 5)))
    assert (await door.infer_local(request())).model_name == "m"


def test_every_refusal_is_an_inferplex_error() -> None:
    errors = [
        checks.unknown_datatype("X", ["list"]),
        checks.negative_dims("X", (-1,)),
        checks.raw_size_error("X", "here", 3, "FP64", (1,)),
    ]
    assert all(isinstance(e, InferplexError) for e in errors)
    with pytest.raises(InvalidInputError, match="unknown datatype"):
        checks.input_dtype("X", {"not": "hashable"})
    assert checks.input_dtype("X", "INT8") == np.dtype(np.int8)
    checks.check_dims("X", ())


# -- the classification extension, once for every protocol ----------------------------------


async def test_classify_answers_the_top_classes_with_their_labels(tmp_path: Path) -> None:
    (tmp_path / "labels.txt").write_text("apple\npear\n\nplum\n")
    engine = Engine(model_config("labels.txt"))
    door = DataPlane(engine, RequestLimits(100, 10), folders={"m": tmp_path}.get)
    asked = request()
    asked.outputs = ClassifiedOutputs([RequestedOutput("SCORES", {"classification": 2})])
    response = await door.classify(asked, await door.engine.infer(asked))
    scores, passed = response.outputs
    assert (scores.name, scores.datatype, scores.shape) == ("SCORES", "BYTES", (2, 2))
    # label 2 is an empty line: left out, as Triton leaves out a label it has not
    assert scores.data.tolist() == [
        [b"3.300000:1:pear", b"2.400000:3:plum"],
        [b"7.000000:2", b"7.000000:3:plum"],
    ]
    assert passed.name == "X" and passed.datatype == "FP32"  # not asked for: as it was
    (tmp_path / "labels.txt").write_text("changed\n")
    again = await door.classify(asked, await door.engine.infer(asked))
    assert again.outputs[0].data[0, 0] == b"3.300000:1:pear"  # read once per configuration


async def test_labels_that_cannot_be_read_leave_the_classes_without_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    door = DataPlane(
        Engine(model_config("missing.txt")), RequestLimits(100, 10), "", {"m": tmp_path}.get
    )
    asked = request()
    asked.outputs = ClassifiedOutputs([RequestedOutput("SCORES", {"classification": 1})])
    response = await door.classify(asked, await door.engine.infer(asked))
    assert response.outputs[0].data.tolist() == [[b"3.300000:1"], [b"7.000000:2"]]
    assert "labels of 'SCORES' not read" in caplog.text


@pytest.mark.parametrize("large", [False, True])
async def test_a_large_output_is_classified_off_the_event_loop(
    large: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    door = plane()
    loop_thread = threading.get_ident()
    where: list[bool] = []
    classify = classes.classify

    def watched(*args: Any) -> Tensor:
        where.append(threading.get_ident() == loop_thread)
        return classify(*args)

    monkeypatch.setattr(classes, "classify", watched)
    if large:  # one element more than is classified on the loop
        monkeypatch.setattr(classes, "INLINE_CLASSIFY_ELEMENTS", SCORES.size - 1)
    asked = request()
    asked.outputs = ClassifiedOutputs([RequestedOutput("SCORES", {"classification": 1})])
    response = await door.classify(asked, await door.engine.infer(asked))
    assert response.outputs[0].data.tolist() == [[b"3.300000:1"], [b"7.000000:2"]]
    assert where == [not large]
