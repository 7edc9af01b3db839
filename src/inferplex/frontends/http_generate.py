"""The HTTP side of the data plane's streamed calls: Triton's generate extension
(``POST /v2/models/{m}/generate`` and ``/generate_stream``, ``protocol/v2/generate_codec.py``)
and any other stream codec an HTTP endpoint serves (:func:`stream_reply`).

The stream is as slow as its reader: the next event is made once the last has left
(``StreamedBody``), so a reader that does not read holds the model back; one that goes away
cancels the request in the model.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from inferplex.dataplane import CallMeta, DataPlane, StreamCodec, Streamed
from inferplex.dataplane.codec import Body, Headers, HttpHead
from inferplex.protocol.v2.generate_codec import GenerateCodec
from inferplex.transport.interface import StreamedBody

if TYPE_CHECKING:
    from inferplex.engine.inference import InferenceEngine

#: an HTTP answer: status, a whole body or one sent as it comes, headers
Reply = tuple[int, bytes | StreamedBody, Headers]


class Generate:
    """The two endpoints, as codecs on the data plane."""

    def __init__(self, engine: InferenceEngine, plane: DataPlane) -> None:
        self._plane = plane
        self._one = GenerateCodec(engine, stream=False)
        self._events = GenerateCodec(engine, stream=True)

    async def generate(self, body: Body, meta: CallMeta) -> Reply:
        """One response as one JSON object."""
        return await stream_reply(self._plane, self._one, body, meta)

    async def generate_stream(self, body: Body, meta: CallMeta) -> Reply:
        """The responses as events; a refusal before the first is the request's answer."""
        return await stream_reply(self._plane, self._events, body, meta)


async def stream_reply(
    plane: DataPlane, codec: StreamCodec[HttpHead, bytes], body: Body, meta: CallMeta
) -> Reply:
    """The HTTP answer of a call a stream codec answers: its head's status and headers, and
    its items joined (``head.whole``) or sent as they come."""
    streamed = await plane.stream(codec, body, meta)
    head = streamed.head
    if head.whole:
        try:
            payload = b"".join([item async for item in streamed])
        finally:
            streamed.close()
        return head.status, payload, head.headers
    return head.status, StreamedBody(_items(streamed)), head.headers


async def _items(streamed: Streamed[Any, bytes]) -> AsyncGenerator[bytes, None]:
    try:
        async for item in streamed:
            yield item
    finally:
        streamed.close()
