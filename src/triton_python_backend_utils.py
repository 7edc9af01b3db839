"""Triton's ``triton_python_backend_utils``, so that a Triton Python model's
``import triton_python_backend_utils as pb_utils`` works unchanged, in the server's workers
and anywhere inferplex is installed: importing it gives ``inferplex.handler.triton`` itself
(one module under both names: the same classes, nothing to keep in step).
See docs/python_backend.md for what it has of Triton's.
"""

import sys

from inferplex.handler import triton

sys.modules[__name__] = triton
