"""What a Python model (``<model>/<version>/model.py``) imports.

TorchServe style::

    from inferplex.handler import BaseHandler

    class Handler(BaseHandler):
        def inference(self, data):          # {input name: batch array}
            return {"OUTPUT0": data["INPUT0"] * 2}

Triton python-backend style: ``import triton_python_backend_utils as pb_utils`` (the same
module as ``inferplex.handler.triton``). Calling another served model from either:
``inferplex.handler.infer(name, inputs)``, or ``await infer_async(name, inputs)`` in a
coroutine; ``infer_stream(name, inputs)`` reads a decoupled model's responses as they come.
See docs/python_backend.md.
"""

from inferplex.handler.base import BaseHandler, Context
from inferplex.handler.bls import (
    ModelCallError,
    Streamed,
    infer,
    infer_async,
    infer_stream,
    infer_stream_async,
)

__all__ = [
    "BaseHandler",
    "Context",
    "ModelCallError",
    "Streamed",
    "infer",
    "infer_async",
    "infer_stream",
    "infer_stream_async",
]
