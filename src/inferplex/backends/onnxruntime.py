"""ONNX Runtime backend: one InferenceSession per model instance."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnxruntime as ort

from inferplex.backends.base import Backend, InstanceSpec
from inferplex.backends.ort_providers import check_started, session_providers
from inferplex.config.model_config import ModelConfig, TensorConfig
from inferplex.errors import ConfigError, InvalidInputError
from inferplex.security.encryption import model_source
from inferplex.threadprio import call_at_lower_priority

logger = logging.getLogger(__name__)

#: model parameter (ONNX Runtime's own session config key) that lets intra-op threads spin
SPINNING_PARAMETER = "session.intra_op.allow_spinning"

#: ONNX Runtime's tensor type strings -> V2 datatypes
_ORT_TO_V2 = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(string)": "BYTES",
}


class OnnxRuntimeBackend(Backend):
    names = ("onnxruntime",)
    platforms = ("onnxruntime_onnx",)
    default_model_filename = "model.onnx"

    def __init__(self, model_path: Path, config: ModelConfig, instance: InstanceSpec) -> None:
        options = session_options(instance.intra_op_threads, _spinning(config))
        providers = session_providers(config, instance, ort.get_available_providers())
        # The session creates its intra-op thread pool now, and threads inherit the nice value
        # of their creator: made in a thread at the model's priority, the pool runs at it too.
        self._session, reason = call_at_lower_priority(
            config.scheduling.nice if instance.intra_op_threads != 1 else 0,
            lambda: ort.InferenceSession(
                model_source(model_path), sess_options=options, providers=providers
            ),
        )
        if reason is not None:
            logger.warning(
                "model '%s': intra-op threads keep the server's priority: %s", config.name, reason
            )
        started = self._session.get_providers()
        check_started(config, providers, started)
        if providers != ["CPUExecutionProvider"]:
            logger.info("model '%s': ONNX Runtime runs it on %s", config.name, ", ".join(started))
        # on the CPU a run is plain computation; a GPU run also waits on the device
        self.runs_inline = started == ["CPUExecutionProvider"]
        _check_declared_inputs(config, self._session)
        self._string_inputs = {
            i.name for i in self._session.get_inputs() if i.type == "tensor(string)"
        }
        # inputs the config lets a request leave out but the graph needs (only graph inputs
        # with an initializer may be left out): a request without one gets a 400 naming it
        graph_inputs = {i.name for i in self._session.get_inputs()}
        self._needed_optional = frozenset(
            t.name for t in config.input if t.optional and t.name in graph_inputs
        )
        if self._needed_optional:
            logger.warning(
                "model '%s': input(s) %s are optional in the config but the ONNX graph needs "
                "them: requests without them will be refused",
                config.name,
                sorted(self._needed_optional),
            )
        self._run_options = ort.RunOptions()
        # The Python wrapper's run() re-checks the feeds (the engine validated them already):
        # ~40,000 instructions of GIL-holding Python per batch, as much as a small model's
        # whole run. Its only other service is falling back to CPU when a GPU provider fails,
        # so GPU sessions keep it.
        self._run = (
            self._session._sess.run if started == ["CPUExecutionProvider"] else self._session.run
        )

    def execute(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        if self._needed_optional and not self._needed_optional <= inputs.keys():
            missing = sorted(self._needed_optional - inputs.keys())
            raise InvalidInputError(
                f"input(s) {missing} missing: the config marks them optional, but the model's "
                "ONNX graph needs them"
            )
        feeds = inputs
        if self._string_inputs:
            # ORT takes strings as numpy str/object arrays of str, not bytes.
            feeds = dict(inputs)
            for name in self._string_inputs & feeds.keys():
                feeds[name] = _decode_strings(name, feeds[name])
        results = self._run(outputs, feeds, self._run_options)
        return dict(zip(outputs, results, strict=True))

    def close(self) -> None:
        # the run method holds the native session too: both go, so that its memory is
        # returned now, not when a garbage collection finds the unloaded version's objects
        del self._session, self._run

    @classmethod
    def gpu_available(cls) -> bool:
        return "CUDAExecutionProvider" in ort.get_available_providers()

    @classmethod
    def signature(cls, model_path: Path) -> tuple[list[TensorConfig], list[TensorConfig]]:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        # Reading the signature needs no optimisation and no thread pool. Made beside serving
        # (a reload), a session with a pool holds the GIL while its threads start and stop:
        # ~4 ms of a stalled event loop per load on 2 cores, against ~0.1 ms without one.
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(
            model_source(model_path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        return (
            [_tensor_config(t) for t in session.get_inputs()],
            [_tensor_config(t) for t in session.get_outputs()],
        )


def _check_declared_inputs(config: ModelConfig, session: ort.InferenceSession) -> None:
    """ConfigError, as Triton's onnxruntime backend refuses the load, for a config that does
    not declare an input the graph needs or declares one the graph does not have: a config
    taken as written (no auto-complete) would otherwise load and fail every request. The
    control and state inputs of a sequence model are the server's and need no declaring."""
    needed = [i.name for i in session.get_inputs()]
    known = {*needed, *(i.name for i in session.get_overridable_initializers())}
    sequences = config.sequence_batching
    filled = sequences.server_inputs if sequences is not None else frozenset()
    declared = {t.name for t in config.input} | filled
    unknown = [t.name for t in config.input if t.name not in known]
    if unknown:
        raise ConfigError(
            f"unable to load model '{config.name}': unexpected inference input "
            f"'{unknown[0]}', allowed inputs are: {', '.join(sorted(known))}"
        )
    missing = [name for name in needed if name not in declared]
    if missing:
        expected = len(config.input) + len(filled)
        raise ConfigError(
            f"unable to load model '{config.name}', configuration expects {expected} inputs, "
            f"model provides {len(needed)}: the config does not declare "
            f"{', '.join(repr(n) for n in missing)}, which the ONNX graph needs"
        )


def session_options(intra_op_threads: int, spinning: str = "0") -> ort.SessionOptions:
    """The options of the server's sessions (the benchmarks' in-process sessions use them
    too): ``spinning`` "1" lets idle intra-op threads spin-wait for the next run."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    # Parallelism across requests comes from instances, not from inter-op threads.
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    options.add_session_config_entry(SPINNING_PARAMETER, spinning)
    return options


def _spinning(config: ModelConfig) -> str:
    """Whether idle intra-op threads spin-wait for the next run: off unless the model's
    parameters turn it on. Between the short batches of a server, spinning threads burn the
    cores the event loop and the other models need."""
    value = config.parameters.get(SPINNING_PARAMETER, "0")
    if value not in ("0", "1"):
        raise ConfigError(
            f"model '{config.name}': parameter {SPINNING_PARAMETER} must be 0 or 1, got '{value}'"
        )
    return value


def _decode_strings(name: str, array: np.ndarray) -> np.ndarray:
    out = np.empty(array.shape, dtype=object)
    for index, item in np.ndenumerate(array):
        try:
            out[index] = item.decode("utf-8") if isinstance(item, bytes) else item
        except UnicodeDecodeError:
            raise InvalidInputError(
                f"input '{name}': element {list(index)} is not UTF-8; ONNX Runtime string "
                "tensors hold UTF-8 text"
            ) from None
    return out


def _tensor_config(node: ort.NodeArg) -> TensorConfig:
    try:
        datatype = _ORT_TO_V2[node.type]
    except KeyError:
        raise ConfigError(f"tensor '{node.name}' has type {node.type}, not served") from None
    dims = tuple(d if isinstance(d, int) and d > 0 else -1 for d in node.shape)
    return TensorConfig(name=node.name, data_type=datatype, dims=dims)
