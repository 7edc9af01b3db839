"""OpenAI's response objects: completions, chat completions, their stream chunks, usage,
log-probabilities in each endpoint's format, the model list. Plain dicts, written with
orjson by the caller."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from inferplex.protocol.openai.choices import Piece, TokenLogprob
from inferplex.protocol.openai.requests import Kind

DONE = b"data: [DONE]\n\n"


@dataclass(frozen=True, slots=True)
class Head:
    """What every object of one answer repeats."""

    kind: Kind
    id: str
    created: int
    model: str
    top_logprobs: int | None  # asked for (None: no log-probabilities)


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    def to_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


def event(document: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(document) + b"\n\n"


def answer(head: Head, choices: list[tuple[int, Piece]], usage: Usage) -> dict[str, Any]:
    """The whole answer: one choice per (index, everything it generated)."""
    if head.kind == "chat":
        items = [
            {
                "index": index,
                "message": {"role": "assistant", "content": piece.text},
                "logprobs": _chat_logprobs(piece.logprobs, head.top_logprobs),
                "finish_reason": piece.finish_reason,
            }
            for index, piece in choices
        ]
    else:
        items = [
            {
                "index": index,
                "text": piece.text,
                "logprobs": _completion_logprobs(piece.logprobs, head.top_logprobs),
                "finish_reason": piece.finish_reason,
            }
            for index, piece in choices
        ]
    return {**_top(head, chunk=False), "choices": items, "usage": usage.to_dict()}


def chunk(head: Head, index: int, piece: Piece, first: bool, with_usage: bool) -> dict[str, Any]:
    """One stream event of a choice; a chat choice's first says its role."""
    item: dict[str, Any] = {"index": index}
    if head.kind == "chat":
        delta: dict[str, Any] = {"role": "assistant"} if first else {}
        if piece.text or first:
            delta["content"] = piece.text
        item["delta"] = delta
        item["logprobs"] = _chat_logprobs(piece.logprobs, head.top_logprobs)
    else:
        item["text"] = piece.text
        item["logprobs"] = _completion_logprobs(piece.logprobs, head.top_logprobs)
    item["finish_reason"] = piece.finish_reason
    document = {**_top(head, chunk=True), "choices": [item]}
    if with_usage:
        document["usage"] = None
    return document


def usage_chunk(head: Head, usage: Usage) -> dict[str, Any]:
    """The stream's last event before [DONE] when ``include_usage`` asked for it."""
    return {**_top(head, chunk=True), "choices": [], "usage": usage.to_dict()}


def _top(head: Head, chunk: bool) -> dict[str, Any]:
    if head.kind == "chat":
        kind = "chat.completion.chunk" if chunk else "chat.completion"
    else:
        kind = "text_completion"
    return {
        "id": head.id,
        "object": kind,
        "created": head.created,
        "model": head.model,
        "system_fingerprint": None,
    }


def _chat_logprobs(tokens: list[TokenLogprob], top: int | None) -> dict[str, Any] | None:
    if top is None:
        return None
    return {
        "content": [
            {
                "token": t.token,
                "logprob": t.logprob,
                "bytes": list(t.token.encode("utf-8")),
                "top_logprobs": [
                    {"token": s, "logprob": p, "bytes": list(s.encode("utf-8"))}
                    for s, p in t.top[:top]
                ],
            }
            for t in tokens
        ]
    }


def _completion_logprobs(tokens: list[TokenLogprob], top: int | None) -> dict[str, Any] | None:
    if top is None:
        return None
    offsets, at = [], 0
    for t in tokens:
        offsets.append(at)
        at += len(t.token)
    return {
        "tokens": [t.token for t in tokens],
        "token_logprobs": [t.logprob for t in tokens],
        "top_logprobs": [dict(t.top[:top]) for t in tokens] if top else None,
        "text_offset": offsets,
    }


def model_object(name: str, created: int, owner: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": owner}


def model_list(names: list[str], created: int, owner: str) -> dict[str, Any]:
    return {"object": "list", "data": [model_object(n, created, owner) for n in names]}
