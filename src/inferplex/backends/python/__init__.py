"""The Python backend (``backend: "python"``, ``<model>/<version>/model.py``)."""

from inferplex.backends.python.backend import PythonBackend

__all__ = ["PythonBackend"]
