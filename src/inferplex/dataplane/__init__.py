"""The data plane: the one door between the protocols and the engine. A frontend hands its
codec, a call's body and its :class:`CallMeta` to :meth:`DataPlane.infer` or
:meth:`DataPlane.stream`; ``codec.py`` says how to write a codec, ``plane.py`` what every
call goes through, ``checks.py`` holds every check of a decoded tensor."""

from inferplex.dataplane.codec import Body, CallMeta, Codec, ItemEncoder, SpanLabel, StreamCodec
from inferplex.dataplane.offload import OFFLOAD_BYTES
from inferplex.dataplane.plane import ROUTING_KEY, DataPlane
from inferplex.dataplane.streams import Streamed

__all__ = [
    "OFFLOAD_BYTES",
    "ROUTING_KEY",
    "Body",
    "CallMeta",
    "Codec",
    "DataPlane",
    "ItemEncoder",
    "SpanLabel",
    "StreamCodec",
    "Streamed",
]
