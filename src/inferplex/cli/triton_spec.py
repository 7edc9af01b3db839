"""What a tritonserver flag is to ``inferplex serve``: :class:`TritonFlag`, and what its value
does (:class:`Effect`) or why it stops the start (:class:`Refused`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import click

#: Triton's boolean spellings (it lowercases the value first)
TRUE = ("true", "on", "1", "yes")
FALSE = ("false", "off", "0", "no")


class Refused(click.UsageError):
    """A tritonserver flag inferplex cannot honour and must not ignore: ignoring it would
    silently change what the user relies on (the message says what and why)."""


@dataclass(frozen=True)
class Effect:
    """What one flag's value does: ServerConfig settings (a key starting with ``_`` is read
    together with other flags' in :mod:`inferplex.cli.triton_combined`), and lines for the
    start-up log about the parts that have no effect."""

    settings: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


Sets = Callable[[Any], Effect | dict[str, Any]]


@dataclass(frozen=True)
class TritonFlag:
    """One tritonserver flag: what it takes, what its value sets (None: no effect at all),
    and one line for ``--help`` (and, for a flag without effect, the log)."""

    name: str
    takes: Literal["bool", "switch", "int", "float", "text", "repeated"]
    sets: Sets | None
    why: str
    #: Triton has this setting per flag where inferplex has one: two such flags giving it
    #: different values are an error (for the others the later flag in FLAGS wins, as
    #: --disable-auto-complete-config over --strict-model-config=false)
    one_of_several: bool = False

    @property
    def param(self) -> str:
        return "triton_" + self.name.removeprefix("--").replace("-", "_")


def no_effect(name: str, takes: Any, why: str) -> TritonFlag:
    """A flag accepted without effect; its help (and log line) says "no effect: why"."""
    return TritonFlag(name, takes, None, f"no effect: {why}")


def setting(key: str, convert: Callable[[Any], Any] = lambda value: value) -> Sets:
    """Sets the ServerConfig field ``key`` to the flag's value, converted."""
    return lambda value: {key: convert(value)}
