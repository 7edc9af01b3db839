"""The values of tritonserver's compound flags, read as Triton reads them
(``<name>,<setting>=<value>``, ``<resource>:<count>[:<device>]``)
into what inferplex does with them. A malformed value stops the start, as it stops Triton's."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import click

from inferplex.cli.triton_spec import FALSE, TRUE, Effect


def split_setting(flag: str, text: str, first: str = ",", named: bool = True) -> tuple[str, ...]:
    """``name<first>setting=value`` -> (name, setting, value); with ``named=False`` the name
    may be left out (then ""). Every part must be there, as Triton checks."""
    head, equals, value = text.partition("=")
    name, comma, key = head.partition(first)
    if not comma:
        name, key = "", head
    if not equals or not key or not value or (named and not name) or (comma and not name):
        form = f"<name>{first}<setting>=<value>" if named else "[<name>,]<setting>=<value>"
        raise click.UsageError(f"tritonserver's {flag} takes {form}, got '{text}'")
    return name, key, value


def boolean(flag: str, text: str) -> bool:
    if text.lower() in TRUE:
        return True
    if text.lower() in FALSE:
        return False
    raise click.UsageError(f"tritonserver's {flag} takes true or false, got '{text}'")


def integer(flag: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise click.UsageError(f"tritonserver's {flag} takes a number, got '{text}'") from None


def cache_config(values: Iterable[str]) -> Effect:
    """``local,size=N``: the response cache's size; other caches and settings are noted."""
    settings: dict[str, Any] = {}
    notes: list[str] = []
    for text in values:
        cache, key, value = split_setting("--cache-config", text)
        if cache == "local" and key == "size":
            settings["cache_size"] = integer("--cache-config", value)
        elif cache == "local":
            notes.append(f"local,{key}: no effect: the local cache's one setting is size")
        else:
            notes.append(
                f"{cache}: no effect: inferplex has one cache, in its own memory ('local'); "
                "without a local size nothing is cached"
            )
    return Effect(settings, tuple(notes))


def rate_limit_resources(values: Iterable[str]) -> Effect:
    """``name:count[:device]``: each resource's count; per-device counts add up, as
    inferplex has one pool of each resource for the whole server."""
    counts: dict[str, int] = {}
    notes: list[str] = []
    for text in values:
        parts = text.split(":")
        if len(parts) not in (2, 3) or not parts[0]:
            raise click.UsageError(
                "tritonserver's --rate-limit-resource takes <resource_name>:<count>:<device> "
                f"or <resource_name>:<count>, got '{text}'"
            )
        count = integer("--rate-limit-resource", parts[1])
        if len(parts) == 3:
            integer("--rate-limit-resource", parts[2])
            notes.append(
                f"{text}: device {parts[2]}'s count is added to the resource's one server-wide "
                "pool (inferplex has no per-device pools)"
            )
            counts[parts[0]] = counts.get(parts[0], 0) + count
        else:
            counts[parts[0]] = count
    return Effect({"rate_limit_resources": counts}, tuple(notes))


def metrics_config(values: Iterable[str]) -> Effect:
    """``<setting>=<value>``: inferplex's metrics have no such settings (noted)."""
    notes = []
    for text in values:
        _, key, value = split_setting("--metrics-config", text, named=False)
        notes.append(
            f"{key}={value}: no effect: inferplex exports its latencies as histograms "
            "(inferplex_*_duration_seconds) and Triton's nv_* counters, without settings"
        )
    return Effect({}, tuple(notes))
