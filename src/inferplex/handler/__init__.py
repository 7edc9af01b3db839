"""What a Python model (``<model>/<version>/model.py``) imports.

TorchServe style::

    from inferplex.handler import BaseHandler

    class Handler(BaseHandler):
        def inference(self, data):          # {input name: batch array}
            return {"OUTPUT0": data["INPUT0"] * 2}

Triton python-backend style: ``from inferplex.handler import triton as pb_utils``.
Calling another served model from either: ``inferplex.handler.infer(name, inputs)``.
See docs/python_backend.md.
"""

from inferplex.handler.base import BaseHandler, Context
from inferplex.handler.bls import ModelCallError, infer

__all__ = ["BaseHandler", "Context", "ModelCallError", "infer"]
