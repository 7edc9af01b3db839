"""Data sets of the optimiser: calibration and evaluation inputs read from ``.npz`` files.

An ``.npz`` file holds one array per model input, named like the input, each with the batch
dimension first (``N`` rows); an optional ``labels`` array (``N`` integers) makes an evaluation
set measure accuracy. A calibration folder holds several such files, read in name order.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnxruntime.quantization import CalibrationDataReader

from inferplex.errors import InvalidInputError

#: reserved array name of an evaluation set: the true class of each row
LABELS = "labels"

_ONNX_TO_NUMPY = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.INT8: np.int8,
    onnx.TensorProto.UINT8: np.uint8,
    onnx.TensorProto.BOOL: np.bool_,
}


@dataclass(frozen=True)
class InputSpec:
    """A graph input: name, numpy dtype and shape (``None`` for a symbolic dimension)."""

    name: str
    dtype: np.dtype
    shape: tuple[int | None, ...]

    @property
    def batchable(self) -> bool:
        """True when the first dimension is symbolic, so any batch size can be fed."""
        return bool(self.shape) and self.shape[0] is None


def input_specs(model: onnx.ModelProto) -> list[InputSpec]:
    """The model's real inputs (initializers listed as inputs by old exporters left out)."""
    initializers = {t.name for t in model.graph.initializer}
    specs = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        if tensor.elem_type not in _ONNX_TO_NUMPY:
            raise InvalidInputError(
                f"input '{value.name}' has ONNX element type {tensor.elem_type}; the optimiser "
                f"handles {sorted(onnx.TensorProto.DataType.Name(t) for t in _ONNX_TO_NUMPY)}"
            )
        shape = tuple(d.dim_value if d.dim_value > 0 else None for d in tensor.shape.dim)
        specs.append(InputSpec(value.name, np.dtype(_ONNX_TO_NUMPY[tensor.elem_type]), shape))
    return specs


@dataclass(frozen=True)
class DataSet:
    """Rows of inputs (every array has the same first dimension) and optional labels."""

    inputs: dict[str, np.ndarray]
    labels: np.ndarray | None
    source: str

    @property
    def rows(self) -> int:
        return len(next(iter(self.inputs.values())))

    def batches(self, size: int) -> Iterator[dict[str, np.ndarray]]:
        """Consecutive feeds of at most ``size`` rows."""
        for start in range(0, self.rows, size):
            yield {name: array[start : start + size] for name, array in self.inputs.items()}

    def whole_batches(self, size: int) -> DataSet:
        """The rows cut (or repeated) to a multiple of ``size``: for models whose batch
        dimension is fixed, which cannot run a shorter last batch."""
        rows = max(size, self.rows - self.rows % size)
        index = np.arange(rows) % self.rows
        labels = None if self.labels is None else self.labels[index]
        return DataSet({k: a[index] for k, a in self.inputs.items()}, labels, self.source)

    def feed(self, size: int) -> dict[str, np.ndarray]:
        """A feed of exactly ``size`` rows: the first rows, repeated when there are fewer."""
        index = np.arange(size) % self.rows
        return {name: np.ascontiguousarray(array[index]) for name, array in self.inputs.items()}


def load_npz(paths: list[Path], specs: list[InputSpec], what: str) -> DataSet:
    """Read and check one or more ``.npz`` files (rows concatenated, in the order given)."""
    if not paths:
        raise InvalidInputError(f"{what}: no .npz file given")
    parts: list[dict[str, np.ndarray]] = []
    for path in paths:
        if not path.is_file():
            raise InvalidInputError(f"{what}: '{path}' is not a file")
        try:
            with np.load(path, allow_pickle=False) as archive:
                parts.append({key: archive[key] for key in archive.files})
        except (OSError, ValueError) as exc:
            raise InvalidInputError(f"{what}: '{path}' is not a readable .npz file: {exc}") from exc
    source = ", ".join(str(p) for p in paths)
    arrays = {
        key: np.concatenate([part[key] for part in parts]) for key in _common_keys(parts, what)
    }
    return _checked(arrays, specs, f"{what} ({source})")


def load_npz_dir(folder: Path, specs: list[InputSpec], what: str) -> DataSet:
    """Every ``*.npz`` file of a folder, in name order."""
    if not folder.is_dir():
        raise InvalidInputError(f"{what}: '{folder}' is not a folder")
    files = sorted(folder.glob("*.npz"))
    if not files:
        raise InvalidInputError(f"{what}: folder '{folder}' has no .npz file")
    return load_npz(files, specs, what)


def _common_keys(parts: list[dict[str, np.ndarray]], what: str) -> list[str]:
    keys = set(parts[0])
    for part in parts[1:]:
        if set(part) != keys:
            raise InvalidInputError(
                f"{what}: the files hold different arrays ({sorted(keys)} vs {sorted(part)})"
            )
    return sorted(keys)


def _checked(arrays: Mapping[str, np.ndarray], specs: list[InputSpec], what: str) -> DataSet:
    expected = [spec.name for spec in specs]
    missing = [name for name in expected if name not in arrays]
    if missing:
        raise InvalidInputError(
            f"{what}: no array for input(s) {missing}; expected one array per model input "
            f"named {expected} (and optionally '{LABELS}')"
        )
    unknown = sorted(set(arrays) - set(expected) - {LABELS})
    if unknown:
        raise InvalidInputError(
            f"{what}: arrays {unknown} match no model input; expected {expected} "
            f"(and optionally '{LABELS}')"
        )
    inputs: dict[str, np.ndarray] = {}
    for spec in specs:
        array = arrays[spec.name]
        if array.ndim != len(spec.shape) or any(
            want is not None and got != want
            for got, want in zip(array.shape[1:], spec.shape[1:], strict=False)
        ):
            raise InvalidInputError(
                f"{what}: array '{spec.name}' has shape {list(array.shape)}; the model expects "
                f"[N, {', '.join('-1' if d is None else str(d) for d in spec.shape[1:])}]"
            )
        inputs[spec.name] = np.ascontiguousarray(array.astype(spec.dtype, copy=False))
    rows = {len(a) for a in inputs.values()}
    labels = arrays.get(LABELS)
    if labels is not None:
        labels = _class_labels(labels, what)
        rows.add(len(labels))
    if len(rows) != 1 or 0 in rows:
        raise InvalidInputError(f"{what}: arrays must have the same, non-zero number of rows")
    return DataSet(inputs, labels, what)


def _class_labels(labels: np.ndarray, what: str) -> np.ndarray:
    """``labels`` as one int64 class per row; InvalidInputError for any other shape or for
    values that are not whole numbers (a column (N, 1) or one-hot (N, C) array would compare
    with the predictions wrongly, and 0.5 would silently become class 0)."""
    if labels.ndim != 1:
        raise InvalidInputError(
            f"{what}: array '{LABELS}' has shape {list(labels.shape)}; expected [N], one "
            "integer class per row (not a column or one-hot rows)"
        )
    if labels.dtype.kind not in "iub":
        whole = labels.dtype.kind == "f" and np.array_equal(labels, np.round(labels))
        if not whole:
            raise InvalidInputError(
                f"{what}: array '{LABELS}' holds {labels.dtype} values that are not whole "
                "numbers; expected one integer class per row"
            )
    return labels.astype(np.int64)


def synthetic(specs: list[InputSpec], rows: int, seed: int = 0) -> DataSet:
    """Random normal rows for float inputs with fixed non-batch dimensions, for timing when no
    data set is given. Other inputs (token ids, masks) need real data: a clear error."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for spec in specs:
        dims = [d for d in (spec.shape[1:] if spec.batchable else spec.shape) if d is not None]
        if spec.dtype.kind != "f" or len(dims) != len(spec.shape) - spec.batchable:
            raise InvalidInputError(
                f"input '{spec.name}' ({spec.dtype}, shape "
                f"{['-1' if d is None else d for d in spec.shape]}) cannot be made up: "
                "give an evaluation or calibration set (.npz) holding it"
            )
        shape = (rows, *dims) if spec.batchable else tuple(dims)
        inputs[spec.name] = rng.standard_normal(shape).astype(spec.dtype)
    return DataSet(inputs, None, "synthetic random inputs")


class CalibrationReader(CalibrationDataReader):
    """Feeds a data set to ONNX Runtime's calibrator in batches."""

    def __init__(self, data: DataSet, batch_size: int) -> None:
        self._data = data
        self._batch_size = batch_size
        self._batches = data.batches(batch_size)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._batches, None)

    def rewind(self) -> None:
        self._batches = self._data.batches(self._batch_size)
