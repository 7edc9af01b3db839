"""Host memory of loaded models, in bytes: measuring footprints, returning freed memory to
the system, and choosing which idle models to evict when a load would pass the budget.

A model's footprint is the growth of the resident set (RSS) of the process and its worker
processes while its instances are created and warmed up, measured with every other load
held off by one lock, and never less than the size of its files. The budget counts these
footprints, not the whole process (the interpreter and the server's own memory are not the
models').
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

from inferplex.errors import InsufficientMemoryError

logger = logging.getLogger(__name__)

_PROCESS = psutil.Process()


def rss_bytes() -> int:
    """The resident set size of this process and its child processes: the worker processes
    of Python models and of models isolated in a process hold model memory too."""
    total = _PROCESS.memory_info().rss
    for pid in _descendants():
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.Error:  # it ended meanwhile
            continue
    return int(total)


def _descendants() -> list[int]:
    """This process's children, grandchildren, ... Linux lists each thread's children in
    /proc (CONFIG_PROC_CHILDREN): reading those is cheap, while psutil's ``children()``
    reads every process of the machine (milliseconds of GIL-holding Python per call, which
    a load beside serving takes from the event loop)."""
    try:
        found, todo = [], [_PROCESS.pid]
        while todo:
            pid = todo.pop()
            with os.scandir(f"/proc/{pid}/task") as tasks:  # closed also when one fails
                for task in tasks:
                    try:
                        with open(f"{task.path}/children") as file:
                            todo.extend(int(child) for child in file.read().split())
                    except FileNotFoundError:
                        if pid == _PROCESS.pid and task.name == str(pid):
                            raise  # no children file at all: not this kernel's /proc
                        # a thread or child that ended meanwhile: nothing of it to count
            if pid != _PROCESS.pid:
                found.append(pid)
        return found
    except FileNotFoundError:  # not Linux, a kernel without the file, or a child that ended
        return [child.pid for child in _PROCESS.children(recursive=True)]


def _load_libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim  # noqa: B018 - glibc only; musl and macOS lack it
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _load_libc()


def release_free_memory() -> bool:
    """Ask the C allocator to hand freed heap pages back to the system (glibc's
    ``malloc_trim(0)``): without it, memory freed by an unloaded model stays in the process.
    False where the allocator has no such call."""
    if _LIBC is None:
        return False
    _LIBC.malloc_trim(0)
    return True


@dataclass(frozen=True)
class Resident:
    """A loaded model as eviction sees it."""

    name: str
    footprint: int
    last_used: float
    #: pinned, busy (requests in flight) or in the middle of a load/unload
    evictable: bool
    why_kept: str = ""


def choose_evictions(
    limit: int,
    needed: int,
    loaded: Iterable[Resident],
    model: str,
    budget: str = "--memory-limit",
    after_load: bool = False,
) -> list[Resident]:
    """The least recently used evictable models to unload so that ``needed`` more bytes fit
    into ``limit`` next to everything loaded; [] when they already fit.
    InsufficientMemoryError, naming what holds the memory and the ``budget``, when no
    choice makes room. ``after_load``: ``model`` is loaded already (its measured footprint
    among ``loaded``), which is what the error then says."""
    residents = list(loaded)
    used = sum(r.footprint for r in residents)
    if used + needed <= limit:
        return []
    chosen: list[Resident] = []
    for resident in sorted((r for r in residents if r.evictable), key=lambda r: r.last_used):
        chosen.append(resident)
        used -= resident.footprint
        if used + needed <= limit:
            return chosen
    kept = [r for r in residents if not r.evictable]
    held = ", ".join(f"'{r.name}' {r.footprint} B ({r.why_kept})" for r in kept) or "nothing"
    if after_load:
        what = (
            f"model '{model}' took more memory than estimated: once loaded, {used} bytes are in "
            f"use against the memory limit of {limit} bytes ({budget}) after evicting every "
            "idle model"
        )
    else:
        what = (
            f"cannot load model '{model}': it needs about {needed} bytes but the memory limit "
            f"is {limit} bytes ({budget}) and, after evicting every idle model, {used} bytes "
            "stay in use"
        )
    raise InsufficientMemoryError(f"{what}, by models that cannot be evicted: {held}")
