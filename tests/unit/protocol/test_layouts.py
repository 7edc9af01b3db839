"""The layout cache both codecs keep: bounded, the oldest goes first, a lookup is a dict's."""

from __future__ import annotations

import numpy as np

from inferplex.protocol.v2 import generated as pb
from inferplex.protocol.v2 import grpc_codec
from inferplex.protocol.v2.layouts import LayoutCache


def test_the_oldest_layout_goes_first() -> None:
    cache: LayoutCache[str, int] = LayoutCache(2)
    cache.keep("a", 1)
    cache.keep("b", 2)
    cache.keep("a", 3)  # known: replaced, nothing forgotten
    assert dict(cache) == {"a": 3, "b": 2}
    cache.keep("c", 4)
    assert dict(cache) == {"b": 2, "c": 4}
    assert cache.get("a") is None and type(cache).get is dict.get


def test_grpc_keeps_the_latest_layouts_of_one_length() -> None:
    grpc_codec._REQUEST_LAYOUTS.clear()
    data = np.ones(3, np.float32).tobytes()
    messages = []
    for index in range(12):  # ids of one length: messages of one length, each its own layout
        message = pb.ModelInferRequest(model_name="m", id=f"id{index:02d}")
        message.inputs.add(name="X", datatype="FP32", shape=[3])
        message.raw_input_contents.append(data)
        messages.append(message.SerializeToString())
        grpc_codec.decode_infer_request_bytes(messages[-1])
    assert len({len(m) for m in messages}) == 1
    kept = grpc_codec._REQUEST_LAYOUTS[len(messages[0])]
    assert len(kept) == grpc_codec._LAYOUTS_PER_LENGTH
    assert grpc_codec.known_request(messages[0]) is None  # forgotten
    again = grpc_codec.known_request(messages[-1])
    assert again is not None and again.id == "id11"
