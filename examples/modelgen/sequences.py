"""Stateful models for the sequence batcher (Triton's ``sequence_batching``), each written
with its config.pbtxt: the server feeds their control inputs and their state."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import helper

from examples.modelgen.onnxfile import save, value_info

#: Triton's simple_sequence config (its docs' example repository), field for field
SIMPLE_SEQUENCE_CONFIG = """\
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {{
  control_input [
    {{ name: "START" control [ {{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "READY" control [ {{ kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] }} ] }}
  ]
}}
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU }} ]
"""

ACCUMULATOR_CONFIG = """\
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {{
  max_sequence_idle_microseconds: {idle_us}
  {strategy}
  control_input [
    {{ name: "START" control [ {{ kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "END" control [ {{ kind: CONTROL_SEQUENCE_END bool_false_true: [ false, true ] }} ] }},
    {{ name: "CORRID" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: {corrid} }} ] }}
  ]
  state [
    {{
      input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32 dims: [ 1 ]
      initial_state {{ name: "zeros" data_type: TYPE_FP32 dims: [ 1 ] zero_data: true }}
    }}
  ]
}}
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [
  {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] }},
  {{ name: "CORRID_OUT" data_type: {corrid} dims: [ 1 ] }},
  {{ name: "END_OUT" data_type: TYPE_BOOL dims: [ 1 ] }}
]
instance_group [ {{ kind: KIND_CPU count: {instances} }} ]
"""


def simple_sequence(repo: Path, name: str = "simple_sequence") -> Path:
    """What Triton's simple_sequence answers: OUTPUT = (INPUT + START) * READY, all INT32
    ``[-1, 1]`` (the first request of a sequence gets its value plus one)."""
    shape = ["batch", 1]
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT", "START"], ["SUM"]),
            helper.make_node("Mul", ["SUM", "READY"], ["OUTPUT"]),
        ],
        name,
        [value_info(n, "INT32", shape) for n in ("INPUT", "START", "READY")],
        [value_info("OUTPUT", "INT32", shape)],
    )
    path = save(graph, repo, name, 1)
    (Path(repo) / name / "config.pbtxt").write_text(SIMPLE_SEQUENCE_CONFIG.format(name=name))
    return path


def accumulator(
    repo: Path,
    name: str = "accumulator",
    *,
    strategy: str = "direct { }",
    corrid: str = "TYPE_UINT64",
    idle_us: int = 5_000_000,
    instances: int = 1,
) -> Path:
    """A running sum kept as implicit state: STATE_OUT = STATE_IN * (1 - START) + INPUT,
    answered as OUTPUT (FP32 ``[-1, 1]``); CORRID_OUT and END_OUT echo the correlation id
    and end controls the server fed."""
    shape = ["batch", 1]
    corrid_type = corrid.removeprefix("TYPE_").replace("STRING", "BYTES")
    graph = helper.make_graph(
        [
            helper.make_node("Sub", ["ONE", "START"], ["KEEP"]),
            helper.make_node("Mul", ["STATE_IN", "KEEP"], ["KEPT"]),
            helper.make_node("Add", ["KEPT", "INPUT"], ["STATE_OUT"]),
            helper.make_node("Identity", ["STATE_OUT"], ["OUTPUT"]),
            helper.make_node("Identity", ["CORRID"], ["CORRID_OUT"]),
            helper.make_node("Identity", ["END"], ["END_OUT"]),
        ],
        name,
        [
            value_info("INPUT", "FP32", shape),
            value_info("STATE_IN", "FP32", shape),
            value_info("START", "FP32", shape),
            value_info("END", "BOOL", shape),
            value_info("CORRID", corrid_type, shape),
        ],
        [
            value_info("OUTPUT", "FP32", shape),
            value_info("STATE_OUT", "FP32", shape),
            value_info("CORRID_OUT", corrid_type, shape),
            value_info("END_OUT", "BOOL", shape),
        ],
        initializer=[helper.make_tensor("ONE", 1, [], [1.0])],  # 1: FLOAT
    )
    path = save(graph, repo, name, 1)
    config = ACCUMULATOR_CONFIG.format(
        name=name, strategy=strategy, corrid=corrid, idle_us=idle_us, instances=instances
    )
    (Path(repo) / name / "config.pbtxt").write_text(config)
    return path


PYTHON_SUM_MODEL = """\
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            key = request.correlation_id()
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy()
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            if start[0][0]:
                self.sums[key] = 0
            self.sums[key] += int(value[0][0])
            total = self.sums[key]
            if request.flags() & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END:
                del self.sums[key]
            out = pb_utils.Tensor("OUTPUT", np.array([[total]], dtype=np.int32))
            pid = pb_utils.Tensor("INSTANCE", np.array([[os.getpid()]], dtype=np.int64))
            responses.append(pb_utils.InferenceResponse([out, pid]))
        return responses
"""

PYTHON_SUM_CONFIG = """\
backend: "python"
max_batch_size: 4
sequence_batching {
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] }
  ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "INSTANCE" data_type: TYPE_INT64 dims: [ 1 ] }
]
instance_group [ { kind: KIND_CPU count: {instances} } ]
"""


def python_sum(repo: Path, name: str = "python_sum", instances: int = 1) -> Path:
    """A Triton-style Python model keeping a running INT32 sum per correlation id in its own
    memory (``request.correlation_id()``, ``flags()``, the START control input); INSTANCE
    answers the process id of the instance that ran the request."""
    path = Path(repo) / name / "1" / "model.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(PYTHON_SUM_MODEL)
    config = PYTHON_SUM_CONFIG.replace("{instances}", str(instances))
    (Path(repo) / name / "config.pbtxt").write_text(config)
    return path


SEEDED_SUM_CONFIG = """\
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 4
sequence_batching {{
  state [
    {{
      input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32 dims: [ 2 ]
      initial_state {{ name: "seed" data_type: TYPE_FP32 dims: [ 2 ] data_file: "seed.bin" }}
    }}
  ]
}}
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ 2 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ 2 ] }} ]
"""


def seeded_sum(repo: Path, seed: tuple[float, float], name: str = "seeded_sum") -> Path:
    """A running sum of FP32 ``[-1, 2]`` inputs kept as implicit state that starts from
    ``seed``, read from the data file ``initial_state/seed.bin`` (Triton's layout):
    OUTPUT = STATE_OUT = STATE_IN + INPUT."""
    shape = ["batch", 2]
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["STATE_IN", "INPUT"], ["STATE_OUT"]),
            helper.make_node("Identity", ["STATE_OUT"], ["OUTPUT"]),
        ],
        name,
        [value_info("INPUT", "FP32", shape), value_info("STATE_IN", "FP32", shape)],
        [value_info("OUTPUT", "FP32", shape), value_info("STATE_OUT", "FP32", shape)],
    )
    path = save(graph, repo, name, 1)
    folder = Path(repo) / name / "initial_state"
    folder.mkdir(exist_ok=True)
    (folder / "seed.bin").write_bytes(np.array(seed, dtype="<f4").tobytes())
    (Path(repo) / name / "config.pbtxt").write_text(SEEDED_SUM_CONFIG.format(name=name))
    return path
