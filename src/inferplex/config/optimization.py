"""The ``optimization`` section of a model config (Triton's ``ModelOptimizationPolicy``).

Only ``execution_accelerators`` is honoured: which ONNX Runtime execution providers a
session runs on, for GPU instances (``gpu_execution_accelerator``: ``tensorrt``, ``cuda``)
and CPU instances (``cpu_execution_accelerator``: ``openvino``), in the order given::

    optimization { execution_accelerators {
      gpu_execution_accelerator [ { name: "tensorrt"
                                    parameters { key: "precision_mode" value: "FP16" } } ]
      cpu_execution_accelerator [ { name: "openvino" } ]
    } }

The other fields of Triton's message (``graph``, ``priority``, ``cuda``, pinned memory, ...)
are listed as not supported when the config is read. How names and parameters become
provider options is the ONNX Runtime backend's (``backends/onnxruntime.py``).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from inferplex.config.sections import Section as _Section


class Accelerator(_Section):
    """One execution accelerator: its name and its parameters (strings, as in Triton)."""

    name: str = Field(min_length=1)
    parameters: dict[str, str] = Field(default_factory=dict)


class ExecutionAccelerators(_Section):
    gpu_execution_accelerator: tuple[Accelerator, ...] = ()
    cpu_execution_accelerator: tuple[Accelerator, ...] = ()


class Optimization(_Section):
    execution_accelerators: ExecutionAccelerators = ExecutionAccelerators()

    def to_triton_dict(self) -> dict[str, Any]:
        """The accelerators given (an empty section would be a field the file did not set:
        the served config is the file's, field for field)."""
        accelerators = self.execution_accelerators
        given = {
            kind: [{"name": a.name, "parameters": dict(a.parameters)} for a in group]
            for kind, group in (
                ("gpu_execution_accelerator", accelerators.gpu_execution_accelerator),
                ("cpu_execution_accelerator", accelerators.cpu_execution_accelerator),
            )
            if group
        }
        return {"execution_accelerators": given} if given else {}
