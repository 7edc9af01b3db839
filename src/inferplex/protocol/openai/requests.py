"""The chat and completion requests as OpenAI documents them, read and checked before
anything reaches a model (docs/openai.md, "Fields"). A field the server cannot honour is a
400 naming it, never ignored; a value of a field that asks for nothing (``"store": false``,
``"response_format": {"type": "text"}``, null) is taken as absent."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from inferplex.protocol.openai import fields as f
from inferplex.protocol.openai.errors import FieldError
from inferplex.protocol.openai.messages import read_messages

#: the most stop sequences of one request
MAX_STOP = 16
#: the most top log-probabilities per token
MAX_TOP_LOGPROBS = 20

#: vLLM's sampling fields beyond OpenAI's, passed to a model that takes
#: ``sampling_parameters`` (as vLLM's own server and Triton's frontend do: aiperf sends
#: ``min_tokens`` and ``ignore_eos`` so)
EXTRA_SAMPLING = frozenset(
    {
        "top_k",
        "min_p",
        "min_tokens",
        "repetition_penalty",
        "ignore_eos",
        "stop_token_ids",
        "include_stop_str_in_output",
        "skip_special_tokens",
    }
)

#: fields that ask for nothing at these values (the clients' defaults)
_INERT: dict[str, tuple[Any, ...]] = {
    "store": (False,),
    "logit_bias": ({},),
    "response_format": ({"type": "text"},),
    "service_tier": ("auto", "default"),
    "tools": ([],),
    "functions": ([],),
    "metadata": ({},),
    "modalities": (["text"],),
}
#: fields that OpenAI documents and this server cannot honour at other values
_NOT_HONOURED = frozenset(
    {
        *_INERT,
        "tool_choice",
        "parallel_tool_calls",
        "function_call",
        "audio",
        "prediction",
        "reasoning_effort",
        "web_search_options",
        "suffix",
        "best_of",
    }
)
_COMMON = frozenset(
    {
        "model",
        "stream",
        "stream_options",
        "max_tokens",
        "n",
        "stop",
        "temperature",
        "top_p",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "logprobs",
        "user",
        *EXTRA_SAMPLING,
        *_NOT_HONOURED,
    }
)
_CHAT = _COMMON | {"messages", "max_completion_tokens", "top_logprobs"}
_COMPLETION = _COMMON | {"prompt", "echo"}

Kind = Literal["chat", "completion"]


@dataclass(slots=True)
class Sampling:
    """How to generate: what the model is asked for (``sampling_parameters`` or its own
    inputs) and what the server enforces on what it sends (``max_tokens``, ``stop``)."""

    max_tokens: int | None = None
    stop: list[str] = field(default_factory=list)
    n: int = 1
    #: temperature, top_p, seed, penalties and EXTRA_SAMPLING fields given, by vLLM's names
    options: dict[str, Any] = field(default_factory=dict)
    #: top log-probabilities per token asked for (0: the chosen token's alone); None: none
    logprobs: int | None = None


@dataclass(slots=True)
class Generation:
    """A chat or completion request, read."""

    kind: Kind
    model: str
    sampling: Sampling
    stream: bool = False
    include_usage: bool = False
    #: chat: the messages, each with its content as one string
    messages: list[dict[str, Any]] = field(default_factory=list)
    #: completion: each prompt (text, or token ids)
    prompts: list[str | list[int]] = field(default_factory=list)
    echo: bool = False


def read_chat(body: f.Body, max_n: int) -> Generation:
    fields = f.parse_body(body, "chat completion")
    f.unknown(fields, _CHAT, "chat completions")
    request = _common(fields, "chat", max_n)
    request.messages = read_messages(fields.get("messages"))
    completion_tokens = f.integer(fields, "max_completion_tokens")
    if completion_tokens is not None:
        request.sampling.max_tokens = _positive("max_completion_tokens", completion_tokens)
    wants = f.flag(fields, "logprobs")
    top = f.integer(fields, "top_logprobs", 0, MAX_TOP_LOGPROBS)
    if top is not None and not wants:
        raise FieldError("top_logprobs", "'top_logprobs' needs 'logprobs': true")
    request.sampling.logprobs = (top or 0) if wants else None
    return request


def read_completion(body: f.Body, max_n: int) -> Generation:
    fields = f.parse_body(body, "completion")
    f.unknown(fields, _COMPLETION, "completions")
    request = _common(fields, "completion", max_n)
    request.prompts = _prompts(fields.get("prompt"))
    if len(request.prompts) * request.sampling.n > max_n:
        raise FieldError(
            "prompt",
            f"{len(request.prompts)} prompts of {request.sampling.n} choices each ask for "
            f"{len(request.prompts) * request.sampling.n} choices; the server's "
            f"--openai-max-choices is {max_n}",
        )
    request.echo = bool(f.flag(fields, "echo"))
    request.sampling.logprobs = f.integer(fields, "logprobs", 0, MAX_TOP_LOGPROBS)
    return request


def _common(fields: Mapping[str, Any], kind: Kind, max_n: int) -> Generation:
    for name in _NOT_HONOURED:
        value = fields.get(name)
        if value is not None and value not in _INERT.get(name, ()):
            raise FieldError(name, f"'{name}' is not supported by this server")
    model = f.text(fields, "model", required=True)
    assert model is not None
    stream = bool(f.flag(fields, "stream"))
    include_usage = _stream_options(fields.get("stream_options"), stream)
    max_tokens = f.integer(fields, "max_tokens")
    n = f.integer(fields, "n")
    n = 1 if n is None else n
    if n < 1 or n > max_n:
        raise FieldError(
            "n",
            f"'n' must be between 1 and {max_n} (the server's --openai-max-choices), got {n}",
        )
    sampling = Sampling(
        max_tokens=None if max_tokens is None else _positive("max_tokens", max_tokens),
        stop=f.strings(fields, "stop", MAX_STOP),
        n=n,
        options=_options(fields),
    )
    f.text(fields, "user")  # OpenAI's end-user id: checked, and kept out of the model
    return Generation(kind, model, sampling, stream, include_usage)


def _positive(name: str, value: int) -> int:
    if value <= 0:
        raise FieldError(name, f"'{name}' must be at least 1, got {value}")
    return value


def _stream_options(value: Any, stream: bool) -> bool:
    if value is None:
        return False
    if not stream:
        raise FieldError("stream_options", "'stream_options' is only allowed with 'stream': true")
    if not isinstance(value, dict):
        raise f.kind_error("stream_options", "an object", value)
    for name in value:
        if name not in ("include_usage", "continuous_usage_stats"):
            raise FieldError(f"stream_options.{name}", f"unknown stream option '{name}'")
    if value.get("continuous_usage_stats"):
        raise FieldError(
            "stream_options.continuous_usage_stats", "'continuous_usage_stats' is not supported"
        )
    return bool(f.flag(value, "include_usage"))


def _options(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The sampling fields given, checked, by the names vLLM's SamplingParams takes."""
    options: dict[str, Any] = {}
    for name, low, high in (
        ("temperature", 0.0, 2.0),
        ("top_p", 0.0, 1.0),
        ("presence_penalty", -2.0, 2.0),
        ("frequency_penalty", -2.0, 2.0),
    ):
        value = f.number(fields, name, low, high)
        if value is not None:
            options[name] = value
    seed = f.integer(fields, "seed", -(2**63), 2**64 - 1)
    if seed is not None:
        options["seed"] = seed
    for name in EXTRA_SAMPLING:
        if fields.get(name) is not None:
            options[name] = fields[name]  # the model's own sampler checks these
    return options


def _prompts(value: Any) -> list[str | list[int]]:
    """A completion's prompts: a string, an array of strings, an array of token ids or an
    array of arrays of them."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value:
        if all(isinstance(v, str) for v in value):
            return list(value)
        if all(_token_ids(v) for v in value):
            return [list(v) for v in value]
        if _token_ids(value):
            return [list(value)]
    raise f.kind_error(
        "prompt",
        "a string, an array of strings, an array of token ids or an array of such arrays "
        "(not empty)",
        value,
    )


def _token_ids(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
    )
