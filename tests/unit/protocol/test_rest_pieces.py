"""A large JSON response is written in bounded pieces and joined once (issue 30): no single
call that holds the GIL copies the whole output, and the bytes are those of a one-shot
encode."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson
import pytest

from inferplex.datatypes import CHUNK
from inferplex.protocol.v2 import rest_encode
from inferplex.protocol.v2.rest_encode import encode_infer_response
from inferplex.protocol.v2.rest_json import json_pieces, spliced
from inferplex.types import InferenceRequest, InferenceResponse, Tensor

#: elements of the large outputs: several chunks and a part of one
LARGE = 3 * CHUNK + 5


def _outputs() -> list[Tensor]:
    floats = (np.arange(LARGE, dtype=np.float32) / 7).astype(np.float32)
    texts = np.array([f"t{i % 97}\u00e9" for i in range(LARGE)], dtype=object)
    return [
        Tensor("small", "INT32", (3,), np.array([1, -2, 3], dtype=np.int32)),
        Tensor("floats", "FP32", (LARGE,), floats),
        Tensor("ints", "INT64", (1, LARGE), np.arange(LARGE, dtype=np.int64).reshape(1, -1)),
        Tensor("texts", "BYTES", (LARGE,), texts),
    ]


def _one_shot(response: InferenceResponse) -> bytes:
    """The body as one orjson call over whole arrays writes it (what the pieces must equal)."""
    outputs = [
        {
            "name": t.name,
            "datatype": t.datatype,
            "shape": t.shape,
            "data": list(t.data.reshape(-1)) if t.datatype == "BYTES" else t.data.reshape(-1),
        }
        for t in response.outputs
    ]
    body: dict[str, Any] = {
        "model_name": response.model_name,
        "model_version": response.model_version,
        "id": response.id,
        "outputs": outputs,
    }
    return orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)


def test_large_outputs_are_identical_to_a_one_shot_encode() -> None:
    response = InferenceResponse("m", "1", _outputs(), id="r\x00\u2028")
    body, header_length = encode_infer_response(response, InferenceRequest("m", [], "1"))
    assert header_length is None
    assert body == _one_shot(response)


def test_each_call_writes_one_bounded_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every orjson call writes at most a chunk of elements; the one that writes the header
    gets none of the large outputs' data."""
    written: list[int] = []
    dumps = orjson.dumps

    def recording(value: Any, *args: Any, **kwargs: Any) -> bytes:
        text = dumps(value, *args, **kwargs)
        written.append(len(text))
        return text

    class Recording:
        Fragment = orjson.Fragment
        OPT_SERIALIZE_NUMPY = orjson.OPT_SERIALIZE_NUMPY

    Recording.dumps = staticmethod(recording)  # type: ignore[attr-defined]
    monkeypatch.setattr(rest_encode, "orjson", Recording)
    response = InferenceResponse("m", "1", _outputs())
    body, _ = encode_infer_response(response, InferenceRequest("m", [], "1"))
    # a chunk of the widest of these values (at most 16 characters each, with the comma)
    bound = CHUNK * 16
    assert len(written) >= 3 * 4  # each large output took several calls
    assert max(written) <= bound
    assert len(body) > 4 * bound
    assert written[-1] < 1024  # the header, with placeholders for the large outputs


def test_non_finite_floats_in_pieces_read_back() -> None:
    data = np.arange(LARGE, dtype=np.float64)
    data[[0, CHUNK, LARGE - 1]] = [np.nan, np.inf, -np.inf]
    response = InferenceResponse("m", "1", [Tensor("f", "FP64", (LARGE,), data)])
    body, _ = encode_infer_response(response, InferenceRequest("m", [], "1"))
    values = json.loads(body)["outputs"][0]["data"]
    assert len(values) == LARGE and values[5] == 5.0 and values[CHUNK] == float("inf")


def test_pieces_splice_in_order() -> None:
    first = json_pieces([b"[1,2]", b"[3]"])
    second = json_pieces([b'["a"]'])
    header = orjson.dumps({"x": first.PLACEHOLDER, "y": "\x00", "z": [second.PLACEHOLDER]})
    assert orjson.loads(spliced(header, [first, second])) == {
        "x": [1, 2, 3],
        "y": "\x00",
        "z": [["a"]],
    }
