"""An HTTP/2 client made of the ``h2`` library, for driving the gRPC port frame by frame
(tests/integration/test_grpc_http2.py): gRPC messages, raw frames, a blocking client with
per-stream calls; every read has a timeout."""

from __future__ import annotations

import gzip
import select
import socket
import struct
import time
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    Event,
    PingAckReceived,
    ResponseReceived,
    SettingsAcknowledged,
    StreamEnded,
    StreamReset,
    TrailersReceived,
    WindowUpdated,
)
from h2.settings import SettingCodes

from inferplex.config.server_config import ServerConfig
from inferplex.protocol.v2 import generated as pb
from inferplex_tools.benchtool.launch import HOST

#: Seconds any one wait for the server may take before the test fails.
TIMEOUT = 10.0
SERVICE = "/inference.GRPCInferenceService/"
INFER = SERVICE + "ModelInfer"
LIVE = SERVICE + "ServerLive"

# gRPC status codes (grpc/doc/statuscodes.md)
OK = 0
INVALID_ARGUMENT = 3
NOT_FOUND = 5
RESOURCE_EXHAUSTED = 8
UNIMPLEMENTED = 12
INTERNAL = 13

#: The server's gRPC message limit, which the `server` fixture leaves at its default.
MAX_GRPC_MESSAGE_BYTES: int = ServerConfig.model_fields["max_grpc_message_bytes"].default

FRAME_HEADER_BYTES = 9
# frame types and flags (RFC 9113 section 6)
DATA, HEADERS, CONTINUATION = 0x0, 0x1, 0x9
END_STREAM, END_HEADERS, PADDED = 0x1, 0x4, 0x8


# ---------------------------------------------------------------------- gRPC messages


def grpc_frame(message: bytes, *, compressed: bool = False) -> bytes:
    """A length-prefixed message: compressed flag (1 byte), length (4 bytes, big-endian)."""
    return struct.pack(">BI", int(compressed), len(message)) + message


def grpc_unframe(body: bytes, encoding: bytes | None) -> list[bytes]:
    """The messages of a response body, decompressed where their flag says so."""
    messages = []
    offset = 0
    while offset < len(body):
        assert len(body) - offset >= 5, f"truncated message prefix: {body[offset:]!r}"
        flag, length = struct.unpack_from(">BI", body, offset)
        offset += 5
        message = body[offset : offset + length]
        assert len(message) == length, f"message of {len(message)} bytes, prefix says {length}"
        offset += length
        if flag == 1:
            assert encoding == b"gzip", f"compressed message with grpc-encoding {encoding!r}"
            message = gzip.decompress(message)
        else:
            assert flag == 0, f"compressed flag {flag}"
        messages.append(message)
    return messages


def request_headers(
    path: str,
    port: int,
    *,
    method: bytes = b"POST",
    content_type: bytes = b"application/grpc",
    extra: Iterable[tuple[bytes, bytes]] = (),
) -> list[tuple[bytes, bytes]]:
    """A gRPC request's headers (PROTOCOL-HTTP2.md, Requests)."""
    return [
        (b":method", method),
        (b":scheme", b"http"),
        (b":path", path.encode()),
        (b":authority", f"{HOST}:{port}".encode()),
        (b"content-type", content_type),
        (b"te", b"trailers"),
        *extra,
    ]


def add_sub_request(a: np.ndarray, b: np.ndarray, *, model: str = "add_sub") -> bytes:
    request = pb.ModelInferRequest(
        model_name=model,
        inputs=[
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, a.size]},
            {"name": "INPUT1", "datatype": "FP32", "shape": [1, b.size]},
        ],
        raw_input_contents=[a.astype("<f4").tobytes(), b.astype("<f4").tobytes()],
    )
    return request.SerializeToString()


def echo_request(values: np.ndarray) -> bytes:
    """identity_fp32 returns INPUT0 ``[1, n]`` unchanged: any size of message, both ways."""
    request = pb.ModelInferRequest(
        model_name="identity_fp32",
        inputs=[{"name": "INPUT0", "datatype": "FP32", "shape": [1, values.size]}],
        raw_input_contents=[values.astype("<f4").tobytes()],
    )
    return request.SerializeToString()


def outputs_of(message: bytes) -> dict[str, np.ndarray]:
    response = pb.ModelInferResponse.FromString(message)
    return {
        output.name: np.frombuffer(raw, "<f4")
        for output, raw in zip(response.outputs, response.raw_output_contents, strict=True)
    }


def operands(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(16).astype(np.float32), rng.standard_normal(16).astype(np.float32)


# ---------------------------------------------------------------------- frames by hand


def raw_frame(frame_type: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    """A frame: 24-bit length, type, flags, 31-bit stream id, payload (RFC 9113 section 4.1)."""
    header = struct.pack(">I", len(payload))[1:] + struct.pack(">BBI", frame_type, flags, stream_id)
    return header + payload


def reframed_headers(frame: bytes, piece: int, pad_length: int | None = None) -> bytes:
    """One HEADERS frame (as h2 wrote it) again as a HEADERS frame holding the first ``piece``
    bytes of its header block, padded if ``pad_length`` is given, and CONTINUATION frames
    holding the rest."""
    length, frame_type, flags, stream_id = struct.unpack(">IBBI", b"\0" + frame[:9])
    assert frame_type == HEADERS and flags == END_HEADERS, "expected h2's plain HEADERS frame"
    assert len(frame) == FRAME_HEADER_BYTES + length, "expected exactly one frame"
    block = frame[FRAME_HEADER_BYTES:]
    first, rest = block[:piece], [block[i : i + piece] for i in range(piece, len(block), piece)]
    first_flags = 0 if rest else END_HEADERS
    if pad_length is not None:
        first_flags |= PADDED
        first = bytes([pad_length]) + first + bytes(pad_length)
    frames = [raw_frame(HEADERS, first_flags, stream_id, first)]
    frames += [raw_frame(CONTINUATION, 0, stream_id, p) for p in rest[:-1]]
    frames += [raw_frame(CONTINUATION, END_HEADERS, stream_id, p) for p in rest[-1:]]
    return b"".join(frames)


# ---------------------------------------------------------------------- the HTTP/2 client


@dataclass
class Call:
    """What came back on one stream."""

    stream_id: int
    headers: dict[bytes, bytes] = field(default_factory=dict)
    body: bytearray = field(default_factory=bytearray)
    trailers: dict[bytes, bytes] = field(default_factory=dict)
    ended: bool = False
    reset: ErrorCodes | int | None = None

    @property
    def finished(self) -> bool:
        return self.ended or self.reset is not None

    @property
    def http_status(self) -> int:
        return int(self.headers[b":status"])

    @property
    def grpc_status(self) -> int | None:
        """From the trailers, or from the headers of a Trailers-Only response."""
        status = self.trailers.get(b"grpc-status", self.headers.get(b"grpc-status"))
        return None if status is None else int(status)

    @property
    def grpc_message(self) -> str:
        raw = self.trailers.get(b"grpc-message", self.headers.get(b"grpc-message", b""))
        return urllib.parse.unquote(raw.decode("ascii"))

    def messages(self) -> list[bytes]:
        return grpc_unframe(bytes(self.body), self.headers.get(b"grpc-encoding"))

    @property
    def succeeded(self) -> bool:
        return (
            self.ended
            and self.reset in (None, ErrorCodes.NO_ERROR)
            and self.headers.get(b":status") == b"200"
            and self.grpc_status == OK
        )

    def assert_complete(self) -> None:
        """The response ended with END_STREAM. A RST_STREAM (NO_ERROR) after it only tells the
        client to stop sending a request the server no longer needs (RFC 9113 section 8.1)."""
        assert self.ended, f"stream {self.stream_id} reset with {self.reset!r}"
        assert self.reset in (None, ErrorCodes.NO_ERROR), f"then reset with {self.reset!r}"

    def assert_ok(self) -> bytes:
        """A successful unary call: 200, application/grpc, one message, grpc-status 0."""
        self.assert_complete()
        assert self.http_status == 200
        assert self.headers[b"content-type"].startswith(b"application/grpc")
        assert self.grpc_status == OK, f"grpc-status {self.grpc_status}: {self.grpc_message}"
        assert self.trailers, "grpc-status must come in trailers after the message"
        (message,) = self.messages()
        return message

    def assert_grpc_error(self, *codes: int) -> None:
        self.assert_complete()
        assert self.http_status == 200
        assert self.grpc_status in codes, f"grpc-status {self.grpc_status}: {self.grpc_message}"


class H2Client:
    """One HTTP/2 connection (h2c, prior knowledge) to the gRPC port, driven by hand.

    ``acknowledge=False`` leaves received DATA unacknowledged until :meth:`acknowledge`:
    the server's send window then only opens when the test says so.
    """

    def __init__(
        self, port: int, *, initial_window: int | None = None, acknowledge: bool = True
    ) -> None:
        self.port = port
        self.sock = socket.create_connection((HOST, port), timeout=TIMEOUT)
        self.conn = H2Connection(H2Configuration(client_side=True, header_encoding=None))
        self.auto_acknowledge = acknowledge
        self.calls: dict[int, Call] = {}
        self.ping_acks: list[bytes] = []
        self.settings_acks = 0
        self.window_updates: list[WindowUpdated] = []
        self.goaway: ConnectionTerminated | None = None
        self.closed = False  # the server closed the connection
        self.reset_by_peer = False  # ... abruptly (ECONNRESET)
        self._unacknowledged: dict[int, int] = {}
        self._inbound = bytearray()
        self.conn.initiate_connection()
        if initial_window is not None:
            self.conn.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: initial_window})
        self.flush()

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> H2Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sending ---------------------------------------------------------------------
    def flush(self) -> None:
        self._send(self.conn.data_to_send())

    def send_raw(self, data: bytes) -> None:
        """Bytes past h2: frames it refuses to build."""
        self.flush()
        self._send(data)

    def _send(self, data: bytes) -> None:
        """Send; a connection the server has closed is recorded, for the waits to report."""
        if not data or self.closed:
            return
        try:
            self.sock.sendall(data)
        except ConnectionResetError:
            self.closed = self.reset_by_peer = True
        except BrokenPipeError:
            self.closed = True

    def open_stream(self, path: str, **headers: Any) -> int:
        stream_id = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream_id, request_headers(path, self.port, **headers))
        self.calls[stream_id] = Call(stream_id)
        self.flush()
        return stream_id

    def send_body(
        self,
        stream_id: int,
        data: bytes,
        *,
        end_stream: bool = True,
        frame_size: int | None = None,
        pad_length: int | None = None,
    ) -> None:
        """DATA frames of at most ``frame_size`` bytes, within the server's send windows
        (reading only while they are closed). Stops if the server ends the stream meanwhile:
        it may answer before the whole request is in (RFC 9113 section 8.1)."""
        padding = 0 if pad_length is None else pad_length + 1
        call = self.calls[stream_id]
        view = memoryview(data)
        while view and not call.finished:
            room = min(
                self.conn.local_flow_control_window(stream_id), self.conn.max_outbound_frame_size
            )
            room = min(room - padding, frame_size or room)
            if room <= 0:
                assert not self.closed, f"connection closed while sending on stream {stream_id}"
                self.receive()  # the server has to open its window first
                continue
            chunk, view = view[:room], view[room:]
            self.conn.send_data(stream_id, chunk.tobytes(), pad_length=pad_length)
            self.flush()
        if end_stream and not call.finished:
            self.conn.end_stream(stream_id)
            self.flush()

    def open_stream_reframed(self, path: str, piece: int, pad_length: int | None = None) -> int:
        """Like open_stream, the HEADERS frame rewritten by reframed_headers."""
        self.flush()
        stream_id = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream_id, request_headers(path, self.port))
        self.calls[stream_id] = Call(stream_id)
        self._send(reframed_headers(self.conn.data_to_send(), piece, pad_length))
        return stream_id

    def start_call(self, path: str, message: bytes, **headers: Any) -> int:
        stream_id = self.open_stream(path, **headers)
        self.send_body(stream_id, grpc_frame(message))
        return stream_id

    def call(self, path: str, message: bytes, **headers: Any) -> Call:
        return self.wait_finished(self.start_call(path, message, **headers))

    def infer(self, message: bytes) -> Call:
        return self.call(INFER, message)

    def live(self) -> None:
        message = self.call(LIVE, pb.ServerLiveRequest().SerializeToString()).assert_ok()
        assert pb.ServerLiveResponse.FromString(message).live

    def reset(self, stream_id: int, code: ErrorCodes = ErrorCodes.CANCEL) -> None:
        self.conn.reset_stream(stream_id, code)
        self.flush()

    def ping(self, payload: bytes) -> None:
        self.conn.ping(payload)
        self.flush()

    def acknowledge(self, stream_id: int) -> None:
        """Hand back the window of everything received on the stream so far."""
        size = self._unacknowledged.pop(stream_id, 0)
        if size:
            self.conn.acknowledge_received_data(size, stream_id)
            self.flush()

    # -- receiving -------------------------------------------------------------------
    def receive(self) -> None:
        """One read from the socket (at most TIMEOUT seconds), its events recorded.

        h2 is fed one whole frame at a time and nothing after a GOAWAY: h2 takes any frame
        after one as a protocol error, though RFC 9113 lets the server go on (a graceful
        shutdown's PING, the streams it still finishes).
        """
        try:
            data = self.sock.recv(1 << 16)
        except ConnectionResetError:
            self.reset_by_peer = True
            data = b""
        if not data:
            self.closed = True
            return
        self._inbound += data
        while self.goaway is None and len(self._inbound) >= FRAME_HEADER_BYTES:
            end = FRAME_HEADER_BYTES + int.from_bytes(self._inbound[:3], "big")
            if len(self._inbound) < end:
                break
            frame = bytes(self._inbound[:end])
            del self._inbound[:end]
            for event in self.conn.receive_data(frame):
                self._record(event)
        self.flush()

    def poll(self) -> None:
        """Record whatever has already arrived, without waiting."""
        while not self.closed and select.select([self.sock], [], [], 0)[0]:
            self.receive()

    @property
    def ended(self) -> bool:
        """The server sent GOAWAY or closed the connection."""
        return self.goaway is not None or self.closed

    def wait_until(self, done: Callable[[], bool], what: str) -> None:
        """Read until ``done()``; the connection closing first fails, unless it is done."""
        deadline = time.monotonic() + TIMEOUT
        while not done():
            assert not self.closed, f"connection closed while waiting for {what}"
            assert time.monotonic() < deadline, f"no {what} within {TIMEOUT} s"
            self.receive()

    def wait_finished(self, stream_id: int) -> Call:
        call = self.calls[stream_id]
        self.wait_until(lambda: call.finished, f"end of stream {stream_id}")
        return call

    def _record(self, event: Event) -> None:
        if isinstance(event, ResponseReceived):
            self.calls[event.stream_id].headers = dict(event.headers)
        elif isinstance(event, DataReceived):
            self._record_data(event)
        elif isinstance(event, TrailersReceived):
            self.calls[event.stream_id].trailers = dict(event.headers)
        elif isinstance(event, StreamEnded):
            self.calls[event.stream_id].ended = True
        elif isinstance(event, StreamReset):
            self.calls[event.stream_id].reset = event.error_code
        elif isinstance(event, PingAckReceived):
            self.ping_acks.append(event.ping_data)
        elif isinstance(event, SettingsAcknowledged):
            self.settings_acks += 1
        elif isinstance(event, WindowUpdated):
            self.window_updates.append(event)
        elif isinstance(event, ConnectionTerminated):
            self.goaway = event

    def _record_data(self, event: DataReceived) -> None:
        """A response's DATA: kept, and acknowledged now or counted for later."""
        self.calls[event.stream_id].body += event.data
        if self.auto_acknowledge:
            self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        else:
            unacknowledged = self._unacknowledged.get(event.stream_id, 0)
            self._unacknowledged[event.stream_id] = unacknowledged + event.flow_controlled_length
