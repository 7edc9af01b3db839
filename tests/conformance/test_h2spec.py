"""RFC 9113 and RFC 7541 conformance of the built-in gRPC server, organised as h2spec is: one
test per h2spec case, named after its section and number (``test_6_5_3_2`` is h2spec's
"6.5.3 #2"), each with h2spec's expectation. Cases h2spec leaves lenient (a stream error
or a connection error) are checked for what this server answers, which is one of them.

The server is the real built-in one (GrpcServer) on a free loopback port; the client writes
raw frames (tests/support/h2raw.py), so frames no library would send can be sent.
"""

from __future__ import annotations

import pytest

from inferplex.transport.http2_limits import Http2Limits
from tests.support.h2raw import (
    ACK,
    CANCEL,
    COMPRESSION_ERROR,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    FRAME_SIZE_ERROR,
    GOAWAY,
    HEADERS,
    PING,
    PREFACE,
    PRIORITY,
    PRIORITY_FLAG,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    REFUSED_STREAM,
    RST_STREAM,
    SLOW,
    STREAM_CLOSED,
    WINDOW_UPDATE,
    Conn,
    Served,
    frame,
    grpc_message,
    open_slow,
    serving,
    u32,
)

ECHO_PATH = "/test.Echo/Echo"


# -- 3.5 HTTP/2 connection preface ------------------------------------------------------------


def test_3_5_1_client_connection_preface(served: Served) -> None:
    with Conn(served.port) as conn:
        conn.handshake()
        conn.alive()


def test_3_5_2_invalid_connection_preface(served: Served) -> None:
    with Conn(served.port) as conn:
        conn.send(b"INVALID CONNECTION PREFACE\r\n\r\n")
        conn.connection_error(PROTOCOL_ERROR)


def test_3_5_3_first_frame_not_settings(served: Served) -> None:
    """RFC 9113 3.4: the preface's SETTINGS must be the first frame."""
    with Conn(served.port) as conn:
        conn.send(PREFACE, frame(PING, 0, 0, bytes(8)))
        conn.connection_error(PROTOCOL_ERROR)


# -- 4 HTTP frames ----------------------------------------------------------------------------


def test_4_1_1_frame_with_unknown_type(conn: Conn) -> None:
    conn.send(frame(0x16, 0, 0, b"x" * 8))
    conn.alive()


def test_4_1_2_frame_with_undefined_flag(conn: Conn) -> None:
    conn.send(frame(PING, 0x16, 0, bytes(8)))
    conn.expect(lambda f: f.kind == PING and bool(f.flags & ACK), "the PING's ACK")


def test_4_1_3_frame_with_reserved_field_bit(conn: Conn) -> None:
    conn.send(frame(PING, 0, 0x80000000, bytes(8)))
    conn.expect(lambda f: f.kind == PING and bool(f.flags & ACK), "the PING's ACK")


def test_4_2_1_data_frame_of_2_14_octets(conn: Conn) -> None:
    body = b"x" * (16_384 - 5)
    conn.send(
        conn.headers(1, conn.fields(ECHO_PATH)), frame(DATA, END_STREAM, 1, grpc_message(body))
    )
    assert conn.grpc_status(1) == 0


def test_4_2_2_data_frame_above_max_frame_size(conn: Conn) -> None:
    server_max = 1 << 20  # the server's SETTINGS_MAX_FRAME_SIZE
    conn.send(
        conn.headers(1, conn.fields(ECHO_PATH)), frame(DATA, END_STREAM, 1, bytes(server_max + 1))
    )
    conn.stream_error(1, FRAME_SIZE_ERROR)


def test_4_2_3_headers_frame_above_max_frame_size(conn: Conn) -> None:
    block = conn.encoder.encode([*conn.fields(), ("x-big", "v" * ((1 << 20) + 10))], huffman=False)
    conn.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, block))
    conn.connection_error(FRAME_SIZE_ERROR)


def test_4_3_1_invalid_header_block_fragment(conn: Conn) -> None:
    # a literal with incremental indexing, without its length and string
    conn.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, b"\x40"))
    conn.connection_error(COMPRESSION_ERROR)


def test_4_3_2_priority_frame_while_sending_header_blocks(conn: Conn) -> None:
    conn.send(conn.headers(1, flags=0), frame(PRIORITY, 0, 1, u32(0) + b"\x10"))
    conn.connection_error(PROTOCOL_ERROR)


def test_4_3_3_headers_to_another_stream_while_sending_header_blocks(conn: Conn) -> None:
    conn.send(conn.headers(1, flags=0), conn.headers(3))
    conn.connection_error(PROTOCOL_ERROR)


# -- 5.1 stream states ------------------------------------------------------------------------


def test_5_1_1_idle_data(conn: Conn) -> None:
    conn.send(frame(DATA, END_STREAM, 1, b"test"))
    conn.connection_error(PROTOCOL_ERROR)


def test_5_1_2_idle_rst_stream(conn: Conn) -> None:
    conn.send(frame(RST_STREAM, 0, 1, u32(CANCEL)))
    conn.connection_error(PROTOCOL_ERROR)


def test_5_1_3_idle_window_update(conn: Conn) -> None:
    conn.send(frame(WINDOW_UPDATE, 0, 1, u32(100)))
    conn.connection_error(PROTOCOL_ERROR)


def test_5_1_4_idle_continuation(conn: Conn) -> None:
    conn.send(frame(CONTINUATION, END_HEADERS, 1, conn.encoder.encode(conn.fields())))
    conn.connection_error(PROTOCOL_ERROR)


def test_5_1_5_half_closed_remote_data(conn: Conn) -> None:
    open_slow(conn, 1)
    conn.send(frame(DATA, END_STREAM, 1, b"test"))
    conn.stream_error(1, STREAM_CLOSED)


def test_5_1_6_half_closed_remote_headers(conn: Conn) -> None:
    open_slow(conn, 1)
    conn.send(conn.headers(1, [("x-trailer", "1")], END_HEADERS | END_STREAM))
    conn.stream_error(1, STREAM_CLOSED)


def test_5_1_7_half_closed_remote_continuation(conn: Conn) -> None:
    open_slow(conn, 1)
    conn.send(frame(CONTINUATION, END_HEADERS, 1, conn.encoder.encode([("x-a", "1")])))
    conn.stream_error(1, STREAM_CLOSED, PROTOCOL_ERROR)


def test_5_1_8_closed_data_after_rst_stream(conn: Conn) -> None:
    conn.send(conn.headers(1, conn.fields(SLOW)), frame(RST_STREAM, 0, 1, u32(CANCEL)))
    conn.send(frame(DATA, END_STREAM, 1, b"test"))
    conn.stream_error(1, STREAM_CLOSED)


def test_5_1_9_closed_headers_after_rst_stream(conn: Conn) -> None:
    conn.send(conn.headers(1, conn.fields(SLOW)), frame(RST_STREAM, 0, 1, u32(CANCEL)))
    conn.send(conn.headers(1, conn.fields(SLOW), END_HEADERS | END_STREAM))
    conn.stream_error(1, STREAM_CLOSED)


def test_5_1_10_closed_continuation_after_rst_stream(conn: Conn) -> None:
    conn.send(conn.headers(1, conn.fields(SLOW)), frame(RST_STREAM, 0, 1, u32(CANCEL)))
    conn.send(frame(CONTINUATION, END_HEADERS, 1, conn.encoder.encode([("x-a", "1")])))
    conn.stream_error(1, STREAM_CLOSED, PROTOCOL_ERROR)


def test_5_1_11_closed_data(conn: Conn) -> None:
    conn.send(conn.call(1))
    assert conn.grpc_status(1) == 0
    conn.send(frame(DATA, END_STREAM, 1, b"test"))
    conn.stream_error(1, STREAM_CLOSED)


def test_5_1_12_closed_headers(conn: Conn) -> None:
    conn.send(conn.call(1))
    assert conn.grpc_status(1) == 0
    conn.send(conn.headers(1, flags=END_HEADERS | END_STREAM))
    conn.connection_error(STREAM_CLOSED)


def test_5_1_13_closed_continuation(conn: Conn) -> None:
    conn.send(conn.call(1))
    assert conn.grpc_status(1) == 0
    conn.send(frame(CONTINUATION, END_HEADERS, 1, conn.encoder.encode([("x-a", "1")])))
    conn.connection_error(PROTOCOL_ERROR)


def test_5_1_1_1_even_numbered_stream_identifier(conn: Conn) -> None:
    conn.send(conn.headers(2, flags=END_HEADERS | END_STREAM))
    conn.connection_error(PROTOCOL_ERROR)


def test_5_1_1_2_stream_identifier_smaller_than_previous(conn: Conn) -> None:
    conn.send(conn.headers(5, flags=END_HEADERS | END_STREAM))
    conn.send(conn.headers(3, flags=END_HEADERS | END_STREAM))
    conn.connection_error(PROTOCOL_ERROR)


def test_5_1_2_1_concurrent_stream_limit_exceeded() -> None:
    with serving(Http2Limits(max_concurrent_streams=4)) as server, Conn(server.port) as conn:
        conn.handshake()
        for stream_id in range(1, 10, 2):  # five: one more than allowed
            conn.send(conn.call(stream_id, SLOW))
        assert conn.stream_error(9, PROTOCOL_ERROR, REFUSED_STREAM) == RST_STREAM
        conn.alive()


# -- 5.3.1 stream dependencies, 5.4.1 connection errors, 5.5 extensions ---------------------------


def test_5_3_1_1_headers_depending_on_itself(conn: Conn) -> None:
    block = conn.encoder.encode(conn.fields())
    conn.send(frame(HEADERS, END_HEADERS | END_STREAM | PRIORITY_FLAG, 1, u32(1) + b"\x10" + block))
    conn.stream_error(1, PROTOCOL_ERROR)


def test_5_3_1_2_priority_depending_on_itself(conn: Conn) -> None:
    open_slow(conn, 1)
    conn.send(frame(PRIORITY, 0, 1, u32(1) + b"\x10"))
    conn.stream_error(1, PROTOCOL_ERROR)


def test_5_4_1_1_invalid_ping_closes_the_connection(conn: Conn) -> None:
    conn.send(frame(PING, 0, 3, bytes(8)))
    conn.connection_error(PROTOCOL_ERROR)


def test_5_4_1_2_invalid_ping_gets_goaway(conn: Conn) -> None:
    conn.send(frame(PING, 0, 3, bytes(8)))
    goaway = conn.expect(lambda f: f.kind == GOAWAY, "GOAWAY")
    assert goaway.code == PROTOCOL_ERROR


def test_5_5_1_unknown_extension_frame(conn: Conn) -> None:
    conn.send(frame(0xFF, 0, 0, b"x"))
    conn.alive()


def test_5_5_2_unknown_extension_frame_in_a_header_block(conn: Conn) -> None:
    conn.send(conn.headers(1, flags=0), frame(0xFF, 0, 1, b"x"))
    conn.connection_error(PROTOCOL_ERROR)


# -- 7 error codes, 8.1 request/response exchange ------------------------------------------------


def test_7_1_goaway_with_an_unknown_error_code(conn: Conn) -> None:
    conn.send(frame(GOAWAY, 0, 0, u32(0) + u32(0xFF)))
    conn.send(frame(PING, 0, 0, b"stillok?"))
    while (got := conn.read()) is not None:  # a PING ACK, or the connection closes
        if got.kind == PING:
            break


def test_7_2_rst_stream_with_an_unknown_error_code(conn: Conn) -> None:
    open_slow(conn, 1)
    conn.send(frame(RST_STREAM, 0, 1, u32(0xFF)))
    conn.alive()


def test_8_1_1_second_headers_without_end_stream(conn: Conn) -> None:
    conn.send(conn.headers(1, conn.fields(SLOW)), frame(DATA, 0, 1, grpc_message(b"")))
    conn.send(conn.headers(1, [("x-trailer", "1")], END_HEADERS))
    conn.stream_error(1, PROTOCOL_ERROR)


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param([("X-Upper", "1")], id="8_1_2_1_uppercase_name"),
        pytest.param([(":unknown", "1")], id="8_1_2_1_1_unknown_pseudo_header"),
        pytest.param([(":status", "200")], id="8_1_2_1_2_response_pseudo_header"),
        pytest.param([("connection", "keep-alive")], id="8_1_2_2_1_connection_specific"),
        pytest.param([("te", "gzip")], id="8_1_2_2_2_te_other_than_trailers"),
        pytest.param([("x-nul", "a\x00b")], id="8_2_1_nul_in_a_value"),
        pytest.param([("x-space", " padded")], id="8_2_1_leading_whitespace"),
    ],
)
def test_8_1_2_malformed_request_fields(conn: Conn, fields: list[tuple[str, str]]) -> None:
    conn.send(conn.headers(1, [*conn.fields(), *fields], END_HEADERS | END_STREAM))
    conn.stream_error(1, PROTOCOL_ERROR)
    conn.send(conn.call(3))
    assert conn.grpc_status(3) == 0  # a stream error: the connection goes on


def test_8_1_2_1_3_pseudo_header_in_trailers(conn: Conn) -> None:
    conn.send(conn.headers(1, conn.fields(SLOW)), frame(DATA, 0, 1, grpc_message(b"")))
    conn.send(conn.headers(1, [(":path", "/")], END_HEADERS | END_STREAM))
    conn.stream_error(1, PROTOCOL_ERROR)


def test_8_1_2_1_4_pseudo_header_after_a_regular_one(conn: Conn) -> None:
    fields = conn.fields()
    conn.send(conn.headers(1, [*fields[1:], fields[0]], END_HEADERS | END_STREAM))
    conn.stream_error(1, PROTOCOL_ERROR)


@pytest.mark.parametrize(
    ("drop", "add"),
    [
        pytest.param(":path", [(":path", "")], id="8_1_2_3_1_empty_path"),
        pytest.param(":method", [], id="8_1_2_3_2_no_method"),
        pytest.param(":scheme", [], id="8_1_2_3_3_no_scheme"),
        pytest.param(":path", [], id="8_1_2_3_4_no_path"),
        pytest.param("", [(":method", "POST")], id="8_1_2_3_5_duplicated_method"),
        pytest.param("", [(":scheme", "http")], id="8_1_2_3_6_duplicated_scheme"),
        pytest.param("", [(":path", "/x")], id="8_1_2_3_7_duplicated_path"),
    ],
)
def test_8_1_2_3_request_pseudo_headers(conn: Conn, drop: str, add: list[tuple[str, str]]) -> None:
    fields = [f for f in conn.fields() if f[0] != drop]
    pseudo = [f for f in fields if f[0].startswith(":")]
    regular = [f for f in fields if not f[0].startswith(":")]
    conn.send(conn.headers(1, pseudo + add + regular, END_HEADERS | END_STREAM))
    conn.stream_error(1, PROTOCOL_ERROR)


def test_8_1_2_6_1_content_length_not_the_data_length(conn: Conn) -> None:
    conn.send(conn.headers(1, conn.fields(content_length="1")))
    conn.send(frame(DATA, END_STREAM, 1, grpc_message(b"")))
    conn.stream_error(1, PROTOCOL_ERROR)


def test_8_1_2_6_2_content_length_not_the_sum_of_data_frames(conn: Conn) -> None:
    conn.send(conn.headers(1, conn.fields(content_length="8")))
    conn.send(frame(DATA, 0, 1, grpc_message(b"")), frame(DATA, END_STREAM, 1, b"xx"))
    conn.stream_error(1, PROTOCOL_ERROR)


def test_8_2_1_push_promise(conn: Conn) -> None:
    conn.send(frame(PUSH_PROMISE, END_HEADERS, 1, u32(2) + conn.encoder.encode(conn.fields())))
    conn.connection_error(PROTOCOL_ERROR)


# -- RFC 7541 (HPACK) -------------------------------------------------------------------------


def _table_size_update(size: int) -> bytes:
    """An HPACK dynamic table size update (RFC 7541 6.3)."""
    if size < 31:
        return bytes([0x20 | size])
    out, size = bytearray([0x3F]), size - 31
    while size >= 128:
        out.append(0x80 | (size & 0x7F))
        size >>= 7
    return bytes([*out, size])


@pytest.mark.parametrize(
    ("prefix", "suffix"),
    [
        pytest.param(b"", b"\xc6", id="hpack_2_3_3_1_indexed_field_with_invalid_index"),
        pytest.param(b"", b"\x7f\x07\x00", id="hpack_2_3_3_2_literal_with_invalid_index"),
        pytest.param(b"", b"\x21", id="hpack_4_2_1_table_size_update_at_the_end"),
        pytest.param(
            b"",
            b"\x00\x85\xf2\xb2\x4a\x84\xff\x84\x49\x50\x9f\xff",
            id="hpack_5_2_1_huffman_padding_over_7_bits",
        ),
        pytest.param(
            b"",
            b"\x00\x85\xf2\xb2\x4a\x84\xff\x83\x49\x50\x90",
            id="hpack_5_2_2_huffman_padded_by_zero",
        ),
        pytest.param(
            b"",
            b"\x00\x85\xf2\xb2\x4a\x84\xff\x87\x49\x51\xff\xff\xff\xfa\x7f",
            id="hpack_5_2_3_huffman_eos",
        ),
        pytest.param(b"", b"\x80", id="hpack_6_1_1_index_0"),
        pytest.param(_table_size_update(4097), b"", id="hpack_6_3_1_table_size_above_the_setting"),
    ],
)
def test_hpack_compression_errors(conn: Conn, prefix: bytes, suffix: bytes) -> None:
    block = prefix + conn.encoder.encode(conn.fields()) + suffix
    conn.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, block))
    conn.connection_error(COMPRESSION_ERROR)
