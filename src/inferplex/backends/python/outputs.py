"""A handler's results as the arrays its model declares: the casts both handler styles share
(numbers to the declared numpy type, anything textual or JSON-able to BYTES elements, per-row
values stacked into batch arrays)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from inferplex.datatypes import TRITON_TO_V2, V2_TO_NUMPY


class HandlerError(Exception):
    """The handler broke the contract (bad class, wrong result shape); the message says how."""


class DeclaredOutputs:
    """The model's outputs as its config declares them: ``finish`` casts a result to one."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.batched = int(config.get("max_batch_size", 0)) > 0
        #: output name -> (numpy dtype, None for BYTES; dims without the batch dimension)
        self.specs = {
            t["name"]: (_numpy_dtype(t["data_type"]), tuple(t.get("dims", ())))
            for t in config.get("output", [])
        }

    def numeric(self, name: str) -> bool:
        """Whether the output holds numbers (not BYTES)."""
        return self.specs.get(name, (None, ()))[0] is not None

    def finish(self, name: str, results: dict[str, Any]) -> np.ndarray:
        """Output ``name`` of ``results`` as the declared type (and dims, where only the
        shape differs: one value per row declared with Triton's dims [1])."""
        if name not in results or results[name] is None:
            raise HandlerError(
                f"the handler returned no output '{name}' (it returned {sorted(results)})"
            )
        value = results[name]
        dtype, dims = self.specs.get(name, (None, ()))
        array = _to_bytes_array(value) if dtype is None else _to_array(value, dtype)
        wanted = (array.shape[0], *dims) if self.batched and array.ndim else dims
        if array.shape != wanted and -1 not in wanted and array.size == np.prod(wanted):
            array = array.reshape(wanted)
        return array

    def all(self, names: list[str], results: dict[str, Any]) -> dict[str, np.ndarray]:
        """Every output of ``names``: HandlerError for one missing."""
        return {name: self.finish(name, results) for name in names}

    def present(self, names: list[str], results: dict[str, Any]) -> dict[str, np.ndarray]:
        """The outputs of ``names`` that ``results`` has (a decoupled model's response may
        carry some only)."""
        return {name: self.finish(name, results) for name in names if name in results}


def _numpy_dtype(data_type: str) -> np.dtype | None:
    v2 = TRITON_TO_V2.get(data_type, data_type)
    return None if v2 == "BYTES" else V2_TO_NUMPY[v2]


def plain(value: Any) -> Any:
    """torch tensors (CPU) become numpy arrays; everything else is left as it is."""
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        return value.detach().cpu().numpy()
    return value


def _to_array(value: Any, dtype: np.dtype) -> np.ndarray:
    return np.asarray(plain(value), dtype=dtype)


def element(value: Any) -> bytes:
    """One BYTES element of a handler's value: bytes, text, or JSON for anything else."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytearray | memoryview | np.bytes_):
        return bytes(value)
    # TorchServe handlers often return JSON-able results for a text output
    return json.dumps(value, default=_json_default).encode()


def _json_default(value: Any) -> Any:
    """numpy values inside a handler's JSON-able result."""
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    raise TypeError(f"a {type(value).__name__} cannot be sent as JSON in a BYTES output")


def _to_bytes_array(value: Any) -> np.ndarray:
    value = plain(value)
    if isinstance(value, np.ndarray) and value.size == 0:
        # no elements, whatever their type (Triton's mock_llm sends np.array([]), float64,
        # for an empty text output): the output is empty, not the text "[]"
        return np.empty(value.shape, dtype=np.object_)
    if isinstance(value, np.ndarray) and value.dtype.kind in ("O", "S", "U"):
        out = np.empty(value.shape, dtype=np.object_)
        for index, item in np.ndenumerate(value):
            out[index] = element(item)
        return out
    out = np.empty((), dtype=np.object_)
    out[()] = element(value)
    return out


def stack(name: str, values: list[Any], numeric: bool) -> np.ndarray:
    """Per-row values of one output as one array: numbers of a numeric output stacked
    (arrays, tensors, scalars or nested lists such as ``tensor.tolist()``)."""
    if any(v is None for v in values):
        raise HandlerError(f"some rows of the handler's result have no output '{name}'")
    values = [plain(v) for v in values]
    if numeric or all(isinstance(v, np.ndarray | int | float | bool | np.generic) for v in values):
        return np.stack([np.asarray(v) for v in values])
    # per-row text or JSON-able values for a BYTES output
    out = np.empty(len(values), dtype=np.object_)
    for i, value in enumerate(values):
        out[i] = value if isinstance(value, bytes | str) else element(value)
    return out
