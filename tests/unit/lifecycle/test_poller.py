"""Change detection for poll mode: folder fingerprints, the diff, one poll round."""

from __future__ import annotations

import os
from pathlib import Path

from inferplex.lifecycle.poller import Changes, RepositoryPoller, Snapshot, diff
from inferplex.repository.local import fingerprint, scan_repository


def test_diff() -> None:
    changes = diff({"a": "1", "b": "2", "new": "3"}, {"a": "1", "b": "old", "gone": "4"})
    assert changes == Changes(added=("new",), changed=("b",), removed=("gone",))
    assert not diff({"a": "1"}, {"a": "1"})


def test_fingerprint_follows_files_sizes_and_times(tmp_path: Path) -> None:
    model = tmp_path / "m"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text("max_batch_size: 8\n")
    (model / "1" / "model.onnx").write_bytes(b"abc")
    first = fingerprint(model)
    assert fingerprint(model) == first
    (model / "2").mkdir()
    assert fingerprint(model) == first  # an empty folder holds nothing to load
    (model / "2" / "model.onnx").write_bytes(b"abc")
    second = fingerprint(model)
    assert second != first
    stat = (model / "config.pbtxt").stat()
    os.utime(model / "config.pbtxt", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert fingerprint(model) != second  # same size, rewritten later
    assert set(scan_repository(tmp_path)) == {"m"}


async def test_poll_once_refreshes_then_scans_then_applies(tmp_path: Path) -> None:
    calls: list[str] = []
    applied: list[Snapshot] = []

    def refresh() -> bool:
        calls.append("refresh")
        return True

    def scan() -> dict[str, str]:
        calls.append("scan")
        return {"m": "x"}

    async def apply(snapshot: Snapshot) -> None:
        applied.append(snapshot)

    poller = RepositoryPoller(scan, apply, interval=60, before_scan=refresh)
    await poller.poll_once()
    assert calls == ["refresh", "scan"] and applied == [{"m": "x"}]
