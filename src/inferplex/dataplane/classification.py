"""Triton's classification extension (docs/protocol/extension_classification.md in
triton-inference-server/server): an output requested with the parameter
``classification: N`` comes back as its top N classes instead of its tensor.

The answer is a BYTES tensor of ``"<value>:<index>[:<label>]"`` strings, highest value first,
with shape ``[batch, n]`` for a model that batches (each row of the output classified on its
own) and ``[n]`` otherwise, ``n = min(N, classes)``. Values are written as Triton writes them
(C++ ``std::to_string``: six decimals for floating point, integers as they are); the label is
line ``index`` of the output's ``label_filename`` (in the model's folder), left out where there
is none. Only numeric outputs of a fixed size can be classified (not BOOL, FP16 or BYTES, as
in Triton).

Pure functions: the data plane (``dataplane/classes.py``) decides when to call them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from inferplex.config.paths import inside
from inferplex.errors import InvalidInputError
from inferplex.types import RequestedOutput, Tensor

__all__ = ["CLASSIFICATION", "ClassifiedOutputs", "class_count", "classify", "read_labels"]

#: the output parameter of the extension
CLASSIFICATION = "classification"
#: the datatypes whose outputs can be classified (Triton's list)
CLASSIFIABLE = frozenset(
    ("UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP32", "FP64")
)


class ClassifiedOutputs(list[RequestedOutput]):
    """The requested outputs of a request that asks to classify one or more of them. The
    codec that decodes such a request makes its outputs one of these, so the data plane
    knows by their type, without a pass over them, that the answer needs classifying (and
    a codec's layout cache hands the same list to every request of that layout)."""

    __slots__ = ()


def class_count(name: str, parameters: Mapping[str, Any]) -> int:
    """How many classes an output's parameters ask for (0: its tensor, as computed)."""
    count = parameters.get(CLASSIFICATION)
    if count is None:
        return 0
    if type(count) is not int or count < 0:
        raise InvalidInputError(
            f"output '{name}': parameter '{CLASSIFICATION}' must be a non-negative integer "
            f"(how many of the top classes to return), got {count!r}"
        )
    return count


def classify(
    tensor: Tensor, count: int, batched: bool, labels: Sequence[str] | None = None
) -> Tensor:
    """``tensor`` as its top ``count`` classes (per batch row when ``batched``)."""
    if tensor.datatype not in CLASSIFIABLE:
        raise InvalidInputError(
            f"output '{tensor.name}': the classification extension needs a numeric output, "
            f"not {tensor.datatype}"
        )
    data = np.asarray(tensor.data)
    rows = data.reshape(data.shape[0] if batched and data.ndim else 1, -1)
    classes = rows.shape[1]
    taken = min(count, classes)
    texts = np.empty((rows.shape[0], taken), dtype=object)
    for number, row in enumerate(rows):
        # highest value first; among equal values the lower index first
        order = (classes - 1 - np.argsort(row[::-1], kind="stable"))[::-1][:taken]
        texts[number] = _texts(row[order].tolist(), order.tolist(), labels, row.dtype.kind)
    shape = (rows.shape[0], taken) if batched else (taken,)
    return Tensor(tensor.name, "BYTES", shape, texts.reshape(shape))


def _texts(
    values: list[Any], indices: list[int], labels: Sequence[str] | None, kind: str
) -> list[bytes]:
    texts = []
    for value, index in zip(values, indices, strict=True):
        text = f"{value:f}:{index}" if kind == "f" else f"{value}:{index}"
        if labels is not None and index < len(labels) and labels[index]:
            text = f"{text}:{labels[index]}"
        texts.append(text.encode())
    return texts


def read_labels(folder: Path, name: str) -> tuple[str, ...]:
    """The labels of the label file ``name`` in the model's ``folder``, one a line (line
    ``i`` names class ``i``). ConfigError when the name leads out of the folder (through a
    symbolic link too: its lines would go to clients). Blocking (reads the file)."""
    path = inside(folder, name, "label_filename", folder)
    return tuple(path.read_text(encoding="utf-8").splitlines())
