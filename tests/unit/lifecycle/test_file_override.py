"""File overrides of the load API: validating ``file:`` parameters, and the temporary model
folders they become (written, adopted by a load, removed when replaced or unloaded)."""

from __future__ import annotations

import base64
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from inferplex.errors import ErrorCode, InferplexError, InvalidInputError, ModelLoadError
from inferplex.lifecycle.file_override import (
    FOLDER_PREFIX,
    OverrideFolders,
    is_file_parameter,
    override_files,
    remove_folder,
)

ONNX = b"\x08\x07model bytes"


def test_http_base64_and_grpc_bytes() -> None:
    files = override_files(
        {
            "config": "{}",
            "pinned": True,
            "file:1/model.onnx": base64.b64encode(ONNX).decode(),
            "file:2/weights/data.bin": ONNX,  # gRPC bytes_param: the raw file
            "file:3/empty": "",
        }
    )
    assert files == {
        PurePosixPath("1/model.onnx"): ONNX,
        PurePosixPath("2/weights/data.bin"): ONNX,
        PurePosixPath("3/empty"): b"",
    }
    assert is_file_parameter("file:1/x") and not is_file_parameter("config")


def test_wrapped_base64_is_accepted() -> None:
    text = base64.encodebytes(ONNX * 20).decode()  # line breaks every 76 characters
    assert "\n" in text
    assert override_files({"file:1/model.onnx": text}) == {PurePosixPath("1/model.onnx"): ONNX * 20}


@pytest.mark.parametrize(
    ("key", "fragment"),
    [
        ("file:", "no path after 'file:'"),
        ("file:/etc/passwd", "must be relative to the model folder, not absolute"),
        ("file:../model.onnx", "must stay inside the model folder"),
        ("file:1/../../x", "must stay inside the model folder"),
        ("file:1/./model.onnx", "must stay inside the model folder"),
        ("file:1//model.onnx", "must stay inside the model folder"),
        ("file:1/sub\\..\\x", "backslashes"),
        ("file:0/model.onnx", "version folder '0' must be a positive integer"),
        ("file:01/model.onnx", "version folder '01' must be a positive integer"),
        ("file:-1/model.onnx", "version folder '-1' must be a positive integer"),
        ("file:v1/model.onnx", "version folder 'v1' must be a positive integer"),
        ("file:config.pbtxt", "version folder 'config.pbtxt' must be a positive integer"),
        ("file:1", "names a version folder, not a file in it"),
    ],
)
def test_paths_outside_a_version_folder_are_refused(key: str, fragment: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        override_files({key: ONNX})
    assert f"load parameter '{key}'" in caught.value.message
    assert fragment in caught.value.message
    assert "expected file:<version>/<file>" in caught.value.message


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("not base64!", "is not valid base64"),
        ("QUJ", "is not valid base64"),  # missing padding
        ("äöü", "is not valid base64"),
        (5, "must hold the file's content (a base64 string over HTTP, bytes_param over gRPC)"),
        (True, "got bool"),
    ],
)
def test_bad_content_is_refused(value: Any, fragment: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        override_files({"file:1/model.onnx": value})
    assert "load parameter 'file:1/model.onnx'" in caught.value.message
    assert fragment in caught.value.message


def test_a_file_cannot_also_be_a_folder() -> None:
    with pytest.raises(InvalidInputError, match="'file:1/a' is a file, but other file"):
        override_files({"file:1/a": ONNX, "file:1/a/b": ONNX})


def test_folders_are_written_adopted_and_removed(tmp_path: Path) -> None:
    folders = OverrideFolders()
    files = {PurePosixPath("1/model.onnx"): ONNX, PurePosixPath("2/sub/data.bin"): b"d"}
    first = folders.write("m", files)
    assert first.name == "m" and first.parent.name.startswith(FOLDER_PREFIX)
    assert (first / "1" / "model.onnx").read_bytes() == ONNX
    assert (first / "2" / "sub" / "data.bin").read_bytes() == b"d"
    assert folders.adopt("m", first) is None  # the model served from the repository before
    assert folders.source("m") == first
    second = folders.write("m", files)
    assert folders.adopt("m", second) == first  # the replaced versions' folder, to remove
    assert folders.adopt("m", None) == second  # back to the repository
    assert folders.source("m") is None
    for folder in (first, second):
        remove_folder(folder)
        assert not folder.parent.exists()


async def test_release_and_discard() -> None:
    folders = OverrideFolders()
    serving = folders.write("m", {PurePosixPath("1/model.onnx"): ONNX})
    folders.adopt("m", serving)
    await folders.discard("m", serving)  # the load succeeded: the folder serves, it stays
    assert serving.exists()
    failed = folders.write("m", {PurePosixPath("1/model.onnx"): b"broken"})
    await folders.discard("m", failed)  # a failed load leaves nothing behind
    assert not failed.parent.exists() and serving.exists()
    await folders.release("m")  # unloaded
    assert not serving.parent.exists() and folders.source("m") is None
    await folders.release("m")  # nothing left: a no-op


def test_only_override_folders_are_ever_removed(tmp_path: Path) -> None:
    model_dir = tmp_path / "repository" / "m"
    model_dir.mkdir(parents=True)
    remove_folder(model_dir)  # not below an inferplex-override- folder: left alone
    assert model_dir.exists()


def test_a_folder_that_cannot_be_written_fails_the_load() -> None:
    with pytest.raises(ModelLoadError, match="load failed for model 'm': cannot write its files"):
        OverrideFolders().write("m", {PurePosixPath("1/" + "x" * 300): ONNX})  # name too long


def test_a_version_folder_name_longer_than_name_max_gets_tritons_answer() -> None:
    # Triton's model-control clients check the code (INTERNAL) and the words
    with pytest.raises(InferplexError, match="failed to poll from model repository") as refused:
        override_files({"config": "{}", "file:" + "A" * 256: b"a"})
    assert refused.value.code is ErrorCode.INTERNAL
    # a file's name over the limit stays a 400 naming the rule
    with pytest.raises(InvalidInputError, match="at most 255 bytes"):
        override_files({"config": "{}", "file:1/" + "b" * 256: b"a"})
