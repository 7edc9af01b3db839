"""Fuzzing the decoders no earlier test fuzzes: the gRPC ModelInferRequest decoder (random
bytes, mutated valid messages, structured messages with hostile fields) and the model-config
reader (random documents). Each may only answer or raise its documented error, never crash.
The REST decoder and the pbtxt tokenizer are fuzzed beside their own tests."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplex.config.readers import config_from_dict
from inferplex.datatypes import V2_DATATYPES
from inferplex.errors import ConfigError, InvalidInputError
from inferplex.protocol.v2 import generated as pb
from inferplex.protocol.v2.grpc_codec import decode_infer_request_bytes

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _valid_message() -> bytes:
    message = pb.ModelInferRequest(model_name="add_sub", id="r1")
    for name in ("INPUT0", "INPUT1"):
        tensor = message.inputs.add(name=name, datatype="FP32", shape=[1, 4])
        del tensor
        message.raw_input_contents.append(np.arange(4, dtype=np.float32).tobytes())
    return message.SerializeToString()


VALID = _valid_message()


def _decodes_or_refuses(data: bytes) -> None:
    try:
        request = decode_infer_request_bytes(data)
    except InvalidInputError as exc:
        assert exc.message
        return
    for tensor in request.inputs:
        assert tensor.data.shape == tuple(tensor.shape)


@FUZZ
@given(st.binary(max_size=300))
def test_grpc_random_bytes(data: bytes) -> None:
    _decodes_or_refuses(data)


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), max_size=6))
def test_grpc_mutated_valid_message(flips: list[tuple[int, int]]) -> None:
    data = bytearray(VALID)
    for position, value in flips:
        data[position] = value
    _decodes_or_refuses(bytes(data))


_dims = st.lists(st.integers(-3, 2**40), max_size=4)
_datatypes = st.sampled_from([*V2_DATATYPES, "FP8", "", "bytes"])


@st.composite
def _messages(draw: Any) -> bytes:
    message = pb.ModelInferRequest(model_name="m")
    raw = draw(st.booleans())
    for index in range(draw(st.integers(0, 3))):
        tensor = message.inputs.add(
            name=draw(st.sampled_from(["INPUT0", "INPUT1", "", "x" * 300])) + str(index % 2),
            datatype=draw(_datatypes),
            shape=draw(_dims),
        )
        if raw:
            message.raw_input_contents.append(draw(st.binary(max_size=64)))
        else:
            tensor.contents.fp32_contents.extend(draw(st.lists(st.floats(width=32), max_size=8)))
            tensor.contents.bytes_contents.extend(draw(st.lists(st.binary(max_size=8), max_size=4)))
            tensor.contents.int_contents.extend(draw(st.lists(st.integers(-(2**31), 2**31 - 1))))
    if draw(st.booleans()):
        message.outputs.add(name=draw(st.text(max_size=8)))
    return message.SerializeToString()


@FUZZ
@given(_messages())
def test_grpc_structured_messages(data: bytes) -> None:
    _decodes_or_refuses(data)


_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=12)
)
_documents = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.sampled_from(
                [
                    "name", "max_batch_size", "input", "output", "dims", "data_type",
                    "instance_group", "count", "kind", "dynamic_batching", "parameters",
                    "version_policy", "reshape", "platform", "backend", "scheduling", "x",
                ]
            ),
            inner,
            max_size=5,
        ),
    ),
    max_leaves=25,
)  # fmt: skip


@FUZZ
@given(st.dictionaries(st.sampled_from(["input", "output", "max_batch_size", "name",
                                        "instance_group", "dynamic_batching", "parameters",
                                        "version_policy", "optimization"]),
                       _documents, max_size=6))  # fmt: skip
def test_config_documents_give_a_config_or_a_config_error(document: dict[str, Any]) -> None:
    try:
        config = config_from_dict(document, "m", "m/config.yaml")
    except ConfigError as exc:
        assert exc.message.startswith("m/config.yaml") or "'m'" in exc.message, exc.message
        return
    assert config.name == "m"
