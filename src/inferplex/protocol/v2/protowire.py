"""The protobuf wire format, as much as the gRPC codec reads and writes by hand: varints and
where a serialised ModelInferRequest's raw tensor contents begin."""

from __future__ import annotations

__all__ = ["RAW_INPUT_TAG", "raw_inputs_start", "varint"]

#: ModelInferRequest.raw_input_contents: field 7, length-delimited
RAW_INPUT_TAG = 0x3A


def raw_inputs_start(data: memoryview, fields: int = -1) -> int | None:
    """Where the raw_input_contents of a serialised ModelInferRequest begin; None unless
    they come last, after length-delimited fields 1 to 6 only (and, ``fields`` >= 0, within
    that many fields before them)."""
    end = len(data)
    start = None
    pos = 0
    while pos < end:
        if fields == 0 and start is None:
            return None
        fields -= 1
        tag = data[pos]
        if tag == RAW_INPUT_TAG:
            if start is None:
                start = pos
        elif start is not None or tag & 7 != 2 or tag > RAW_INPUT_TAG:
            return None  # after the raw contents, not length-delimited, or not fields 1-6
        pos += 1
        length = shift = 0
        while True:  # the field's length, a varint
            if pos >= end:
                return None
            byte = data[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
        pos += length
    return start if pos == end else None


def varint(value: int) -> bytes:
    """A protobuf varint."""
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
