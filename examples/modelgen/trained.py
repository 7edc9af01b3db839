"""The one trained model: a digit classifier fitted with scikit-learn on its bundled digits
data set, its weights written out by hand as ONNX (no torch, no network)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from examples.modelgen.onnxfile import const, save, session, value_info


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

    path = save(_mlp_graph(name, classifier), repo, name, version)
    probabilities, onnx_predictions = session(path).run(None, {"pixels": x_test})
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
    initializers = [const("scale", np.array(1.0 / _DIGITS_SCALE, dtype=np.float32))]
    nodes = [helper.make_node("Mul", ["pixels", "scale"], ["h0"])]
    layers = list(zip(classifier.coefs_, classifier.intercepts_, strict=True))
    current = "h0"
    for i, (weights, bias) in enumerate(layers):
        initializers += [
            const(f"w{i}", weights.astype(np.float32)),
            const(f"b{i}", bias.astype(np.float32)),
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
        [value_info("pixels", "FP32", ["batch", 64])],
        [
            value_info("probabilities", "FP32", ["batch", 10]),
            value_info("label", "INT64", ["batch"]),
        ],
        initializers,
    )
