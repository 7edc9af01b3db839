"""A local model repository in Triton's layout: ``DIR/<model>/config.*`` and
``DIR/<model>/<version>/<model file>``: finding its models and their version folders, and
the fingerprints that tell when a model's files change. What to load from a model folder, and
how, is decided in lifecycle/planning.py."""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from inferplex.config.paths import name_problem
from inferplex.errors import ConfigError

logger = logging.getLogger(__name__)


def list_models(repository: Path) -> list[Path]:
    """The model folders of a repository, sorted by name (hidden folders skipped)."""
    if not repository.is_dir():
        raise ConfigError(f"model repository '{repository}' is not a folder")
    found = []
    for path in sorted(repository.iterdir()):
        if not path.is_dir() or path.name.startswith((".", "_")):
            continue
        problem = name_problem(path.name)
        if problem is not None:  # a folder no client could name (a control character)
            logger.warning("repository: skipping folder %r: %s", path.name, problem)
            continue
        found.append(path)
    return found


def version_dirs(model_dir: Path) -> dict[int, Path]:
    """The version folders of a model folder by version number (folders named by digits)."""
    return {int(p.name): p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()}


@dataclass(frozen=True)
class FileFacts:
    """A file as change detection sees it."""

    path: Path
    size: int
    mtime_ns: int


def list_files(path: Path) -> list[FileFacts]:
    """Every file in the folder ``path`` and its subfolders (or ``path`` itself, a file),
    sorted by path, with size and modification time: one read per folder and one stat per
    file. Blocking. A load reads a model's folder beside busy serving, where each file
    system call hands the GIL over and back (docs/lifecycle.md): one walk serves the load's
    fingerprints and sizes."""
    try:
        if not path.is_dir():
            stat = path.stat()
            return [FileFacts(path, stat.st_size, stat.st_mtime_ns)]
    except OSError:  # removed while we looked: the next scan sees the rest of the change
        return []
    found: list[FileFacts] = []
    folders = [path]
    while folders:
        try:
            entries = list(os.scandir(folders.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):  # as rglob: no loops through links
                    folders.append(Path(entry.path))
                elif entry.is_file():
                    stat = entry.stat()
                    found.append(FileFacts(Path(entry.path), stat.st_size, stat.st_mtime_ns))
            except OSError:
                continue
    found.sort(key=lambda f: f.path)
    return found


def digest(files: list[FileFacts], root: Path) -> str:
    """A digest of ``files`` as far as change detection needs: each one's path relative to
    ``root``, size and modification time."""
    hasher = hashlib.blake2b(digest_size=16)
    for file in files:
        hasher.update(f"{file.path.relative_to(root)}\0{file.size}\0{file.mtime_ns}\n".encode())
    return hasher.hexdigest()


def fingerprint(path: Path) -> str:
    """A digest of a folder's (or file's) contents as far as change detection needs: every
    file's relative path, size and modification time. Blocking (walks the folder)."""
    return digest(list_files(path), path.parent)


def scan_repository(repository: Path) -> dict[str, str]:
    """Each model folder of the repository and the fingerprint of its contents."""
    return {model_dir.name: fingerprint(model_dir) for model_dir in list_models(repository)}
