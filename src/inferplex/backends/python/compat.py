"""What a Triton model.py uses of ``triton_python_backend_utils`` that inferplex lacks, found
when the model loads: the model then fails to load with the names and why, rather than load
READY and fail each request with an AttributeError or a TypeError.

The check reads model.py's source: attributes of the names the module is imported as
(``pb_utils.load_model``) that ``inferplex.handler.triton`` does not have, keywords its
classes and functions do not take (``InferenceRequest(preferred_memory=...)``) and calls
of Triton request methods ``InferenceRequest`` lacks (``request.set_release_flags``). The
model's class is checked for the Triton methods the server would not call (``is_ready``).
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

from inferplex.handler import triton

#: the names a model imports the module under (Triton's, and inferplex's own path)
_MODULES = ("triton_python_backend_utils", "inferplex.handler.triton")
#: why a keyword of Triton's is not taken here
_KEYWORDS = {
    "preferred_memory": "GPU tensors (tensors are in CPU memory here)",
    "correlation_id": "sequence correlation ids on a BLS request (sequence batching)",
    "flags": "sequence flags on a BLS request (sequence batching)",
    "trace": "tracing BLS requests",
    "parameters": "response parameters",
}
#: model methods of Triton's that the server does not call, and what it does instead
_METHODS = {
    "is_ready": "the model's own readiness check (the model is ready once initialize returns)",
}


def unsupported_uses(source: str) -> list[str]:
    """``"pb_utils.load_model (line 12): why"`` for each unsupported use in ``source``."""
    tree = ast.parse(source)
    aliases = _aliases(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            found.extend(_attribute(node, aliases))
        elif isinstance(node, ast.Call):
            found.extend(_call(node, aliases))
    return found


def _attribute(node: ast.Attribute, aliases: set[str]) -> list[str]:
    """A name of the module that inferplex's lacks."""
    owner = node.value
    if not (isinstance(owner, ast.Name) and owner.id in aliases) or hasattr(triton, node.attr):
        return []
    why = triton.UNSUPPORTED.get(node.attr, "Triton's module has no such name")
    return [f"{owner.id}.{node.attr} (line {node.lineno}): {why}"]


def _call(node: ast.Call, aliases: set[str]) -> list[str]:
    """Calls of request methods inferplex lacks and keywords a pb_utils class or function
    does not take."""
    func = node.func
    if not isinstance(func, ast.Attribute):
        return []
    method = triton.UNSUPPORTED_METHODS.get(func.attr)
    if method is not None and not hasattr(triton.InferenceRequest, func.attr):
        return [f"request.{func.attr}() (line {node.lineno}): {method}"]
    owner = func.value
    target: Any = getattr(triton, func.attr, None)
    if not (isinstance(owner, ast.Name) and owner.id in aliases and callable(target)):
        return []
    try:
        taken = inspect.signature(target).parameters
    except ValueError:  # a built-in's (an exception class): it takes what Triton's takes
        return []
    return [
        f"{owner.id}.{func.attr}({k.arg}=...) (line {node.lineno}): "
        f"{_KEYWORDS.get(k.arg, 'a keyword inferplex does not take')}"
        for k in node.keywords
        if k.arg is not None and k.arg not in taken
    ]


def _aliases(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.asname or a.name for a in node.names if a.name in _MODULES)
        elif isinstance(node, ast.ImportFrom) and node.module == "inferplex.handler":
            names.update(a.asname or a.name for a in node.names if a.name == "triton")
    return names


def check(model_file: Path, handler_class: Any = None) -> None:
    """ImportError naming every unsupported use in ``model_file`` and every Triton method of
    a Triton-style ``handler_class`` the server would not call (a model that fails to load)."""
    found = unsupported_uses(model_file.read_text(encoding="utf-8"))
    if callable(getattr(handler_class, "execute", None)):
        found.extend(
            f"{handler_class.__name__}.{method}: {why}"
            for method, why in _METHODS.items()
            if callable(getattr(handler_class, method, None))
        )
    if found:
        raise ImportError(
            f"{model_file.name} uses what inferplex's triton_python_backend_utils does not "
            f"support: {'; '.join(found)}"
        )
