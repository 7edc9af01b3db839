"""A request's sampling settings, read from its ``sampling_parameters`` JSON input and its
request parameters (the generate endpoint's ``parameters``), as vLLM names them; each bad
value is an InvalidInputError naming the field and what it takes."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from inferplex.errors import InvalidInputError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How one request's tokens are chosen and when it ends (vLLM's names and defaults)."""

    #: tokens to generate at most (None: the engine's default_max_tokens)
    max_tokens: int | None = None
    #: tokens generated before an end-of-sequence token or stop may end it
    min_tokens: int = 0
    #: 0 is greedy (the most likely token)
    temperature: float = 1.0
    top_p: float = 1.0
    #: 0 or -1: no limit
    top_k: int = 0
    #: a request with a seed samples the same tokens each time (alone or batched)
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    #: strings that end the output (not included unless include_stop_str_in_output)
    stop: tuple[str, ...] = ()
    #: tokens that end the output, besides the model's end-of-sequence tokens
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1

    @property
    def penalised(self) -> bool:
        return (
            self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0
            or self.repetition_penalty != 1.0
        )


@dataclass(slots=True)
class SamplingRow:
    """What the sampler needs of one sequence to choose its next token."""

    params: SamplingParams
    generator: torch.Generator
    prompt: Sequence[int]
    output: Sequence[int]
    #: tokens that may not come yet (end-of-sequence while below min_tokens)
    banned: Sequence[int] = ()


SAMPLING_NAMES = frozenset(f.name for f in fields(SamplingParams))
#: request parameters that are the server's or the protocol's, not sampling settings
_IGNORED = frozenset({"stream", "exclude_input_in_output", "priority", "timeout", "sequence_id"})


def parse_sampling(settings: Mapping[str, Any]) -> SamplingParams:
    """The settings of a request (unknown names are an error: a misspelt one is not
    silently ignored)."""
    unknown = sorted(k for k in settings if k not in SAMPLING_NAMES and k not in _IGNORED)
    if unknown:
        raise InvalidInputError(
            f"unknown sampling parameter(s) {unknown}; accepted: {sorted(SAMPLING_NAMES)}"
        )
    values: dict[str, Any] = {}
    for name in SAMPLING_NAMES & settings.keys():
        values[name] = _CHECKS[name](name, settings[name])
    params = SamplingParams(**values)
    if params.max_tokens is not None and params.min_tokens > params.max_tokens:
        raise InvalidInputError(
            f"sampling parameter 'min_tokens' ({params.min_tokens}) is above 'max_tokens' "
            f"({params.max_tokens})"
        )
    return params


def _int(name: str, value: Any, low: int, none: bool = False) -> int | None:
    if value is None and none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidInputError(
            f"sampling parameter '{name}' must be an integer >= {low}, got {value!r}"
        )
    return value


def _float(name: str, value: Any, low: float, high: float, open_low: bool = False) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if ok and (value <= low if open_low else value < low):
        ok = False
    if not ok or value > high:
        bound = f"> {low}" if open_low else f">= {low}"
        raise InvalidInputError(
            f"sampling parameter '{name}' must be a number {bound} and <= {high}, got {value!r}"
        )
    return float(value)


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidInputError(f"sampling parameter '{name}' must be true or false, got {value!r}")
    return value


def _strings(name: str, value: Any) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(s, str) and s for s in items):
        raise InvalidInputError(
            f"sampling parameter '{name}' must be a non-empty string or a list of them, "
            f"got {value!r}"
        )
    return tuple(items)


def _token_ids(name: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, list | tuple):
        raise InvalidInputError(f"sampling parameter '{name}' must be a list of token ids")
    return tuple(_int(name, v, 0) or 0 for v in value)


def _top_k(name: str, value: Any) -> int:
    top_k = _int(name, value, -1)
    return 0 if top_k in (None, -1) else top_k


_CHECKS: dict[str, Any] = {
    "max_tokens": lambda n, v: _int(n, v, 1, none=True),
    "min_tokens": lambda n, v: _int(n, v, 0),
    "temperature": lambda n, v: _float(n, v, 0.0, 100.0),
    "top_p": lambda n, v: _float(n, v, 0.0, 1.0, open_low=True),
    "top_k": _top_k,
    "seed": lambda n, v: _int(n, v, -(2**63), none=True),
    "presence_penalty": lambda n, v: _float(n, v, -2.0, 2.0),
    "frequency_penalty": lambda n, v: _float(n, v, -2.0, 2.0),
    "repetition_penalty": lambda n, v: _float(n, v, 0.0, 100.0, open_low=True),
    "stop": _strings,
    "stop_token_ids": _token_ids,
    "ignore_eos": _bool,
    "include_stop_str_in_output": _bool,
    "skip_special_tokens": _bool,
}
