"""``inferplex optimize``: INT8 / FP16 / graph-optimised variants of ONNX models, measured
against their FP32 parent and promoted to a new version only when faster and accurate enough.

The Python API is :mod:`inferplex_tools.optimize.api` (``optimize``, ``OptimizeOptions``); this
package file stays empty so that the ``inferplex`` command does not import ONNX Runtime's
quantisation tools unless it optimises."""
