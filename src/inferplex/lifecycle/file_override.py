"""Triton's file overrides on the repository load API: the model's files in the load request.

``POST /v2/repository/models/{m}/load`` with parameters ``{"config": "<json>",
"file:1/model.onnx": "<base64>"}`` (gRPC ``RepositoryModelLoad``: the file's raw bytes in
``bytes_param``; a ``string_param`` is read as base64) loads ``m`` from a folder made of
that config and those files only, as Triton does: the repository's own files of the model
are not used, and ``config`` is required (the folder has no config file of its own). The
model need not be in the repository at all.

The folder is written to a fresh temporary directory (never into the repository) and the model
loads from it like any reload: beside the served versions, then the switch, then the drain.
It lives as long as versions loaded from it serve (instances added at run time are created
from its files): the loader removes it once the model is unloaded or replaced by a later load,
and a load that fails removes its folder at once.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from inferplex.config.paths import relative_problem
from inferplex.errors import InferplexError, InvalidInputError, load_failed

logger = logging.getLogger(__name__)

#: the prefix of a load parameter carrying one file: ``file:<version>/<path>``
FILE_PREFIX = "file:"
#: the name of the temporary folders (``<tmp>/inferplex-override-XXXX/<model>/...``)
FOLDER_PREFIX = "inferplex-override-"
_EXPECTED = "expected file:<version>/<file>, e.g. file:1/model.onnx"
#: the longest name of one file or folder (Linux's NAME_MAX), in bytes
NAME_MAX = 255


def is_file_parameter(key: str) -> bool:
    """Whether a load parameter is a file override."""
    return key.startswith(FILE_PREFIX)


def override_files(parameters: Mapping[str, Any]) -> dict[PurePosixPath, bytes]:
    """The file overrides among a load request's parameters: relative path -> content.
    InvalidInputError naming the parameter for a path that leaves the model folder or is not
    in a version folder, for content that is not base64 (HTTP) or bytes (gRPC), and for a
    path that is both a file and a folder."""
    files = {
        _relative_path(key): _content(key, value)
        for key, value in parameters.items()
        if is_file_parameter(key)
    }
    folders = {parent for path in files for parent in path.parents}
    for path in files:
        if path in folders:
            raise InvalidInputError(
                f"load parameter '{FILE_PREFIX}{path}' is a file, but other file parameters "
                "put files inside it"
            )
    return files


def _relative_path(key: str) -> PurePosixPath:
    raw = key[len(FILE_PREFIX) :]

    def bad(why: str) -> InvalidInputError:
        return InvalidInputError(f"load parameter '{key}': {why}; {_EXPECTED}")

    if not raw:
        raise bad("no path after 'file:'")
    if len(raw.split("/", 1)[0].encode()) > NAME_MAX:
        # Triton's answer to a version folder whose name is too long for the file system,
        # which its model-control clients check: the model's folder cannot be read
        # ("polled"), an internal error (longer names further down are a 400, below)
        raise InferplexError(
            f"failed to poll from model repository: load parameter '{key[:64]}...': the "
            f"version folder's name is longer than {NAME_MAX} bytes; {_EXPECTED}"
        )
    problem = relative_problem(raw, "the model folder")
    if problem is not None:
        raise bad(f"the path {problem}")
    parts = raw.split("/")
    version = parts[0]
    if not (version.isascii() and version.isdigit() and version == str(int(version)) != "0"):
        raise bad(f"the version folder '{version}' must be a positive integer such as 1")
    if len(parts) < 2:
        raise bad("it names a version folder, not a file in it")
    return PurePosixPath(*parts)


def _content(key: str, value: Any) -> bytes:
    if isinstance(value, bytes):  # gRPC bytes_param: the file itself
        return value
    if isinstance(value, str):  # HTTP JSON: base64 (line breaks of wrapped base64 allowed)
        try:
            return base64.b64decode("".join(value.split()), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise InvalidInputError(f"load parameter '{key}' is not valid base64: {exc}") from None
    raise InvalidInputError(
        f"load parameter '{key}' must hold the file's content (a base64 string over HTTP, "
        f"bytes_param over gRPC), got {type(value).__name__}"
    )


def remove_folder(model_dir: Path) -> None:
    """Delete an override folder: the temporary directory holding ``model_dir``."""
    root = model_dir.parent
    if root.name.startswith(FOLDER_PREFIX):  # never anything but a folder made by write()
        shutil.rmtree(root, ignore_errors=True)


class OverrideFolders:
    """The temporary model folders of models loaded from file overrides: for each model at
    most one once its load finished, the one its served versions were loaded from."""

    def __init__(self) -> None:
        self._serving: dict[str, Path] = {}

    def write(self, name: str, files: Mapping[PurePosixPath, bytes]) -> Path:
        """Write ``files`` into a new temporary model folder named ``name``; returns it.
        Blocking (writes files): call it off the event loop."""
        try:
            model_dir = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX)) / name
        except OSError as exc:
            raise load_failed(name, f"cannot make a folder for its files: {exc}") from None
        try:
            for relative, content in files.items():
                path = model_dir.joinpath(*relative.parts)  # checked by override_files
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(content)
        except OSError as exc:  # the disk is full, a name is too long for the file system
            remove_folder(model_dir)
            raise load_failed(name, f"cannot write its files to {model_dir}: {exc}") from None
        except BaseException:
            remove_folder(model_dir)
            raise
        return model_dir

    def source(self, name: str) -> Path | None:
        """The override folder ``name`` serves from; None: the repository (or not loaded)."""
        return self._serving.get(name)

    def adopt(self, name: str, source: Path | None) -> Path | None:
        """A load of ``name`` from ``source`` (None: the repository) succeeded: record it and
        return the folder the replaced versions came from, to remove once they are freed."""
        previous = self._serving.pop(name, None)
        if source is not None:
            self._serving[name] = source
        return previous if previous != source else None

    async def release(self, name: str) -> None:
        """``name`` was unloaded: remove the folder it served from, if any."""
        folder = self._serving.pop(name, None)
        if folder is not None:
            await asyncio.to_thread(remove_folder, folder)
            logger.info("model '%s': removed its override folder %s", name, folder.parent)

    async def discard(self, name: str, source: Path) -> None:
        """After a load from ``source``, whatever its outcome: remove the folder unless the
        model now serves from it (a failed or cancelled load leaves nothing behind)."""
        if self._serving.get(name) != source:
            await asyncio.to_thread(remove_folder, source)
