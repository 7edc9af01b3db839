"""The gRPC port on the wire: an independent HTTP/2 client (``h2``) drives it frame by frame.

These tests are the wire-level contract of whatever serves the gRPC port: they assert only
what the gRPC-over-HTTP/2 protocol (grpc/doc/PROTOCOL-HTTP2.md) and RFC 9113 require, never
one implementation's choices (exact messages, which of several allowed error codes, header
order). The client speaks h2c with prior knowledge over a plain loopback socket; every read
has a timeout, so a server that hangs fails the test instead of hanging it.

The last tests run the built-in server alone (GrpcServer, in a thread) on asyncio's loop and
on uvloop, over TCP and TLS, with grpcio sending it messages of several megabytes.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import signal
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import uvloop
from h2.errors import ErrorCodes
from h2.settings import SettingCodes
from hpack import Encoder

from inferplex.protocol.v2 import generated as pb
from inferplex.transport.grpc_server import GrpcServer, Method
from inferplex.transport.listener import GrpcLimits, ListenerSpec, TlsFiles
from inferplex.transport.sockets import bind
from inferplex_tools.benchtool.launch import RunningServer, start_server
from tests.support.certs import Certificates, make_certificates
from tests.support.h2client import (
    DATA,
    END_HEADERS,
    END_STREAM,
    HEADERS,
    INFER,
    INTERNAL,
    INVALID_ARGUMENT,
    LIVE,
    MAX_GRPC_MESSAGE_BYTES,
    NOT_FOUND,
    OK,
    RESOURCE_EXHAUSTED,
    SERVICE,
    TIMEOUT,
    UNIMPLEMENTED,
    H2Client,
    add_sub_request,
    echo_request,
    grpc_frame,
    operands,
    outputs_of,
    raw_frame,
    request_headers,
)


@pytest.fixture
def client(server: RunningServer) -> Iterator[H2Client]:
    with H2Client(server.grpc_port) as h2_client:
        yield h2_client


# ---------------------------------------------------------------------- tests


def test_unary_model_infer(client: H2Client) -> None:
    a, b = operands()
    outputs = outputs_of(client.infer(add_sub_request(a, b)).assert_ok())
    np.testing.assert_array_equal(outputs["OUTPUT0"], a + b)
    np.testing.assert_array_equal(outputs["OUTPUT1"], a - b)
    client.live()


def test_concurrent_streams_on_one_connection(client: H2Client) -> None:
    seeds = {client.start_call(INFER, add_sub_request(*operands(seed))): seed for seed in range(20)}
    for stream_id, seed in seeds.items():
        a, b = operands(seed)
        outputs = outputs_of(client.wait_finished(stream_id).assert_ok())
        np.testing.assert_array_equal(outputs["OUTPUT0"], a + b)
        np.testing.assert_array_equal(outputs["OUTPUT1"], a - b)


def test_headers_in_headers_and_continuation_frames(client: H2Client) -> None:
    a, b = operands(1)
    stream_id = client.open_stream_reframed(INFER, piece=5)
    client.send_body(stream_id, grpc_frame(add_sub_request(a, b)))
    outputs = outputs_of(client.wait_finished(stream_id).assert_ok())
    np.testing.assert_array_equal(outputs["OUTPUT0"], a + b)


def test_padded_headers_frame(client: H2Client) -> None:
    a, b = operands(2)
    stream_id = client.open_stream_reframed(INFER, piece=10_000, pad_length=7)
    client.send_body(stream_id, grpc_frame(add_sub_request(a, b)))
    outputs = outputs_of(client.wait_finished(stream_id).assert_ok())
    np.testing.assert_array_equal(outputs["OUTPUT0"], a + b)


def test_message_in_tiny_data_frames_then_empty_end_stream(client: H2Client) -> None:
    a, b = operands(3)
    stream_id = client.open_stream(INFER)
    client.send_body(stream_id, grpc_frame(add_sub_request(a, b)), end_stream=False, frame_size=3)
    client.send_body(stream_id, b"")  # END_STREAM on an empty DATA frame
    outputs = outputs_of(client.wait_finished(stream_id).assert_ok())
    np.testing.assert_array_equal(outputs["OUTPUT1"], a - b)


def test_padded_data_frames(client: H2Client) -> None:
    a, b = operands(4)
    stream_id = client.open_stream(INFER)
    message = grpc_frame(add_sub_request(a, b))
    client.send_body(stream_id, message, frame_size=50, pad_length=4)
    outputs = outputs_of(client.wait_finished(stream_id).assert_ok())
    np.testing.assert_array_equal(outputs["OUTPUT1"], a - b)


def test_ping_is_answered_and_settings_acknowledged(client: H2Client) -> None:
    client.ping(b"\x00\x01inplex")
    client.conn.update_settings({SettingCodes.MAX_CONCURRENT_STREAMS: 50})
    client.flush()
    # the SETTINGS of the connection preface and the one above
    client.wait_until(lambda: client.settings_acks == 2 and bool(client.ping_acks), "ACKs")
    assert client.ping_acks == [b"\x00\x01inplex"]
    client.live()


def test_request_larger_than_the_initial_windows_arrives_whole(client: H2Client) -> None:
    values = np.arange(150_000, dtype=np.float32)  # a 600 kB message; windows start at 64 kB
    call = client.infer(echo_request(values))
    np.testing.assert_array_equal(outputs_of(call.assert_ok())["OUTPUT0"], values)
    assert any(update.stream_id == 0 for update in client.window_updates)


def test_response_waits_for_the_client_window(server: RunningServer) -> None:
    window = 1024
    with H2Client(server.grpc_port, initial_window=window, acknowledge=False) as client:
        # once both SETTINGS are acknowledged, the small window holds for new streams
        client.wait_until(lambda: client.settings_acks == 2, "SETTINGS ACKs")
        assert client.conn.local_settings.initial_window_size == window
        values = np.arange(40_000, dtype=np.float32)  # a 160 kB response
        call = client.calls[client.start_call(INFER, echo_request(values))]

        def acknowledged_then_finished() -> bool:
            # h2 raises FlowControlError should the server ever send past the window
            client.acknowledge(call.stream_id)
            return call.finished

        client.wait_until(acknowledged_then_finished, "the whole response")
    assert len(call.body) > 65_535  # more than even the connection window
    np.testing.assert_array_equal(outputs_of(call.assert_ok())["OUTPUT0"], values)


def test_unknown_method_is_unimplemented(client: H2Client) -> None:
    client.call(SERVICE + "NoSuchMethod", b"").assert_grpc_error(UNIMPLEMENTED)
    client.call("/no.such.Service/ModelInfer", b"").assert_grpc_error(UNIMPLEMENTED)
    client.live()


def test_unknown_model_is_not_found(client: H2Client) -> None:
    call = client.infer(add_sub_request(*operands(), model="no_such_model"))
    call.assert_grpc_error(NOT_FOUND)
    assert "no_such_model" in call.grpc_message
    client.live()


def test_malformed_message_is_an_error(client: H2Client) -> None:
    client.infer(b"\xff\xff\xff\xff").assert_grpc_error(INVALID_ARGUMENT, INTERNAL)
    client.live()


def test_message_above_the_limit_is_resource_exhausted(client: H2Client) -> None:
    stream_id = client.open_stream(INFER)
    call = client.calls[stream_id]
    client.send_body(stream_id, struct.pack(">BI", 0, MAX_GRPC_MESSAGE_BYTES + 1), end_stream=False)
    zeros = bytes(1 << 20)
    for _ in range(MAX_GRPC_MESSAGE_BYTES // len(zeros)):
        client.send_body(stream_id, zeros, end_stream=False)
        client.poll()
        if call.finished:  # it may answer before the whole request is in (RFC 9113 8.1)
            break
    else:
        client.send_body(stream_id, b"\0")  # one byte too many, and the end of the request
    client.wait_finished(stream_id).assert_grpc_error(RESOURCE_EXHAUSTED)
    client.live()


def test_content_type_not_grpc_is_refused(client: H2Client) -> None:
    stream_id = client.open_stream(LIVE, content_type=b"text/plain")
    client.send_body(stream_id, grpc_frame(pb.ServerLiveRequest().SerializeToString()))
    call = client.wait_finished(stream_id)
    call.assert_complete()
    assert call.http_status == 415 or (
        call.http_status == 200 and call.grpc_status not in (None, OK)
    )
    client.live()


def test_get_is_not_a_successful_call(client: H2Client) -> None:
    stream_id = client.open_stream(LIVE, method=b"GET")
    client.send_body(stream_id, grpc_frame(pb.ServerLiveRequest().SerializeToString()))
    call = client.wait_finished(stream_id)
    assert not call.succeeded
    client.live()


def test_cancelled_half_sent_request_leaves_the_connection_usable(client: H2Client) -> None:
    stream_id = client.open_stream(INFER)
    message = grpc_frame(add_sub_request(*operands()))
    client.send_body(stream_id, message[: len(message) // 2], end_stream=False)
    client.reset(stream_id, ErrorCodes.CANCEL)
    client.live()
    a, b = operands(5)
    outputs = outputs_of(client.infer(add_sub_request(a, b)).assert_ok())
    np.testing.assert_array_equal(outputs["OUTPUT0"], a + b)


def test_gzip_compressed_request(client: H2Client) -> None:
    a, b = operands(6)
    stream_id = client.open_stream(INFER, extra=[(b"grpc-encoding", b"gzip")])
    client.send_body(stream_id, grpc_frame(gzip.compress(add_sub_request(a, b)), compressed=True))
    outputs = outputs_of(client.wait_finished(stream_id).assert_ok())
    np.testing.assert_array_equal(outputs["OUTPUT0"], a + b)
    np.testing.assert_array_equal(outputs["OUTPUT1"], a - b)


def headers_on_even_stream(port: int) -> bytes:
    """A complete ServerLive request, on stream 2: servers do not take even stream ids."""
    block = Encoder().encode(request_headers(LIVE, port))
    return raw_frame(HEADERS, END_HEADERS | END_STREAM, 2, block)


@pytest.mark.parametrize("bad_frame", ["headers-on-even-stream", "data-on-stream-0"])
def test_protocol_error_ends_the_connection(server: RunningServer, bad_frame: str) -> None:
    port = server.grpc_port
    with H2Client(port) as client:
        if bad_frame == "headers-on-even-stream":
            client.send_raw(headers_on_even_stream(port))
        else:
            client.send_raw(raw_frame(DATA, 0, 0, b"x"))
        # The server reads frames in order: by its answer to a PING after the bad frame at
        # the latest, it has ended the connection.
        client.ping(b"after-it")
        client.wait_until(lambda: client.ended or bool(client.ping_acks), "GOAWAY, close or PING")
        assert client.ended, "the server answered a PING after the bad frame"
        if client.goaway is not None:  # any error code but NO_ERROR
            assert client.goaway.error_code != ErrorCodes.NO_ERROR
    with H2Client(port) as fresh:
        fresh.live()


def test_shutdown_sends_goaway_or_closes(test_repository: Path, tmp_path: Path) -> None:
    running = start_server(test_repository, tmp_path / "server.log")
    try:
        with H2Client(running.grpc_port) as client:
            client.live()
            running.process.send_signal(signal.SIGTERM)
            client.wait_until(lambda: client.ended, "GOAWAY or close")
            if client.goaway is not None:
                assert client.goaway.error_code == ErrorCodes.NO_ERROR
            else:
                assert not client.reset_by_peer, "the connection was reset, not closed"
        assert running.process.wait(60) == 0, running.log()
    finally:
        if running.process.poll() is None:
            running.process.kill()
            running.process.wait()


def slow_request() -> bytes:
    """The `slow` model (about a second per call) on one element."""
    request = pb.ModelInferRequest(
        model_name="slow",
        inputs=[{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1]}],
        raw_input_contents=[np.zeros(1, "<f4").tobytes()],
    )
    return request.SerializeToString()


def test_deadline_passes_while_the_model_runs(client: H2Client) -> None:
    stream_id = client.start_call(INFER, slow_request(), extra=[(b"grpc-timeout", b"100m")])
    call = client.wait_finished(stream_id)
    call.assert_grpc_error(4)  # DEADLINE_EXCEEDED
    client.live()


def test_deadline_passes_before_the_body_arrives(client: H2Client) -> None:
    stream_id = client.open_stream(INFER, extra=[(b"grpc-timeout", b"50m")])
    call = client.wait_finished(stream_id)
    call.assert_grpc_error(4)
    client.live()


def test_a_deadline_that_does_not_pass_changes_nothing(client: H2Client) -> None:
    a, b = operands(3)
    call = client.call(INFER, add_sub_request(a, b), extra=[(b"grpc-timeout", b"30S")])
    outputs = outputs_of(call.assert_ok())
    np.testing.assert_allclose(outputs["OUTPUT0"].ravel(), a + b)


def test_message_above_the_limit_is_refused_from_its_prefix(client: H2Client) -> None:
    """The prefix announcing too large a message is enough: nothing more is waited for."""
    stream_id = client.open_stream(INFER)
    client.send_body(stream_id, struct.pack(">BI", 0, MAX_GRPC_MESSAGE_BYTES + 1), end_stream=False)
    client.wait_finished(stream_id).assert_grpc_error(RESOURCE_EXHAUSTED)
    client.live()


@pytest.mark.parametrize("frame_size", [3, 4, 16_384, None])
def test_several_megabytes_in_frames_of_any_size(client: H2Client, frame_size: int | None) -> None:
    """A first frame with less than the 5-byte prefix, frames the prefix splits, and frames
    as large as the windows allow (up to the server's maximum frame size)."""
    values = (
        np.random.default_rng(7)
        .standard_normal(1_000 if frame_size in (3, 4) else 1_500_000)
        .astype(np.float32)
    )
    stream_id = client.open_stream(INFER)
    client.send_body(stream_id, grpc_frame(echo_request(values)), frame_size=frame_size)
    np.testing.assert_array_equal(
        outputs_of(client.wait_finished(stream_id).assert_ok())["OUTPUT0"], values
    )


def test_several_megabytes_with_tritonclient(server: RunningServer) -> None:
    values = np.random.default_rng(8).standard_normal((1, 2_000_000)).astype(np.float32)
    with grpcclient.InferenceServerClient(server.grpc_url) as triton:
        tensor = grpcclient.InferInput("INPUT0", list(values.shape), "FP32")
        tensor.set_data_from_numpy(values)
        for _ in range(2):  # the second takes the codec's fast path
            result = triton.infer("identity_fp32", [tensor])
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values)


# ---------------------------------------------------------------------- the server alone
#
# GrpcServer in a thread on asyncio's own loop and on uvloop, over TCP and TLS (their
# transports read into the connection's buffers differently), with grpcio as the client.

ECHO = "/test.Echo/Digest"


async def _digest(message: Any, call: Any) -> bytes:
    """The message's SHA-256, and whether it came as a view of its buffer (no copy)."""
    return hashlib.sha256(message).digest() + (b"view" if isinstance(message, memoryview) else b"")


@contextmanager
def _serving(loop_kind: str, context: TlsFiles | None) -> Iterator[int]:
    loop = uvloop.new_event_loop() if loop_kind == "uvloop" else asyncio.new_event_loop()
    methods = {ECHO: Method(_digest, lambda message: message, lambda answer: answer)}
    spec = ListenerSpec(tls=context, grpc=GrpcLimits(max_message_bytes=32 << 20))
    grpc_server = GrpcServer(methods, spec)
    port = loop.run_until_complete(grpc_server.start(bind("127.0.0.1", 0, "gRPC")))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        asyncio.run_coroutine_threadsafe(grpc_server.stop(0), loop).result(TIMEOUT)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(TIMEOUT)
        loop.close()


def _check_digest(answer: bytes, message: bytes) -> None:
    digest = hashlib.sha256(message).digest()
    if len(message) >= 1 << 20:  # many reads: into the buffer its prefix sized
        assert answer == digest + b"view"
    else:  # likely here whole in one read, and then handed over as it came
        assert answer in (digest, digest + b"view")


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.mark.parametrize("tls", [False, True], ids=["tcp", "tls"])
@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_large_messages_from_grpcio(loop_kind: str, tls: bool, certificates: Certificates) -> None:
    """Messages of several megabytes, one at a time and four at once on one connection (their
    frames interleave), arrive whole as views of their buffers (small ones as they came);
    one above the limit is refused from its prefix, and the connection goes on."""
    context = None
    if tls:
        context = TlsFiles(certificates.server_cert, certificates.server_key)
    rng = np.random.default_rng(9)
    messages = [rng.bytes(size) for size in (0, 1, 4, 5, 1000, 6 << 20, 3 << 20, 5 << 20, 1 << 20)]
    with _serving(loop_kind, context) as port:
        target = f"127.0.0.1:{port}"
        if tls:
            credentials = grpc.ssl_channel_credentials(certificates.ca.read_bytes())
            channel = grpc.secure_channel(target, credentials)
        else:
            channel = grpc.insecure_channel(target)
        with channel:
            digest = channel.unary_unary(ECHO)
            for message in messages[:6]:
                _check_digest(digest(message, timeout=TIMEOUT), message)
            calls = [digest.future(message, timeout=TIMEOUT) for message in messages[5:]]
            for call, message in zip(calls, messages[5:], strict=True):
                _check_digest(call.result(), message)
            with pytest.raises(grpc.RpcError) as info:
                digest(bytes((32 << 20) + 1), timeout=TIMEOUT)
            assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert digest(b"after", timeout=TIMEOUT).startswith(hashlib.sha256(b"after").digest())
