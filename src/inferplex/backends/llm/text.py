"""A request's output text as its tokens come: incremental detokenisation that never emits
half of a UTF-8 character, and stop strings found across token boundaries. Pure: the
tokenizer's ``decode`` is passed in.

Decoding a token alone can be wrong two ways: a byte-level token may hold part of a
multi-byte character (decoded as U+FFFD until the rest comes), and a token's text may depend
on the one before it (a SentencePiece word's leading space). So the text of a window of
tokens is decoded and only what follows the text of the window's earlier part is new
(the offsets technique of TGI and vLLM); a few prompt tokens start the window.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

#: decode(ids) -> text, with the tokenizer's special tokens skipped or kept as the request asks
Decode = Callable[[Sequence[int]], str]

_REPLACEMENT = "\ufffd"
#: prompt tokens that give the first output tokens their context
_CONTEXT_TOKENS = 5


class OutputText:
    """The text of one request's output tokens, released as it becomes final."""

    def __init__(
        self,
        decode: Decode,
        prompt_ids: Sequence[int],
        stops: Sequence[str] = (),
        include_stop: bool = False,
    ) -> None:
        self._decode = decode
        self._ids = list(prompt_ids[-_CONTEXT_TOKENS:])
        self._prefix = 0  # start of the decoding window
        self._read = len(self._ids)  # tokens before this one are decoded into ``text``
        self._stops = tuple(stops)
        self._include_stop = include_stop
        #: the output text so far (up to and, if asked, including a stop string)
        self.text = ""
        self._released = 0  # characters of ``text`` handed out
        #: the stop string that ended the output, if one did
        self.stopped_by: str | None = None

    def add(self, token: int) -> str:
        """Take one output token; return the text now final (maybe empty)."""
        self._ids.append(token)
        window = self._decode(self._ids[self._prefix :])
        if window.endswith(_REPLACEMENT):
            return ""  # part of a character: wait for the rest
        before = self._decode(self._ids[self._prefix : self._read])
        self._prefix, self._read = self._read, len(self._ids)
        return self._extend(window[len(before) :])

    def flush(self) -> str:
        """The output ended: the rest of the text (an unfinished character as U+FFFD)."""
        if self.stopped_by is None and self._read < len(self._ids):
            window = self._decode(self._ids[self._prefix :])
            before = self._decode(self._ids[self._prefix : self._read])
            self._read = len(self._ids)
            self.text += window[len(before) :]
        released, self._released = self.text[self._released :], len(self.text)
        return released

    def _extend(self, delta: str) -> str:
        if not delta or self.stopped_by is not None:
            return ""
        searched_from = len(self.text)
        self.text += delta
        if self._stops:
            self._find_stop(searched_from)
            end = len(self.text) if self.stopped_by else len(self.text) - self._held_back()
        else:
            end = len(self.text)
        released = self.text[self._released : end]
        self._released = max(self._released, end)
        return released

    def _find_stop(self, searched_from: int) -> None:
        """End the text at the first stop string that appears, also one begun earlier."""
        longest = max(len(s) for s in self._stops)
        start = max(0, searched_from - longest + 1)
        first: tuple[int, str] | None = None
        for stop in self._stops:
            at = self.text.find(stop, start)
            if at >= 0 and (first is None or at < first[0]):
                first = (at, stop)
        if first is not None:
            at, stop = first
            self.text = self.text[: at + len(stop) if self._include_stop else at]
            self.stopped_by = stop

    def _held_back(self) -> int:
        """Characters at the end of the text that may begin a stop string (kept until the
        next tokens tell)."""
        text = self.text
        held = 0
        for stop in self._stops:
            for size in range(min(len(stop) - 1, len(text)), held, -1):
                if text.endswith(stop[:size]):
                    held = size
                    break
        return held
