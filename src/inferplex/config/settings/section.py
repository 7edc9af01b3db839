"""What every section of ServerConfig is made of: a frozen model that refuses unknown
fields, and the markers that say what a field's type alone does not about its flag.

:class:`NoFlag` (set through the environment only), :class:`FlagChoices` (the values a
``str`` flag offers) and :class:`OneValue` (a flag that must not be repeated) are read by
cli/options.py, which builds ``inferplex serve``'s flags from the fields.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict


class SettingsSection(BaseModel):
    """One group of ServerConfig's fields, with the validators that check them. ServerConfig
    inherits every section: its settings (environment, frozen) apply to all of them."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class NoFlag:
    """Marks a field without an ``inferplex serve`` flag: set through its INFERPLEX_*
    variable only (or, for derived fields, by ServerConfig itself)."""


@dataclass(frozen=True)
class FlagChoices:
    """The values a ``str`` field's flag offers, where the field's type does not list them
    (another part checks the value, with its own message)."""

    values: tuple[str, ...]


@dataclass(frozen=True)
class OneValue:
    """A flag that may be given once: twice with different values is an error saying
    ``why``, not the last value silently (tritonserver repeats some of them)."""

    why: str
