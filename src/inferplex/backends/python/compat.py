"""What a Triton model.py uses of ``triton_python_backend_utils`` that inferplex lacks, found
when the model loads: the model then fails to load with the names and why, rather than load
READY and fail each request with an AttributeError.

The check reads model.py's source: attributes of the names the module is imported as
(``pb_utils.load_model``) that ``inferplex.handler.triton`` does not have, and calls of the
request methods of Triton's that ``InferenceRequest`` lacks (``request.set_release_flags``).
"""

from __future__ import annotations

import ast
from pathlib import Path

from inferplex.handler import triton

#: the names a model imports the module under (Triton's, and inferplex's own path)
_MODULES = ("triton_python_backend_utils", "inferplex.handler.triton")


def unsupported_uses(source: str) -> list[str]:
    """``"pb_utils.load_model (line 12): why"`` for each unsupported use in ``source``."""
    tree = ast.parse(source)
    aliases = _aliases(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in aliases:
            if not hasattr(triton, node.attr):
                why = triton.UNSUPPORTED.get(node.attr, "Triton's module has no such name")
                found.append(f"{owner.id}.{node.attr} (line {node.lineno}): {why}")
        elif node.attr in triton.UNSUPPORTED_METHODS and not hasattr(
            triton.InferenceRequest, node.attr
        ):
            why = triton.UNSUPPORTED_METHODS[node.attr]
            found.append(f"request.{node.attr}() (line {node.lineno}): {why}")
    return found


def _aliases(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.asname or a.name for a in node.names if a.name in _MODULES)
        elif isinstance(node, ast.ImportFrom) and node.module == "inferplex.handler":
            names.update(a.asname or a.name for a in node.names if a.name == "triton")
    return names


def check(model_file: Path) -> None:
    """ImportError naming every unsupported use in ``model_file`` (a model that fails to
    load); nothing when there is none."""
    found = unsupported_uses(model_file.read_text(encoding="utf-8"))
    if found:
        raise ImportError(
            f"{model_file.name} uses what inferplex's triton_python_backend_utils does not "
            f"support: {'; '.join(found)}"
        )
