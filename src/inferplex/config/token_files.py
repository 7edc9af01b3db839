"""API tokens read from files (``--inference-token-file``, ``--management-token-file``).

A token in the server's environment can be read by any process of the same user from
``/proc/<pid>/environ``, model code included; one given as a flag shows in ``ps`` to every
user. A file is read once, at start: given as a pipe (``<(vault read ...)``, ``/dev/stdin``)
or removed after start, nothing of the token is left to read but the server's memory.

A file that every user of the machine may read, or that another user may write (and so
choose the token), is refused, as ssh refuses such a private key; so are an empty file and a
token given both ways.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

__all__ = ["read_token_files"]

#: (token field, file field) of each token
_TOKENS = (
    ("inference_token", "inference_token_file"),
    ("management_token", "management_token_file"),
)


def read_token_files(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (ServerConfig's input) with each token whose file is given read from it;
    ValueError naming the file or the two settings when that cannot be."""
    for token, file in _TOKENS:
        path = data.get(file)
        if path is None or path == "":
            continue
        if data.get(token) not in (None, ""):
            raise ValueError(
                f"--{_flag(token)} and --{_flag(file)} both give the {_what(token)} (flag or "
                f"INFERPLEX_{token.upper()}, and INFERPLEX_{file.upper()}): give one"
            )
        data = {**data, token: _read(Path(path), file)}
    return data


def _read(path: Path, file: str) -> str:
    setting = f"--{_flag(file)}"
    try:
        mode = path.stat().st_mode
        if stat.S_ISREG(mode) and mode & (stat.S_IROTH | stat.S_IWOTH | stat.S_IWGRP):
            raise ValueError(
                f"{setting}: '{path}' may be read or written by other users of the machine "
                f"(mode {stat.filemode(mode)}): chmod 600 it (Kubernetes: defaultMode 0400)"
            )
        raw = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{setting}: cannot read '{path}': {exc.strerror}") from None
    try:
        # one trailing line break (as echo and editors write) is not part of the token
        token = raw.decode().removesuffix("\n").removesuffix("\r")
    except UnicodeDecodeError:
        raise ValueError(f"{setting}: '{path}' is not UTF-8 text") from None
    if not token.strip():
        raise ValueError(f"{setting}: '{path}' is empty: it must hold the token")
    if token != token.strip():
        raise ValueError(
            f"{setting}: '{path}' has blanks around the token (one trailing newline is allowed)"
        )
    return token


def _flag(field: str) -> str:
    return field.replace("_", "-")


def _what(token: str) -> str:
    return token.replace("_", " ")
