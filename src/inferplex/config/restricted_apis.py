"""Triton's restricted APIs (``--http-restricted-api``, ``--grpc-restricted-protocol``):
groups of APIs that answer only calls carrying a header of the operator's choosing with a
set value, read as tritonserver reads them. ``security/restricted.py`` enforces them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

#: the API categories, with Triton's names (restricted_features.h)
API_NAMES = (
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)


@dataclass(frozen=True, slots=True)
class RestrictedGroup:
    """APIs that need the header ``key`` with exactly ``value``."""

    apis: frozenset[str]
    key: str
    value: str


def parse_groups(setting: str, values: Iterable[str]) -> tuple[RestrictedGroup, ...]:
    """``<apis>:<key>=<value>`` each (``apis`` comma-separated); an API in one group at most,
    as Triton checks. ValueError naming ``setting`` for a malformed value."""
    groups: list[RestrictedGroup] = []
    seen: set[str] = set()
    for text in values:
        head, equals, value = text.partition("=")
        apis, colon, key = head.partition(":")
        if not (colon and equals and apis.strip() and key.strip() and value):
            raise ValueError(f"{setting} takes <apis>:<key>=<value>, got '{text}'")
        names = frozenset(api.strip() for api in apis.split(","))
        for name in sorted(names):
            if name not in API_NAMES:
                raise ValueError(f"{setting}: unknown API '{name}' (one of {', '.join(API_NAMES)})")
            if name in seen:
                raise ValueError(f"{setting}: '{name}' is in more than one group")
        seen |= names
        groups.append(RestrictedGroup(names, key.strip(), value))
    return tuple(groups)
