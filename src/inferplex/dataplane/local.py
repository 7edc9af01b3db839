"""The in-process API's codecs (``Server.infer``, ``Server.stream``): the body is the request
itself, built in Python, not decoded, so each tensor gets the checks a codec runs on a
decoded one (``dataplane/checks.py``); the answer is the response (or, streamed, each
response as the model sends it)."""

from __future__ import annotations

from typing import Any

from inferplex.core.streaming import StreamedResponse
from inferplex.dataplane.checks import CheckFactory, check_dims, input_dtype, requested_output
from inferplex.dataplane.classification import ClassifiedOutputs
from inferplex.dataplane.codec import CallMeta, SpanLabel
from inferplex.errors import ErrorCode
from inferplex.shm.registry import Regions
from inferplex.types import InferenceRequest, InferenceResponse

__all__ = ["LOCAL", "LOCAL_STREAM"]


class LocalCodec:
    """A request built in Python in, its response out (the data plane's Codec)."""

    def span(self, meta: CallMeta) -> SpanLabel:
        return SpanLabel("infer", {"rpc.system": "inferplex"}, "inferplex.error", _failed)

    def work(self, body: Any, meta: CallMeta) -> int:
        return 0  # nothing to decode: the checks below run on the loop

    def decode(
        self, body: Any, meta: CallMeta, regions: Regions | None, checks: CheckFactory | None
    ) -> InferenceRequest:
        request: InferenceRequest = body
        for tensor in request.inputs:
            input_dtype(tensor.name, tensor.datatype)
            check_dims(tensor.name, tuple(tensor.shape))
        classified = False
        for output in request.outputs:
            if output.parameters and requested_output(output.name, output.parameters, regions):
                classified = True
        if classified and type(request.outputs) is not ClassifiedOutputs:
            request.outputs = ClassifiedOutputs(request.outputs)
        return request

    def encode(
        self, response: InferenceResponse, request: InferenceRequest, meta: CallMeta
    ) -> InferenceResponse:
        return response


class LocalStreamCodec(LocalCodec):
    """The responses as the model sends them, as they are (the data plane's StreamCodec)."""

    def encoder(self, request: InferenceRequest, meta: CallMeta) -> _AsTheyCome:
        return _AS_THEY_COME


class _AsTheyCome:
    def head(self, first: StreamedResponse) -> None:
        return None

    def item(self, item: StreamedResponse) -> StreamedResponse:
        return item

    def end(self) -> None:
        return None


def _failed(code: ErrorCode | None) -> int:
    """1 for a call that ended with an error, 0 for one that succeeded."""
    return 0 if code is None else 1


_AS_THEY_COME = _AsTheyCome()
LOCAL = LocalCodec()
LOCAL_STREAM = LocalStreamCodec()
