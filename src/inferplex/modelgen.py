"""Small ONNX models built with ``onnx.helper``, for the examples, the benchmarks and the tests.

Every builder writes ``<repo>/<name>/<version>/model.onnx`` (overwriting an older file, so
building twice is harmless) and returns that path. The configuration is written separately by
the caller: :func:`model_config` reads the model file's own signature and renders a
Triton-style config dict that always matches it, which :func:`write_config` saves as
``config.pbtxt`` or ``config.yaml``::

    path = modelgen.add_sub(repo)
    config = modelgen.model_config(path, max_batch_size=8, dynamic_batching=True)
    modelgen.write_config(repo / "add_sub", config)

No torch, no network: the only trained model (:func:`digits_mlp`) is fitted with scikit-learn
on the digits data set bundled with it, and its weights are written out by hand.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from inferplex.core.datatypes import V2_TO_TRITON

#: ONNX opset and IR version of every model here: old enough for onnxruntime >= 1.17.
OPSET = 17
IR_VERSION = 8
MODEL_FILENAME = "model.onnx"
PLATFORM = "onnxruntime_onnx"

#: V2 datatype -> ONNX element type (BYTES is ONNX's string tensor).
V2_TO_ONNX: dict[str, int] = {
    "BOOL": TensorProto.BOOL,
    "UINT8": TensorProto.UINT8,
    "UINT16": TensorProto.UINT16,
    "UINT32": TensorProto.UINT32,
    "UINT64": TensorProto.UINT64,
    "INT8": TensorProto.INT8,
    "INT16": TensorProto.INT16,
    "INT32": TensorProto.INT32,
    "INT64": TensorProto.INT64,
    "FP16": TensorProto.FLOAT16,
    "FP32": TensorProto.FLOAT,
    "FP64": TensorProto.DOUBLE,
    "BYTES": TensorProto.STRING,
}
ONNX_TO_V2: dict[int, str] = {v: k for k, v in V2_TO_ONNX.items()}

Dims = Sequence[int | str]


# --------------------------------------------------------------------------- builders


def add_sub(
    repo: Path, name: str = "add_sub", version: int = 1, dtype: str = "FP32", dims: int = 16
) -> Path:
    """INPUT0, INPUT1 ``[-1, dims]`` -> OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1."""
    shape: list[int | str] = ["batch", dims]
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        name,
        [_value("INPUT0", dtype, shape), _value("INPUT1", dtype, shape)],
        [_value("OUTPUT0", dtype, shape), _value("OUTPUT1", dtype, shape)],
    )
    return _save(graph, repo, name, version)


def identity(repo: Path, datatype: str, name: str = "", version: int = 1) -> Path:
    """INPUT0 ``[-1, -1]`` -> OUTPUT0, unchanged, for any V2 datatype.

    The name defaults to ``identity_<datatype>`` in lower case (``identity_fp32``).
    ONNX Runtime's Identity kernel covers every V2 datatype including strings (checked by
    the unit tests), so no other op is needed.
    """
    name = name or f"identity_{datatype.lower()}"
    shape = ["batch", "n"]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        name,
        [_value("INPUT0", datatype, shape)],
        [_value("OUTPUT0", datatype, shape)],
    )
    return _save(graph, repo, name, version)


def scale(
    repo: Path, name: str = "scale", version: int = 1, factor: float = 2.0, dims: Dims = ("n",)
) -> Path:
    """INPUT0 FP32 ``[-1, *dims]`` -> OUTPUT0 = INPUT0 * ``factor``: models that answer
    differently with the same signature (cascades, routing, fallbacks in the tests)."""
    shape = ["batch", *dims]
    graph = helper.make_graph(
        [helper.make_node("Mul", ["INPUT0", "factor"], ["OUTPUT0"])],
        name,
        [_value("INPUT0", "FP32", shape)],
        [_value("OUTPUT0", "FP32", shape)],
        [_const("factor", np.array(factor, dtype=np.float32))],
    )
    return _save(graph, repo, name, version)


def reshape(repo: Path, name: str = "reshape", version: int = 1) -> Path:
    """INPUT0 FP32 ``[-1]``, SHAPE INT64 ``[1]`` -> OUTPUT0 = INPUT0 reshaped to SHAPE.

    A model that fails on demand, inside ONNX Runtime: a SHAPE that does not match INPUT0's
    element count passes request validation and fails at execution (circuit breaker tests).
    """
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["INPUT0", "SHAPE"], ["OUTPUT0"])],
        name,
        [_value("INPUT0", "FP32", ["n"]), _value("SHAPE", "INT64", [1])],
        [_value("OUTPUT0", "FP32", ["m"])],
    )
    return _save(graph, repo, name, version)


@dataclass(frozen=True)
class TrainedModel:
    """A model file and its held-out accuracy, in scikit-learn and in ONNX Runtime."""

    path: Path
    sklearn_accuracy: float
    onnx_accuracy: float


def digits_mlp(
    repo: Path,
    name: str = "digits_mlp",
    version: int = 1,
    seed: int = 0,
    epochs: int = 1000,
    hidden: Sequence[int] = (64,),
) -> TrainedModel:
    """An MLP trained on scikit-learn's bundled 8x8 digits, exported to ONNX by hand.

    ``pixels`` FP32 ``[-1, 64]`` (raw pixel values 0..16, scaled inside the graph) ->
    ``probabilities`` FP32 ``[-1, 10]`` and ``label`` INT64 ``[-1]``. A quarter of the data is
    held out; the accuracies of both scikit-learn and the exported model on it are returned
    and their predictions must agree, which checks the export. ``epochs`` bounds the training:
    a few give a rougher model in a fraction of the time (tests that need only its shape).
    ``hidden`` are the widths of the hidden layers (wider and deeper: costlier per row).
    """
    import warnings

    from sklearn.datasets import load_digits
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.model_selection import train_test_split
    from sklearn.neural_network import MLPClassifier

    features, labels = load_digits(return_X_y=True)
    features = features.astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(
        features, labels, test_size=0.25, random_state=seed, stratify=labels
    )
    classifier = MLPClassifier(hidden_layer_sizes=tuple(hidden), max_iter=epochs, random_state=seed)
    with warnings.catch_warnings():
        # stopping after ``epochs`` when asked to is not worth a warning
        warnings.simplefilter("ignore", ConvergenceWarning)
        classifier.fit(x_train / _DIGITS_SCALE, y_train)
    # The argmax index is the label only because the classes are exactly 0..9.
    if not np.array_equal(classifier.classes_, np.arange(10)):
        raise ValueError(f"unexpected digit classes {classifier.classes_}")
    sklearn_predictions = classifier.predict(x_test / _DIGITS_SCALE)

    path = _save(_mlp_graph(name, classifier), repo, name, version)
    probabilities, onnx_predictions = _session(path).run(None, {"pixels": x_test})
    if not np.array_equal(onnx_predictions, sklearn_predictions):
        mismatches = int(np.sum(onnx_predictions != sklearn_predictions))
        raise RuntimeError(f"ONNX export of {name} disagrees with scikit-learn on {mismatches}")
    if not np.allclose(probabilities, classifier.predict_proba(x_test / _DIGITS_SCALE), atol=1e-4):
        raise RuntimeError(f"ONNX export of {name}: probabilities differ from scikit-learn")
    return TrainedModel(
        path=path,
        sklearn_accuracy=float(np.mean(sklearn_predictions == y_test)),
        onnx_accuracy=float(np.mean(onnx_predictions == y_test)),
    )


_DIGITS_SCALE = np.float32(16.0)


def _mlp_graph(name: str, classifier: Any) -> onnx.GraphProto:
    """MatMul/Add per layer, ReLU between layers, Softmax and ArgMax at the end."""
    if classifier.activation != "relu":
        raise ValueError(f"only relu hidden layers are exported, not {classifier.activation}")
    initializers = [_const("scale", np.array(1.0 / _DIGITS_SCALE, dtype=np.float32))]
    nodes = [helper.make_node("Mul", ["pixels", "scale"], ["h0"])]
    layers = list(zip(classifier.coefs_, classifier.intercepts_, strict=True))
    current = "h0"
    for i, (weights, bias) in enumerate(layers):
        initializers += [
            _const(f"w{i}", weights.astype(np.float32)),
            _const(f"b{i}", bias.astype(np.float32)),
        ]
        nodes += [
            helper.make_node("MatMul", [current, f"w{i}"], [f"mm{i}"]),
            helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"z{i}"]),
        ]
        current = f"z{i}"
        if i < len(layers) - 1:
            nodes.append(helper.make_node("Relu", [current], [f"h{i + 1}"]))
            current = f"h{i + 1}"
    nodes += [
        helper.make_node("Softmax", [current], ["probabilities"], axis=-1),
        helper.make_node("ArgMax", [current], ["label"], axis=1, keepdims=0),
    ]
    return helper.make_graph(
        nodes,
        name,
        [_value("pixels", "FP32", ["batch", 64])],
        [_value("probabilities", "FP32", ["batch", 10]), _value("label", "INT64", ["batch"])],
        initializers,
    )


def small_cnn(
    repo: Path,
    name: str = "small_cnn",
    version: int = 1,
    image_size: int = 224,
    widths: Sequence[int] = (32, 64, 160, 160),
    seed: int = 0,
) -> Path:
    """A small image classifier with fixed, seeded random weights.

    ``image`` FP32 ``[-1, 3, image_size, image_size]`` -> ``logits`` FP32 ``[-1, 10]``:
    per width a 3x3 Conv + Relu + 2x2 MaxPool, then GlobalAveragePool, Flatten and Gemm.
    With the defaults one image takes about 10 ms in ONNX Runtime with 2 threads on the
    2-core development machine: heavy enough to be compute-bound when served.
    """
    rng = np.random.default_rng(seed)
    initializers: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    current, channels = "image", 3
    for i, width in enumerate(widths):
        # He initialisation keeps the activations in range through the ReLUs.
        std = np.sqrt(2.0 / (channels * 9))
        initializers += [
            _const(f"conv{i}_w", (rng.standard_normal((width, channels, 3, 3)) * std)),
            _const(f"conv{i}_b", np.zeros(width)),
        ]
        nodes += [
            helper.make_node(
                "Conv", [current, f"conv{i}_w", f"conv{i}_b"], [f"conv{i}"], pads=[1, 1, 1, 1]
            ),
            helper.make_node("Relu", [f"conv{i}"], [f"relu{i}"]),
            helper.make_node(
                "MaxPool", [f"relu{i}"], [f"pool{i}"], kernel_shape=[2, 2], strides=[2, 2]
            ),
        ]
        current, channels = f"pool{i}", width
    initializers += [
        _const("fc_w", rng.standard_normal((channels, 10)) * np.sqrt(1.0 / channels)),
        _const("fc_b", np.zeros(10)),
    ]
    nodes += [
        helper.make_node("GlobalAveragePool", [current], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["features"]),
        helper.make_node("Gemm", ["features", "fc_w", "fc_b"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        name,
        [_value("image", "FP32", ["batch", 3, image_size, image_size])],
        [_value("logits", "FP32", ["batch", 10])],
        initializers,
    )
    return _save(graph, repo, name, version)


def crop_net(
    repo: Path,
    name: str = "crop_net",
    version: int = 1,
    image_size: int = 128,
    crop_size: int = 64,
    widths: Sequence[int] = (16, 16),
    seed: int = 0,
) -> Path:
    """An image-to-image stand-in (e.g. a face detector that hands a face crop on) with fixed,
    seeded random weights.

    ``image`` FP32 ``[-1, 3, image_size, image_size]`` -> ``crop`` FP32
    ``[-1, 3, crop_size, crop_size]``: per width a 3x3 Conv + Relu at full resolution, then a
    MaxPool down to ``crop_size``, a 1x1 Conv back to 3 channels and a Sigmoid (values in
    0..1, like an image). ``image_size`` must be a multiple of ``crop_size``.
    """
    if image_size % crop_size:
        raise ValueError(f"image_size {image_size} is not a multiple of crop_size {crop_size}")
    rng = np.random.default_rng(seed)
    initializers: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    current, channels = "image", 3
    for i, width in enumerate(widths):
        std = np.sqrt(2.0 / (channels * 9))  # He initialisation, as in small_cnn
        initializers += [
            _const(f"conv{i}_w", rng.standard_normal((width, channels, 3, 3)) * std),
            _const(f"conv{i}_b", np.zeros(width)),
        ]
        nodes += [
            helper.make_node(
                "Conv", [current, f"conv{i}_w", f"conv{i}_b"], [f"conv{i}"], pads=[1, 1, 1, 1]
            ),
            helper.make_node("Relu", [f"conv{i}"], [f"relu{i}"]),
        ]
        current, channels = f"relu{i}", width
    factor = image_size // crop_size
    initializers += [
        _const("out_w", rng.standard_normal((3, channels, 1, 1)) * np.sqrt(1.0 / channels)),
        _const("out_b", np.zeros(3)),
    ]
    nodes += [
        helper.make_node(
            "MaxPool", [current], ["pooled"], kernel_shape=[factor] * 2, strides=[factor] * 2
        ),
        helper.make_node("Conv", ["pooled", "out_w", "out_b"], ["projected"]),
        helper.make_node("Sigmoid", ["projected"], ["crop"]),
    ]
    graph = helper.make_graph(
        nodes,
        name,
        [_value("image", "FP32", ["batch", 3, image_size, image_size])],
        [_value("crop", "FP32", ["batch", 3, crop_size, crop_size])],
        initializers,
    )
    return _save(graph, repo, name, version)


def mlp(
    repo: Path,
    name: str = "mlp",
    version: int = 1,
    features: int = 64,
    hidden: Sequence[int] = (64,) * 72,
    classes: int = 10,
    seed: int = 0,
) -> Path:
    """A multi-layer perceptron with fixed, seeded random weights.

    ``features`` FP32 ``[-1, features]`` -> ``logits`` FP32 ``[-1, classes]``: one Gemm + Relu
    per ``hidden`` width, then a Gemm to ``classes``. The defaults (72 hidden layers of 64) are
    deep and narrow on purpose: at batch 1 each layer costs about a microsecond of kernel
    dispatch, which a batch shares, so one row takes about 0.1 ms in ONNX Runtime (one thread,
    2-core development machine) and a row in a batch of 32 about 9x less: the model of
    ``bench/batching.py``, where dynamic batching pays.
    """
    rng = np.random.default_rng(seed)
    initializers: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    current, width = "features", features
    for i, out in enumerate([*hidden, classes]):
        # He initialisation keeps the activations in range through the ReLUs.
        initializers += [
            _const(f"fc{i}_w", rng.standard_normal((width, out)) * np.sqrt(2.0 / width)),
            _const(f"fc{i}_b", rng.standard_normal(out) * 0.1),
        ]
        last = i == len(hidden)
        gemm = "logits" if last else f"fc{i}"
        nodes.append(helper.make_node("Gemm", [current, f"fc{i}_w", f"fc{i}_b"], [gemm]))
        if not last:
            nodes.append(helper.make_node("Relu", [gemm], [f"relu{i}"]))
            current = f"relu{i}"
        width = out
    graph = helper.make_graph(
        nodes,
        name,
        [_value("features", "FP32", ["batch", features])],
        [_value("logits", "FP32", ["batch", classes])],
        initializers,
    )
    return _save(graph, repo, name, version)


def slow(repo: Path, name: str = "slow", version: int = 1, seconds: float = 1.0) -> Path:
    """INPUT0 FP32 ``[-1]`` -> OUTPUT0, unchanged, but each call takes about ``seconds``.

    The delay is a Loop of small matrix products whose result is carried alongside the input,
    so ONNX Runtime can neither fold nor prune it. The products are too small for ONNX
    Runtime to spread over threads, so the time does not depend on the session's thread
    count. The trip count is calibrated on this machine when the model is built.
    """
    probe_trips = 10_000
    path = _save(_slow_graph(name, probe_trips), repo, name, version)
    session = _session(path)
    feed = {"INPUT0": np.zeros(1, dtype=np.float32)}
    session.run(None, feed)
    elapsed = min(_timed(session.run, None, feed) for _ in range(3))
    trips = max(1, round(probe_trips * seconds / elapsed))
    return _save(_slow_graph(name, trips), repo, name, version)


def _slow_graph(name: str, trips: int) -> onnx.GraphProto:
    size = 32
    rng = np.random.default_rng(0)
    # An orthogonal matrix and tanh keep the carried state finite for any trip count.
    weights = np.linalg.qr(rng.standard_normal((size, size)))[0]
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Identity", ["x_in"], ["x_out"]),
            helper.make_node("MatMul", ["state_in", "weights"], ["product"]),
            helper.make_node("Tanh", ["product"], ["state_out"]),
        ],
        f"{name}_body",
        [
            _value("iteration", "INT64", []),
            _value("cond_in", "BOOL", []),
            _value("x_in", "FP32", ["n"]),
            _value("state_in", "FP32", [size, size]),
        ],
        [
            _value("cond_out", "BOOL", []),
            _value("x_out", "FP32", ["n"]),
            _value("state_out", "FP32", [size, size]),
        ],
    )
    return helper.make_graph(
        [
            helper.make_node(
                "Loop", ["trips", "", "INPUT0", "weights"], ["OUTPUT0", "state"], body=body
            )
        ],
        name,
        [_value("INPUT0", "FP32", ["n"])],
        [_value("OUTPUT0", "FP32", ["n"])],
        [_const("trips", np.array(trips, dtype=np.int64)), _const("weights", weights)],
    )


# --------------------------------------------------------------------------- configs


@dataclass(frozen=True)
class TensorSpec:
    """A tensor as the model file declares it: V2 datatype and full shape (-1 = variable)."""

    name: str
    datatype: str
    shape: tuple[int, ...]


def signature(model_path: Path) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The inputs and outputs an ONNX file declares, batch dimension included."""
    graph = onnx.load(str(model_path), load_external_data=False).graph
    initializers = {t.name for t in graph.initializer}

    def spec(value: onnx.ValueInfoProto) -> TensorSpec:
        tensor_type = value.type.tensor_type
        shape = tuple(d.dim_value if d.dim_value > 0 else -1 for d in tensor_type.shape.dim)
        return TensorSpec(value.name, ONNX_TO_V2[tensor_type.elem_type], shape)

    inputs = [spec(v) for v in graph.input if v.name not in initializers]
    return inputs, [spec(v) for v in graph.output]


def model_config(
    model_path: Path,
    *,
    name: str = "",
    max_batch_size: int = 0,
    instance_kind: str = "",
    instance_count: int = 1,
    dynamic_batching: bool = False,
) -> dict[str, Any]:
    """A Triton-style config dict (Triton's field names) matching the model file.

    ``name`` defaults to the model folder (``<repo>/<name>/<version>/model.onnx``). With
    ``max_batch_size > 0`` the first dimension of every tensor is the batch dimension and
    is left out of ``dims``, as Triton does; it must be variable (-1) in the model. A tensor
    with nothing left (one value per batch item) gets Triton's ``dims: [1]`` and
    ``reshape: { shape: [] }``.
    """
    name = name or model_path.parent.parent.name
    inputs, outputs = signature(model_path)

    def tensor(spec: TensorSpec) -> dict[str, Any]:
        dims = spec.shape
        if max_batch_size > 0:
            if not dims or dims[0] != -1:
                raise ValueError(
                    f"{name}: tensor '{spec.name}' has shape {list(dims)}; batching needs a "
                    "variable (-1) first dimension"
                )
            dims = dims[1:]
        out: dict[str, Any] = {
            "name": spec.name,
            "data_type": V2_TO_TRITON[spec.datatype],
            "dims": list(dims),
        }
        if not dims:
            # Triton wants non-empty dims: one value per batch item is dims [1] reshaped to [].
            out.update(dims=[1], reshape={"shape": []})
        return out

    config: dict[str, Any] = {
        "name": name,
        "platform": PLATFORM,
        "max_batch_size": max_batch_size,
        "input": [tensor(t) for t in inputs],
        "output": [tensor(t) for t in outputs],
    }
    if instance_kind:
        config["instance_group"] = [{"kind": instance_kind, "count": instance_count}]
    if dynamic_batching:
        config["dynamic_batching"] = {}
    return config


#: Fields whose values are protobuf enums, written without quotes in text format.
_ENUM_FIELDS = frozenset({"data_type", "kind", "format", "timeout_action"})
#: Triton's map fields: a mapping given for one is written as the protobuf text format's
#: repeated ``{ key: .. value: .. }`` entries (the YAML form keeps the mapping)
_MAP_FIELDS = frozenset(
    {"parameters", "priority_queue_policy", "input_map", "output_map", "inputs"}
)


def to_pbtxt(config: Mapping[str, Any]) -> str:
    """Render a config dict in protobuf text format, as Triton's ``config.pbtxt``."""
    return "\n".join(_pbtxt_lines(config, "")) + "\n"


def _pbtxt_lines(message: Mapping[str, Any], indent: str) -> list[str]:
    lines: list[str] = []
    for key, value in message.items():
        if key in _MAP_FIELDS and isinstance(value, Mapping) and not _map_entry(value):
            value = [{"key": k, "value": v} for k, v in value.items()]
        if isinstance(value, Mapping):
            if value:
                lines += [f"{indent}{key} {{", *_pbtxt_lines(value, indent + "  "), f"{indent}}}"]
            else:
                lines.append(f"{indent}{key} {{ }}")
        elif isinstance(value, list) and value and isinstance(value[0], Mapping):
            lines.append(f"{indent}{key} [")
            for i, item in enumerate(value):
                closing = "}," if i < len(value) - 1 else "}"
                lines += [
                    f"{indent}  {{",
                    *_pbtxt_lines(item, indent + "    "),
                    indent + "  " + closing,
                ]
            lines.append(f"{indent}]")
        elif isinstance(value, list):
            items = ", ".join(_pbtxt_scalar(key, v) for v in value)
            lines.append(f"{indent}{key}: [ {items} ]" if items else f"{indent}{key}: [ ]")
        else:
            lines.append(f"{indent}{key}: {_pbtxt_scalar(key, value)}")
    return lines


def _map_entry(value: Mapping[str, Any]) -> bool:
    """Whether a map field's mapping is one entry already (``{key: .., value: ..}``)."""
    return "key" in value and set(value) <= {"key", "value"}


def _pbtxt_scalar(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if key in _ENUM_FIELDS:
        return str(value)
    escaped = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def to_yaml(config: Mapping[str, Any]) -> str:
    """Render a config dict as inferplex's native ``config.yaml`` (same field names)."""
    import yaml

    return yaml.safe_dump(dict(config), sort_keys=False, default_flow_style=None)


def write_config(
    model_dir: Path, config: Mapping[str, Any], fmt: Literal["pbtxt", "yaml"] = "pbtxt"
) -> Path:
    """Write ``config.pbtxt`` or ``config.yaml`` into a model folder; returns its path."""
    model_dir.mkdir(parents=True, exist_ok=True)
    path = model_dir / f"config.{fmt}"
    path.write_text(to_pbtxt(config) if fmt == "pbtxt" else to_yaml(config))
    return path


# --------------------------------------------------------------------------- helpers


def _value(name: str, datatype: str, shape: Dims) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, V2_TO_ONNX[datatype], list(shape))


def _const(name: str, array: np.ndarray) -> onnx.TensorProto:
    """An initializer; float64 arrays (numpy's default) are stored as FP32."""
    if array.dtype == np.float64:
        array = array.astype(np.float32)
    return numpy_helper.from_array(array, name)


def _save(graph: onnx.GraphProto, repo: Path, name: str, version: int) -> Path:
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
        producer_name="inferplex.modelgen",
    )
    onnx.checker.check_model(model, full_check=True)
    path = Path(repo) / name / str(version) / MODEL_FILENAME
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def _session(path: Path, threads: int = 1) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _timed(function: Any, *args: Any) -> float:
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start
