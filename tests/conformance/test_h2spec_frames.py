"""RFC 9113 section 6 (frame definitions) of the built-in gRPC server, as h2spec's cases
"6.x #n" (``test_6_9_1_2`` is h2spec's "6.9.1 #2"); test_h2spec.py has the other sections
and says how the suite is organised."""

from __future__ import annotations

from tests.support.h2raw import (
    ACK,
    CANCEL,
    CONTINUATION,
    DATA,
    ENABLE_PUSH,
    END_HEADERS,
    END_STREAM,
    FLOW_CONTROL_ERROR,
    FRAME_SIZE_ERROR,
    GOAWAY,
    HEADERS,
    INITIAL_WINDOW_SIZE,
    MAX_FRAME_SIZE,
    PADDED,
    PING,
    PRIORITY,
    PROTOCOL_ERROR,
    RST_STREAM,
    SETTINGS,
    SLOW,
    STREAM_CLOSED,
    WINDOW_UPDATE,
    Conn,
    Served,
    frame,
    grpc_message,
    open_slow,
    settings,
    u32,
)

ECHO_PATH = "/test.Echo/Echo"


# -- 6.1 DATA ---------------------------------------------------------------------------------


def test_6_1_1_data_on_stream_0(conn: Conn) -> None:
    conn.send(frame(DATA, END_STREAM, 0, b"test"))
    conn.connection_error(PROTOCOL_ERROR)


def test_6_1_2_data_on_a_stream_not_open(conn: Conn) -> None:
    open_slow(conn, 1)
    conn.send(frame(DATA, END_STREAM, 1, b"test"))
    conn.stream_error(1, STREAM_CLOSED)


def test_6_1_3_data_with_invalid_pad_length(conn: Conn) -> None:
    conn.send(
        conn.headers(1, conn.fields(ECHO_PATH)), frame(DATA, END_STREAM | PADDED, 1, b"\x06test")
    )
    conn.connection_error(PROTOCOL_ERROR)


# -- 6.2 HEADERS ------------------------------------------------------------------------------


def test_6_2_1_headers_without_end_headers_then_priority(conn: Conn) -> None:
    conn.send(conn.headers(1, flags=END_STREAM), frame(PRIORITY, 0, 1, u32(0) + b"\x10"))
    conn.connection_error(PROTOCOL_ERROR)


def test_6_2_2_headers_to_another_stream_while_sending_headers(conn: Conn) -> None:
    conn.send(conn.headers(1, flags=END_STREAM), conn.headers(3, flags=END_HEADERS | END_STREAM))
    conn.connection_error(PROTOCOL_ERROR)


def test_6_2_3_headers_on_stream_0(conn: Conn) -> None:
    conn.send(conn.headers(0, flags=END_HEADERS | END_STREAM))
    conn.connection_error(PROTOCOL_ERROR)


def test_6_2_4_headers_with_invalid_pad_length(conn: Conn) -> None:
    block = conn.encoder.encode(conn.fields())
    conn.send(frame(HEADERS, END_HEADERS | END_STREAM | PADDED, 1, bytes([len(block) + 1]) + block))
    conn.stream_error(1, PROTOCOL_ERROR)


# -- 6.3 PRIORITY, 6.4 RST_STREAM -------------------------------------------------------------


def test_6_3_1_priority_on_stream_0(conn: Conn) -> None:
    conn.send(frame(PRIORITY, 0, 0, u32(1) + b"\x10"))
    conn.connection_error(PROTOCOL_ERROR)


def test_6_3_2_priority_of_a_length_other_than_5(conn: Conn) -> None:
    open_slow(conn, 1)
    conn.send(frame(PRIORITY, 0, 1, u32(0) + b"\x10\x00"))
    conn.stream_error(1, FRAME_SIZE_ERROR)


def test_6_4_1_rst_stream_on_stream_0(conn: Conn) -> None:
    conn.send(frame(RST_STREAM, 0, 0, u32(CANCEL)))
    conn.connection_error(PROTOCOL_ERROR)


def test_6_4_2_rst_stream_on_an_idle_stream(conn: Conn) -> None:
    conn.send(frame(RST_STREAM, 0, 1, u32(CANCEL)))
    conn.connection_error(PROTOCOL_ERROR)


def test_6_4_3_rst_stream_of_a_length_other_than_4(conn: Conn) -> None:
    open_slow(conn, 1)
    conn.send(frame(RST_STREAM, 0, 1, b"\x00\x00\x08"))
    conn.stream_error(1, FRAME_SIZE_ERROR)


# -- 6.5 SETTINGS -----------------------------------------------------------------------------


def test_6_5_1_settings_ack_with_payload(conn: Conn) -> None:
    conn.send(frame(SETTINGS, ACK, 0, b"\x00\x04\x00\x00\xff\xff"))
    conn.connection_error(FRAME_SIZE_ERROR)


def test_6_5_2_settings_on_a_stream(conn: Conn) -> None:
    conn.send(frame(SETTINGS, 0, 1, b"\x00\x04\x00\x00\xff\xff"))
    conn.connection_error(PROTOCOL_ERROR)


def test_6_5_3_settings_of_a_length_not_a_multiple_of_6(conn: Conn) -> None:
    conn.send(frame(SETTINGS, 0, 0, b"\x00\x04\x00\x00\xff"))
    conn.connection_error(FRAME_SIZE_ERROR)


def test_6_5_2_1_enable_push_other_than_0_or_1(conn: Conn) -> None:
    conn.send(settings((ENABLE_PUSH, 2)))
    conn.connection_error(PROTOCOL_ERROR)


def test_6_5_2_2_initial_window_size_above_the_maximum(conn: Conn) -> None:
    conn.send(settings((INITIAL_WINDOW_SIZE, 2**31)))
    conn.connection_error(FLOW_CONTROL_ERROR)


def test_6_5_2_3_max_frame_size_below_the_initial_value(conn: Conn) -> None:
    conn.send(settings((MAX_FRAME_SIZE, 16_383)))
    conn.connection_error(PROTOCOL_ERROR)


def test_6_5_2_4_max_frame_size_above_the_maximum(conn: Conn) -> None:
    conn.send(settings((MAX_FRAME_SIZE, 2**24)))
    conn.connection_error(PROTOCOL_ERROR)


def test_6_5_2_5_settings_with_an_unknown_identifier(conn: Conn) -> None:
    conn.send(settings((0xFF, 1)))
    conn.alive()


def test_6_5_3_1_multiple_values_of_initial_window_size(conn: Conn) -> None:
    conn.send(settings((INITIAL_WINDOW_SIZE, 100), (INITIAL_WINDOW_SIZE, 1)))
    conn.expect(lambda f: f.kind == SETTINGS and bool(f.flags & ACK), "a SETTINGS ACK")
    conn.send(conn.call(1, ECHO_PATH, b"abcdef"))
    data = conn.expect(lambda f: f.kind == DATA and f.stream_id == 1, "DATA")
    assert len(data.payload) == 1  # the last value counts


def test_6_5_3_2_settings_without_ack_is_acknowledged(conn: Conn) -> None:
    conn.send(settings((INITIAL_WINDOW_SIZE, 1 << 20)))
    conn.expect(lambda f: f.kind == SETTINGS and bool(f.flags & ACK), "a SETTINGS ACK")


# -- 6.7 PING, 6.8 GOAWAY ---------------------------------------------------------------------


def test_6_7_1_ping(conn: Conn) -> None:
    conn.send(frame(PING, 0, 0, b"h2spec\x00\x01"))
    got = conn.expect(lambda f: f.kind == PING, "PING")
    assert got.flags & ACK and got.payload == b"h2spec\x00\x01"


def test_6_7_2_ping_with_ack_is_not_answered(conn: Conn) -> None:
    conn.send(frame(PING, ACK, 0, b"unknown!"))
    conn.send(frame(PING, 0, 0, b"expected"))
    got = conn.expect(lambda f: f.kind == PING, "PING")
    assert got.payload == b"expected"


def test_6_7_3_ping_on_a_stream(conn: Conn) -> None:
    conn.send(frame(PING, 0, 1, bytes(8)))
    conn.connection_error(PROTOCOL_ERROR)


def test_6_7_4_ping_of_a_length_other_than_8(conn: Conn) -> None:
    conn.send(frame(PING, 0, 0, bytes(6)))
    conn.connection_error(FRAME_SIZE_ERROR)


def test_6_8_1_goaway_on_a_stream(conn: Conn) -> None:
    conn.send(frame(GOAWAY, 0, 1, u32(0) + u32(0)))
    conn.connection_error(PROTOCOL_ERROR)


# -- 6.9 WINDOW_UPDATE ------------------------------------------------------------------------


def test_6_9_1_window_update_of_0(conn: Conn) -> None:
    conn.send(frame(WINDOW_UPDATE, 0, 0, u32(0)))
    conn.connection_error(PROTOCOL_ERROR)


def test_6_9_2_window_update_of_0_on_a_stream(conn: Conn) -> None:
    open_slow(conn, 1)
    conn.send(frame(WINDOW_UPDATE, 0, 1, u32(0)))
    conn.stream_error(1, PROTOCOL_ERROR)


def test_6_9_3_window_update_of_a_length_other_than_4(conn: Conn) -> None:
    conn.send(frame(WINDOW_UPDATE, 0, 0, b"\x00\x00\x01"))
    conn.connection_error(FRAME_SIZE_ERROR)


def test_6_9_1_1_initial_window_of_1(served: Served) -> None:
    with Conn(served.port) as conn:
        conn.handshake((INITIAL_WINDOW_SIZE, 1))
        conn.send(conn.call(1, ECHO_PATH, b"hello"))
        data = conn.expect(lambda f: f.kind == DATA and f.stream_id == 1, "DATA")
        assert len(data.payload) == 1


def test_6_9_1_2_connection_window_above_2_31_minus_1(conn: Conn) -> None:
    conn.send(
        frame(WINDOW_UPDATE, 0, 0, u32(2**31 - 1)), frame(WINDOW_UPDATE, 0, 0, u32(2**31 - 1))
    )
    conn.connection_error(FLOW_CONTROL_ERROR)


def test_6_9_1_3_stream_window_above_2_31_minus_1(conn: Conn) -> None:
    open_slow(conn, 1)
    conn.send(
        frame(WINDOW_UPDATE, 0, 1, u32(2**31 - 1)), frame(WINDOW_UPDATE, 0, 1, u32(2**31 - 1))
    )
    conn.stream_error(1, FLOW_CONTROL_ERROR)


def test_6_9_2_1_initial_window_changed_after_headers(served: Served) -> None:
    with Conn(served.port) as conn:
        conn.handshake((INITIAL_WINDOW_SIZE, 0))
        conn.send(conn.call(1, ECHO_PATH, b"hello"))
        conn.response(1)
        conn.send(settings((INITIAL_WINDOW_SIZE, 1)))
        data = conn.expect(lambda f: f.kind == DATA and f.stream_id == 1, "DATA")
        assert len(data.payload) == 1


def test_6_9_2_2_initial_window_making_a_window_negative(served: Served) -> None:
    with Conn(served.port) as conn:
        conn.handshake((INITIAL_WINDOW_SIZE, 3))
        conn.send(conn.call(1, ECHO_PATH, b"hello"))
        assert len(conn.expect(lambda f: f.kind == DATA, "DATA").payload) == 3
        conn.send(settings((INITIAL_WINDOW_SIZE, 2)))  # the stream's window: -1
        conn.expect(lambda f: f.kind == SETTINGS and bool(f.flags & ACK), "a SETTINGS ACK")
        conn.send(frame(WINDOW_UPDATE, 0, 1, u32(2)))
        assert len(conn.expect(lambda f: f.kind == DATA, "DATA").payload) == 1


def test_6_9_2_3_initial_window_above_the_maximum(conn: Conn) -> None:
    conn.send(settings((INITIAL_WINDOW_SIZE, 2**31)))
    conn.connection_error(FLOW_CONTROL_ERROR)


def test_6_9_2_4_initial_window_overflowing_an_open_stream(served: Served) -> None:
    """RFC 9113 6.9.2: a change that takes any window past 2^31-1 is a connection error."""
    with Conn(served.port) as conn:
        conn.handshake()
        open_slow(conn, 1)
        conn.send(frame(WINDOW_UPDATE, 0, 1, u32(2**31 - 1 - 65_535)))  # the stream: 2^31-1
        conn.send(settings((INITIAL_WINDOW_SIZE, 65_536)))
        conn.connection_error(FLOW_CONTROL_ERROR)


# -- 6.10 CONTINUATION ------------------------------------------------------------------------


def test_6_10_1_multiple_continuation_frames(conn: Conn) -> None:
    block = conn.encoder.encode(conn.fields())
    pieces = [block[i : i + 8] for i in range(0, len(block), 8)]
    frames = [frame(HEADERS, 0, 1, pieces[0])]
    frames += [frame(CONTINUATION, 0, 1, p) for p in pieces[1:-1]]
    frames.append(frame(CONTINUATION, END_HEADERS, 1, pieces[-1]))
    conn.send(*frames, frame(DATA, END_STREAM, 1, grpc_message(b"")))
    assert conn.grpc_status(1) == 0


def test_6_10_2_continuation_followed_by_another_frame(conn: Conn) -> None:
    block = conn.encoder.encode(conn.fields())
    conn.send(frame(HEADERS, END_STREAM, 1, block[:5]), frame(CONTINUATION, 0, 1, block[5:]))
    conn.send(frame(DATA, 0, 1, b"x"))
    conn.connection_error(PROTOCOL_ERROR)


def test_6_10_3_continuation_on_stream_0(conn: Conn) -> None:
    block = conn.encoder.encode(conn.fields())
    conn.send(
        frame(HEADERS, END_STREAM, 1, block[:5]), frame(CONTINUATION, END_HEADERS, 0, block[5:])
    )
    conn.connection_error(PROTOCOL_ERROR)


def test_6_10_4_continuation_after_headers_with_end_headers(conn: Conn) -> None:
    open_slow(conn, 1)
    conn.send(frame(CONTINUATION, END_HEADERS, 1, conn.encoder.encode([("x-a", "1")])))
    conn.connection_error(PROTOCOL_ERROR)


def test_6_10_5_continuation_after_continuation_with_end_headers(conn: Conn) -> None:
    block = conn.encoder.encode(conn.fields(SLOW))
    conn.send(frame(HEADERS, 0, 1, block[:5]), frame(CONTINUATION, END_HEADERS, 1, block[5:]))
    conn.send(frame(CONTINUATION, END_HEADERS, 1, conn.encoder.encode([("x-a", "1")])))
    conn.connection_error(PROTOCOL_ERROR)


def test_6_10_6_continuation_after_data(conn: Conn) -> None:
    conn.send(conn.headers(1, conn.fields(SLOW)), frame(DATA, 0, 1, b"x"))
    conn.send(frame(CONTINUATION, END_HEADERS, 1, conn.encoder.encode([("x-a", "1")])))
    conn.connection_error(PROTOCOL_ERROR)
