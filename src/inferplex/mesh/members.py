"""Where a mesh's members (the ring's replica names) come from while it runs, so that a
scale event reaches the replicas and nginx without a restart (docs/mesh.md, "Scaling").

One spec, two sources, one code path after reading (``MemberSource.read``):

- ``file:PATH``: one replica name per line (``#`` starts a comment); a mounted ConfigMap, or
  the file the loopback tests and bench rewrite. Read again when its modification time or
  size changes.
- ``dns:TEMPLATE:max=N``: ``TEMPLATE`` holds ``{i}`` (``inferplex-mesh-{i}.inferplex-mesh``),
  a StatefulSet's pod names under its headless Service. The members are ``0..h`` where ``h``
  is the highest index that resolves; a member's name is the template's first label
  (``inferplex-mesh-2``, the pod's name, as ``--mesh-self``). A hole below ``h`` (a pod that
  restarts) stays on the ring: its models go to their backup owner for the while, as for any
  failure, instead of moving twice. Scaling a StatefulSet adds or removes the highest
  indices, which is what moves the ring.

A source never yields an empty list: reading one is ConfigError (the caller keeps the ring it
has and says so).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from inferplex.errors import ConfigError

#: most members a dns: spec may ask for (each is one lookup per refresh)
MAX_DNS_MEMBERS = 256
#: biggest members file read (a name per line; far more than any mesh has)
MAX_FILE_BYTES = 1 << 20

Resolver = Callable[[str], bool]


def resolves(host: str) -> bool:
    """Whether ``host`` has an address (blocking: run it off the event loop)."""
    try:
        return bool(socket.getaddrinfo(host, None, type=socket.SOCK_STREAM))
    except (socket.gaierror, UnicodeError):
        return False


def parse_names(text: str, origin: str) -> tuple[str, ...]:
    """The names of a members file: one a line, blank lines and ``#`` comments skipped."""
    names: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if any(c.isspace() or c == "," for c in line):
            raise ConfigError(f"{origin} line {number}: one replica name a line, got {raw!r}")
        if line in names:
            raise ConfigError(f"{origin} line {number}: replica '{line}' is named twice")
        names.append(line)
    if not names:
        raise ConfigError(f"{origin} names no replica: the mesh needs at least one")
    return tuple(names)


@dataclass
class MemberSource:
    """A parsed ``--mesh-members`` spec; ``read`` (blocking) gives the members now."""

    spec: str
    resolver: Resolver = resolves
    path: Path | None = field(default=None, init=False)
    template: str = field(default="", init=False)
    most: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        kind, _, rest = self.spec.partition(":")
        if kind == "file" and rest:
            self.path = Path(rest)
        elif kind == "dns" and rest:
            template, _, most = rest.rpartition(":max=")
            if not template or not most.isdigit() or not 1 <= int(most) <= MAX_DNS_MEMBERS:
                raise ConfigError(
                    f"--mesh-members {self.spec!r}: expected dns:TEMPLATE:max=N with N from 1 "
                    f"to {MAX_DNS_MEMBERS}, e.g. dns:inferplex-mesh-{{i}}.inferplex-mesh:max=16"
                )
            if "{i}" not in template.split(".", 1)[0]:
                raise ConfigError(
                    f"--mesh-members {self.spec!r}: the template's first label needs {{i}} "
                    "(the pod's index), e.g. inferplex-mesh-{i}.inferplex-mesh"
                )
            self.template, self.most = template, int(most)
        else:
            raise ConfigError(
                f"--mesh-members {self.spec!r}: expected file:PATH or dns:TEMPLATE:max=N"
            )

    def stamp(self) -> object:
        """Changes when the source may have changed: a file's (mtime, size); for DNS nothing
        cheaper than asking, so a new object each time."""
        if self.path is None:
            return object()
        try:
            info = self.path.stat()
        except OSError:
            return None
        return (info.st_mtime_ns, info.st_size)

    def read(self) -> tuple[str, ...]:
        """The members now, in a stable order. Blocking; ConfigError when there are none or
        the file cannot be read or is malformed."""
        if self.path is not None:
            try:
                with self.path.open("rb") as handle:
                    data = handle.read(MAX_FILE_BYTES + 1)
            except OSError as exc:
                raise ConfigError(f"members file {self.path}: {exc.strerror}") from exc
            if len(data) > MAX_FILE_BYTES:
                raise ConfigError(f"members file {self.path} is over {MAX_FILE_BYTES} bytes")
            try:
                text = data.decode()
            except UnicodeDecodeError as exc:
                raise ConfigError(f"members file {self.path} is not UTF-8") from exc
            return parse_names(text, f"members file {self.path}")
        highest = -1
        for i in range(self.most):
            if self.resolver(self.template.format(i=i)):
                highest = i
        if highest < 0:
            raise ConfigError(
                f"no member of {self.template} (indices 0-{self.most - 1}) resolves: the mesh "
                "needs at least one"
            )
        label = self.template.split(".", 1)[0]
        return tuple(label.format(i=i) for i in range(highest + 1))
