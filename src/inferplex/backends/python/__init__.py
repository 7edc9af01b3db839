"""The Python backend (``backend: "python"``, ``<model>/<version>/model.py``): ``backend.py``
is the server's side; ``worker.py`` (with ``runner.py``, and ``backends/worker/``'s arena and
cancel board) is the worker process that runs the user's handler. What a model.py imports is
``inferplex.handler``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inferplex.backends.python.backend import PythonBackend

__all__ = ["PythonBackend"]


def __getattr__(name: str) -> Any:
    # Imported on first use: the worker process (python -m inferplex.backends.python.worker)
    # imports this package and must not load the server's side of the backend.
    if name == "PythonBackend":
        return importlib.import_module("inferplex.backends.python.backend").PythonBackend
    raise AttributeError(f"module 'inferplex.backends.python' has no attribute '{name}'")
