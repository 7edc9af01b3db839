"""Names that reach the file system: model names (a model's folder) and the files a model's
configuration names (``default_model_filename``, a warm-up sample's ``input_data_file``, an
output's ``label_filename``, a load request's ``file:<version>/<path>`` overrides).

A configuration may come from a client (the load API's ``config`` parameter), so a file it
names must stay inside the model's own folder: a path that is absolute or climbs out with
``..`` is refused before the disk is touched, and a path that leads out through a symbolic
link is refused after resolving it, with the same message whether the outside file exists
or not (the answer must not tell a client which files the server can see). A symbolic link
that stays inside the model's folder is followed, as Triton does; the model's folder or a
version folder may itself be a link (the repository's layout is the operator's, not the
configuration's).

Every check of this kind is here, so the rule reads the same wherever a name is used.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

from inferplex.errors import ConfigError, InvalidInputError

#: longest model name or path segment, in UTF-8 bytes: a file name's limit on Linux file
#: systems (NAME_MAX)
MAX_NAME_BYTES = 255
#: longest file path a configuration may name, in UTF-8 bytes (Linux's PATH_MAX)
MAX_PATH_BYTES = 4096
#: the rule every configured file name must follow, as error messages state it
FILE_RULE = "a relative path without '..', '.' or empty segments, backslashes or NUL characters"


def _show(text: str, limit: int = 80) -> str:
    """A client's string as a message quotes it: control characters escaped, long ones cut."""
    shown = text if len(text) <= limit else text[:limit] + "..."
    return repr(shown) if not shown.isprintable() else f"'{shown}'"


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a model name (the name of its folder), or None if it can."""
    if not isinstance(name, str) or not name:
        return "a model name must be a non-empty string"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return "a model name must be valid Unicode text (no lone surrogates)"
    if size > MAX_NAME_BYTES:
        return (
            f"a model name may have at most {MAX_NAME_BYTES} bytes in UTF-8 (the file system's "
            f"limit for a folder name), got {size}"
        )
    if name in (".", ".."):
        return "a model name may not be '.' or '..'"
    if "/" in name or "\\" in name:
        return "a model name may not hold '/' or '\\'"
    if any(unicodedata.category(c) == "Cc" for c in name):
        return "a model name may not hold NUL or other control characters"
    return None


def check_model_name(name: object) -> str:
    """``name`` if it can be a model name; InvalidInputError naming the rule otherwise. Every
    door through which a name reaches the model repository (load, unload, a load on demand,
    a repository scan) calls it."""
    problem = name_problem(name)
    if problem is not None:
        shown = _show(name) if isinstance(name, str) else repr(name)
        raise InvalidInputError(f"invalid model name {shown}: {problem}")
    assert isinstance(name, str)
    return name


def relative_problem(path: str, within: str) -> str | None:
    """Why ``path`` cannot name a file inside the folder ``within`` describes (a message
    fragment starting with a verb: 'must be relative to ...'), or None if it can. Reads no
    file: the same answer whether such a file exists or not."""
    if not path:
        return "is empty"
    if "\\" in path or "\0" in path:
        return "may not hold backslashes or NUL characters ('/' separates folders)"
    if path.startswith("/"):
        return f"must be relative to {within}, not absolute"
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return f"must stay inside {within} (no '..', '.' or empty segments)"
    try:
        sizes = [len(part.encode("utf-8")) for part in parts]
    except UnicodeEncodeError:
        return "must be valid Unicode text (no lone surrogates)"
    if sum(sizes) + len(parts) - 1 > MAX_PATH_BYTES:
        return f"may have at most {MAX_PATH_BYTES} bytes in UTF-8 (the file system's limit)"
    if max(sizes) > MAX_NAME_BYTES:
        return (
            f"may have at most {MAX_NAME_BYTES} bytes in UTF-8 per file or folder name (the "
            "file system's limit)"
        )
    return None


def check_file_name(path: str, within: str) -> str:
    """``path`` if a configuration may name it as a file in the folder ``within``
    describes; ValueError with the rule otherwise (raised in a config validator, it becomes
    the config's own error naming the field)."""
    problem = relative_problem(path, within)
    if problem is not None:
        raise ValueError(f"{_show(path)} {problem} (allowed: {FILE_RULE})")
    return path


def inside(folder: Path, name: str, field: str, model_dir: Path | None = None) -> Path:
    """The file ``name`` in ``folder``, as the configuration field ``field`` names it (an
    empty name: ``folder`` itself, for backends without a model file).
    ConfigError naming the field and the rule when ``name`` is not a relative path inside
    ``folder``, or when it leads out of both ``folder`` and ``model_dir`` (the model's
    folder, for a file in one of its subfolders) through a symbolic link. The message does
    not depend on whether the file exists. Blocking (resolves links)."""
    if not name:  # a backend that names no file of its own (an ensemble, a remote model)
        return folder
    where = f"{model_dir.name}/{folder.relative_to(model_dir)}" if model_dir else folder.name
    problem = relative_problem(name, f"{where}/")
    escaped = f"must stay inside {where}/ (a symbolic link may not lead out of the model's folder)"
    if problem is None:
        path = folder / name
        try:
            resolved = path.resolve()
            bounds = [folder.resolve()] + ([model_dir.resolve()] if model_dir else [])
        except (OSError, RuntimeError):  # a link loop, a name too long once resolved
            problem = escaped
        else:
            if not any(resolved.is_relative_to(bound) for bound in bounds):
                problem = escaped
    if problem is not None:
        raise ConfigError(f"{field} {_show(name)} {problem} (allowed: {FILE_RULE})")
    return path
