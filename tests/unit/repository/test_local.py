"""A local repository: its model folders, and the fingerprints of change detection."""

from __future__ import annotations

import os
from pathlib import Path

from inferplex.repository.local import digest, fingerprint, list_files, list_models, version_dirs


def test_list_models_skips_hidden_folders(tmp_path: Path) -> None:
    for name in ("b", "a", ".git", "_tmp"):
        (tmp_path / name).mkdir()
    assert [p.name for p in list_models(tmp_path)] == ["a", "b"]


def test_version_dirs_are_the_folders_named_by_numbers(tmp_path: Path) -> None:
    for name in ("1", "10", "v2", "config.pbtxt"):
        (tmp_path / name).mkdir()
    assert version_dirs(tmp_path) == {1: tmp_path / "1", 10: tmp_path / "10"}


# -- change detection ---------------------------------------------------------------------------
def test_list_files_walks_every_folder_once_and_sorts_by_path(tmp_path: Path) -> None:
    model = tmp_path / "m"
    (model / "1" / "sub").mkdir(parents=True)
    (model / "config.pbtxt").write_text("name: 'm'")
    (model / "1" / "model.onnx").write_bytes(b"12345")
    (model / "1" / "sub" / "weights.bin").write_bytes(b"x" * 10)
    (model / "2").mkdir()  # an empty folder lists nothing
    files = list_files(model)
    assert [f.path.relative_to(model).as_posix() for f in files] == [
        "1/model.onnx",
        "1/sub/weights.bin",
        "config.pbtxt",
    ]
    assert [f.size for f in files] == [5, 10, 9]
    assert list_files(model / "1" / "model.onnx") == files[:1]  # a file lists itself
    assert list_files(tmp_path / "gone") == []


def test_fingerprint_changes_with_names_sizes_and_times_only(tmp_path: Path) -> None:
    model = tmp_path / "m"
    (model / "1").mkdir(parents=True)
    weights = model / "1" / "model.onnx"
    weights.write_bytes(b"abc")
    first = fingerprint(model)
    assert fingerprint(model) == first
    os.utime(weights, ns=(1, 2))
    touched = fingerprint(model)
    assert touched != first
    weights.write_bytes(b"abcd")
    os.utime(weights, ns=(1, 2))
    assert fingerprint(model) != touched  # same time, other size
    (model / "1" / "model.onnx").rename(model / "1" / "other.onnx")
    assert fingerprint(model) not in (first, touched)
    # the digest of a listing names files relative to the root it is given
    files = list_files(model)
    assert digest(files, model.parent) == fingerprint(model)
    assert digest(files, model) != digest(files, model.parent)


def test_list_files_follows_linked_files_but_not_linked_folders(tmp_path: Path) -> None:
    model = tmp_path / "m"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.onnx").write_bytes(b"12345")
    (tmp_path / "shared.bin").write_bytes(b"xyz")
    (model / "1" / "weights.bin").symlink_to(tmp_path / "shared.bin")
    (model / "1" / "loop").symlink_to(model, target_is_directory=True)  # a cycle
    files = list_files(model)
    assert [(f.path.name, f.size) for f in files] == [("model.onnx", 5), ("weights.bin", 3)]
