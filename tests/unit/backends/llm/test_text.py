"""Output text as tokens come: multi-byte characters never split, stop strings found across
token boundaries (and the text that might begin one held back), flushing at the end. The
tokens here are single bytes, as a byte-level BPE's rarest tokens are."""

from __future__ import annotations

from collections.abc import Sequence

from inferplex.backends.llm.text import OutputText


def decode(ids: Sequence[int]) -> str:
    return bytes(ids).decode("utf-8", errors="replace")


def stream(text: OutputText, data: bytes) -> list[str]:
    return [text.add(b) for b in data]


def test_multi_byte_characters_come_whole() -> None:
    data = "é世🙂!".encode()
    text = OutputText(decode, b"hi")
    pieces = stream(text, data)
    assert "".join(pieces) == "é世🙂!"
    assert [p for p in pieces if p] == ["é", "世", "🙂", "!"]
    assert all("\ufffd" not in p for p in pieces)


def test_a_stop_string_split_across_tokens_ends_the_text_before_it() -> None:
    text = OutputText(decode, b"", stops=["STOP"])
    pieces = stream(text, b"abcSTOPdef")
    assert "".join(pieces) == "abc"
    assert text.stopped_by == "STOP" and text.text == "abc"


def test_text_that_may_begin_a_stop_string_is_held_until_it_does_not() -> None:
    text = OutputText(decode, b"", stops=["END"])
    assert stream(text, b"aE") == ["a", ""]  # "E" may begin "END"
    assert text.add(ord("N")) == ""
    assert text.add(ord("d")) == "ENd"  # it did not
    assert text.stopped_by is None


def test_the_stop_string_is_kept_when_asked() -> None:
    text = OutputText(decode, b"", stops=["\n\n", "xy"], include_stop=True)
    assert "".join(stream(text, b"ab\n\ncd")) == "ab\n\n"
    assert text.stopped_by == "\n\n"


def test_the_earliest_of_several_stop_strings_wins() -> None:
    text = OutputText(decode, b"", stops=["bcd", "cd"])
    assert "".join(stream(text, b"abcde")) == "a"
    assert text.stopped_by == "bcd"


def test_flush_hands_out_what_was_held_and_an_unfinished_character() -> None:
    text = OutputText(decode, b"", stops=["xyz"])
    assert "".join(stream(text, b"ax")) == "a"
    assert text.flush() == "x"
    broken = OutputText(decode, b"")
    assert broken.add("é".encode()[0]) == ""
    assert broken.flush() == "\ufffd"
