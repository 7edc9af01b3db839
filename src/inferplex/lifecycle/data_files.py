"""Tensors a model's config names as raw files in a folder of the model (Triton's layout:
``warmup/`` for warm-up samples, ``initial_state/`` for a sequence's initial state):
little-endian values in row-major order, BYTES elements as a 4-byte length and the bytes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from inferplex.config.model_config import ModelConfig
from inferplex.config.paths import inside
from inferplex.datatypes import deserialize_bytes, element_count, numpy_dtype
from inferplex.errors import ConfigError, InvalidInputError


def read_tensor_file(
    model_dir: Path, folder: str, name: str, what: str, datatype: str, shape: tuple[int, ...]
) -> np.ndarray:
    """The tensor of ``datatype`` and ``shape`` in the file ``name`` of ``model_dir/folder``.
    ConfigError starting with ``what`` (the config field that names it) when the name leads
    out of the folder, the file cannot be read, or it does not hold that many values.
    Blocking (reads the file)."""
    path = inside(model_dir / folder, name, what, model_dir)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"{what}: cannot read {model_dir.name}/{folder}/{name}: {exc.strerror}"
        ) from None
    count = element_count(shape)
    if datatype == "BYTES":
        try:
            return deserialize_bytes(raw, count, name).reshape(shape)
        except InvalidInputError as exc:
            raise ConfigError(f"{what}: {exc.message}") from None
    dtype = numpy_dtype(datatype)
    if len(raw) != count * dtype.itemsize:
        raise ConfigError(
            f"{what}: file {name} has {len(raw)} bytes, expected {count * dtype.itemsize} for "
            f"{datatype} {list(shape)}"
        )
    return np.frombuffer(raw, dtype=dtype.newbyteorder("<")).astype(dtype).reshape(shape)


#: folder of a model holding the files that ``initial_state.data_file`` names
INITIAL_STATE_FOLDER = "initial_state"


def initial_states(config: ModelConfig, model_dir: Path) -> dict[str, np.ndarray]:
    """Per state input name, the initial state its ``initial_state.data_file`` holds (shaped
    as its ``initial_state.dims``, else the state's ``dims``; no batch dimension). ConfigError
    naming the state when a file cannot be used. Blocking (reads files)."""
    batching = config.sequence_batching
    states: dict[str, np.ndarray] = {}
    for state in batching.state if batching is not None else ():
        given = state.initial_state[0] if state.initial_state else None
        if given is None or not given.data_file:
            continue
        what = f"model '{config.name}': sequence_batching.state '{state.input_name}': data_file"
        dims = tuple(given.dims or state.dims)
        if any(d < 0 for d in dims):
            raise ConfigError(f"{what}: dims {list(dims)} are variable; give fixed dims")
        datatype = given.data_type or state.data_type
        states[state.input_name] = read_tensor_file(
            model_dir, INITIAL_STATE_FOLDER, given.data_file, what, datatype, dims
        )
    return states
