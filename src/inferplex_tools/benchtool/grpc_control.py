"""The connection-level frames of the lean gRPC client (``grpc_wire.GrpcConnection``): the
preface it opens with, the server's SETTINGS read and checked, GOAWAY read and written
(RFC 9113 sections 3.4, 6.5 and 6.8)."""

from __future__ import annotations

import struct
from typing import NamedTuple

from inferplex.transport.http2_wire import (
    DEFAULT_WINDOW,
    ENABLE_PUSH,
    FLOW_CONTROL_ERROR,
    FRAME_SIZE_ERROR,
    GOAWAY,
    INITIAL_WINDOW_SIZE,
    MAX_CONCURRENT_STREAMS,
    MAX_FRAME_SIZE,
    MAX_FRAME_SIZE_LIMIT,
    MAX_WINDOW,
    MIN_FRAME_SIZE,
    PREFACE,
    PROTOCOL_ERROR,
    SETTING,
    SETTINGS,
    U32,
    WINDOW_UPDATE,
    Http2Error,
    frame,
)

#: the largest frame we accept: large answers come in few frames
RECEIVE_FRAME_SIZE = 1 << 20

_GOAWAY_HEAD = struct.Struct(">LL")


def client_preface(receive_window: int) -> bytes:
    """The connection preface and our SETTINGS (no push, our window and frame size), with the
    connection window raised to ``receive_window``."""
    settings = b"".join(
        SETTING.pack(key, value)
        for key, value in (
            (ENABLE_PUSH, 0),
            (INITIAL_WINDOW_SIZE, receive_window),
            (MAX_FRAME_SIZE, RECEIVE_FRAME_SIZE),
        )
    )
    preface = PREFACE + frame(SETTINGS, 0, 0, settings)
    if receive_window > DEFAULT_WINDOW:
        preface += frame(WINDOW_UPDATE, 0, 0, U32.pack(receive_window - DEFAULT_WINDOW))
    return preface


class ServerSettings:
    """The server's settings a client obeys (RFC 9113 defaults until its SETTINGS come)."""

    __slots__ = ("frame_size", "max_streams", "window")

    def __init__(self) -> None:
        self.max_streams = MAX_WINDOW
        self.window = DEFAULT_WINDOW  # each new stream's send window
        self.frame_size = MIN_FRAME_SIZE

    def apply(self, payload: bytes) -> int:
        """Read a SETTINGS payload (Http2Error if malformed); returns how far the initial
        stream window moved (every open stream's window moves with it)."""
        if len(payload) % 6:
            raise Http2Error(FRAME_SIZE_ERROR, "a SETTINGS payload not a multiple of 6")
        before = self.window
        for key, value in SETTING.iter_unpack(payload):
            if key == MAX_CONCURRENT_STREAMS:
                self.max_streams = value
            elif key == INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise Http2Error(FLOW_CONTROL_ERROR, f"an initial window of {value}")
                self.window = value
            elif key == MAX_FRAME_SIZE:
                if not MIN_FRAME_SIZE <= value <= MAX_FRAME_SIZE_LIMIT:
                    raise Http2Error(PROTOCOL_ERROR, f"a max frame size of {value}")
                self.frame_size = value
        return self.window - before


class GoAway(NamedTuple):
    """The server's GOAWAY: streams above ``last_id`` were not processed."""

    last_id: int
    code: int
    debug: str


def read_goaway(payload: bytes) -> GoAway:
    """A GOAWAY frame's payload (Http2Error if malformed)."""
    if len(payload) < 8:
        raise Http2Error(PROTOCOL_ERROR, "a malformed GOAWAY")
    last_id, code = _GOAWAY_HEAD.unpack_from(payload)
    return GoAway(last_id & MAX_WINDOW, code, payload[8:].decode(errors="replace"))


def goaway(code: int, message: str) -> bytes:
    """Our GOAWAY frame: the server broke the protocol (``code``), and how."""
    return frame(GOAWAY, 0, 0, _GOAWAY_HEAD.pack(0, code) + message.encode()[:256])
