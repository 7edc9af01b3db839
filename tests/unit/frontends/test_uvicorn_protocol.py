from typing import Any

from inferplex.frontends.uvicorn_protocol import _OneWriteTransport


class Recorder:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else None


HEADER = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"


def test_a_response_leaves_in_one_write() -> None:
    inner = Recorder()
    transport = _OneWriteTransport(inner)  # type: ignore[arg-type]
    transport.write(HEADER)
    assert inner.writes == []
    transport.write(b"{}")
    assert inner.writes == [HEADER + b"{}"]


def test_interim_answers_and_other_data_go_out_at_once() -> None:
    inner = Recorder()
    transport = _OneWriteTransport(inner)  # type: ignore[arg-type]
    transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    transport.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 1\r\n\r\nx")
    assert inner.writes == [
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"HTTP/1.1 400 Bad Request\r\ncontent-length: 1\r\n\r\nx",
    ]


def test_close_flushes_a_held_header_and_other_calls_pass_through() -> None:
    inner = Recorder()
    transport = _OneWriteTransport(inner)  # type: ignore[arg-type]
    transport.write(HEADER)
    transport.close()
    assert inner.writes == [HEADER] and inner.closed
    assert transport.get_extra_info("peername") == ("127.0.0.1", 1)
