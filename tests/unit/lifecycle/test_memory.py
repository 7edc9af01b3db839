"""Eviction policy (pure), RSS measurement and returning freed memory."""

from __future__ import annotations

import pytest

from inferplex.errors import InsufficientMemoryError
from inferplex.lifecycle.memory import Resident, choose_evictions, release_free_memory, rss_bytes


def resident(name: str, footprint: int, last_used: float, why_kept: str = "") -> Resident:
    return Resident(name, footprint, last_used, not why_kept, why_kept)


def test_nothing_is_evicted_when_the_model_fits() -> None:
    assert choose_evictions(100, 40, [resident("a", 60, 1.0)], "new") == []


def test_least_recently_used_go_first_until_it_fits() -> None:
    loaded = [resident("a", 30, 3.0), resident("b", 30, 1.0), resident("c", 30, 2.0)]
    chosen = choose_evictions(100, 40, loaded, "new")
    assert [r.name for r in chosen] == ["b"]
    chosen = choose_evictions(100, 70, loaded, "new")
    assert [r.name for r in chosen] == ["b", "c"]


def test_pinned_and_busy_models_are_never_chosen() -> None:
    loaded = [
        resident("pinned", 30, 0.0, "pinned"),
        resident("busy", 30, 0.5, "requests in flight"),
        resident("idle", 30, 9.0),
    ]
    assert [r.name for r in choose_evictions(100, 40, loaded, "new")] == ["idle"]


def test_a_clear_error_when_eviction_cannot_make_room() -> None:
    loaded = [resident("pinned", 60, 0.0, "pinned"), resident("idle", 30, 1.0)]
    with pytest.raises(InsufficientMemoryError) as caught:
        choose_evictions(100, 50, loaded, "new")
    message = caught.value.message
    assert "cannot load model 'new': it needs about 50 bytes" in message
    assert "limit is 100 bytes (--memory-limit)" in message
    assert "'pinned' 60 B (pinned)" in message


def test_rss_and_trim() -> None:
    assert rss_bytes() > 0
    assert isinstance(release_free_memory(), bool)


def test_rss_counts_child_processes() -> None:
    """Worker processes hold model memory too; they are found without scanning every
    process of the machine (memory._descendants)."""
    import subprocess
    import sys

    import psutil

    from inferplex.lifecycle.memory import _descendants

    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        assert child.pid in _descendants()
        assert set(_descendants()) == {p.pid for p in psutil.Process().children(recursive=True)}
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(30)
