"""Completing a model's config from the model file's own signature (Triton's auto-complete),
and checking the two agree."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from inferplex.config.model_config import DynamicBatching, ModelConfig, TensorConfig
from inferplex.config.read_errors import describe
from inferplex.errors import ConfigError

#: max_batch_size given to a model that can batch when its config does not set one: the
#: default of Triton's ``--backend-config=default-max-batch-size``.
DEFAULT_MAX_BATCH_SIZE = 4


def complete_config(
    config: ModelConfig | None,
    name: str,
    inputs: Sequence[TensorConfig],
    outputs: Sequence[TensorConfig],
) -> ModelConfig:
    """Complete a config (None: no config file) from the model file's own signature, as
    Triton's auto-complete does for ONNX models, and check the two agree.

    ``inputs``/``outputs`` are the model's tensors with the batch dimension as their first
    dim (``(-1, 4)``). ``name`` is used only when there is no config. The rules:

    - The model *can batch* when every input and output has a variable (-1) first dim. Then
      a config that does not set ``max_batch_size`` (or no config) gets
      :data:`DEFAULT_MAX_BATCH_SIZE`, like Triton. Unlike Triton, an explicit
      ``max_batch_size: 0`` is kept: it is the only way to say "do not batch this model".
    - A model that can batch with ``max_batch_size > 1`` and neither ``dynamic_batching``
      nor ``sequence_batching`` in its config gets ``dynamic_batching {}``, as in Triton.
    - ``max_batch_size > 0`` for a model that cannot batch is an error.
    - With no inputs in the config, all the model's inputs are declared; inputs the config
      leaves out are added too (the model needs them), but for the control and state inputs
      of a sequence model, which the server fills. Outputs are filled only when the
      config declares none, since declaring some keeps the others private, as in Triton.
      Filled dims leave out the batch dimension when batching; a scalar becomes
      ``dims: [1]`` with ``reshape: []``.
    - Each declared tensor must exist in the model with the same datatype, and its shape
      (``reshape`` if given, else ``dims``, with the batch dimension in front when batching)
      must have the model's rank, each dim equal to the model's or -1 on either side.
    """
    base = config if config is not None else ModelConfig(name=name)
    name = base.name
    fields: dict[str, Any] = dict(base)
    fixed = [t for t in (*inputs, *outputs) if not t.dims or t.dims[0] != -1]
    max_batch_size = base.max_batch_size
    if "max_batch_size" not in base.model_fields_set and not fixed:
        max_batch_size = fields["max_batch_size"] = DEFAULT_MAX_BATCH_SIZE
    if max_batch_size > 0 and fixed:
        shapes = ", ".join(f"'{t.name}' {list(t.dims)}" for t in fixed)
        raise ConfigError(
            f"model '{name}': max_batch_size is {max_batch_size} but the model cannot batch: "
            f"every input and output needs a variable (-1) first dimension, and these do not: "
            f"{shapes}; set max_batch_size: 0"
        )
    if max_batch_size > 1 and base.dynamic_batching is None and base.sequence_batching is None:
        fields["dynamic_batching"] = DynamicBatching()
    batched = max_batch_size > 0
    # a sequence model's control and state tensors are the server's, never the client's
    sequences = base.sequence_batching
    own = (sequences.server_inputs | sequences.state_outputs) if sequences else frozenset()
    for kind, declared, model in (("input", base.input, inputs), ("output", base.output, outputs)):
        _check_declared(name, kind, declared, model, batched)
        names = {t.name for t in declared} | own
        if kind == "input" or not declared:
            fields[kind] = [
                *declared,
                *(_from_model(t, batched) for t in model if t.name not in names),
            ]
    try:
        return ModelConfig(**fields)
    except ValidationError as exc:
        raise ConfigError(describe(exc, f"model '{name}'")) from None


def _from_model(tensor: TensorConfig, batched: bool) -> dict[str, Any]:
    """The declaration of a model tensor (validated with the rest of the config)."""
    dims = tensor.dims[1:] if batched else tensor.dims
    declared = {"name": tensor.name, "data_type": tensor.data_type, "dims": dims or (1,)}
    if not dims:  # Triton's dims may not be empty: a scalar is [1], reshaped to []
        declared["reshape"] = ()
    return declared


def _check_declared(
    name: str,
    kind: str,
    declared: Sequence[TensorConfig],
    model: Sequence[TensorConfig],
    batched: bool,
) -> None:
    by_name = {t.name: t for t in model}
    for tensor in declared:
        found = by_name.get(tensor.name)
        if found is None:
            known = ", ".join(f"'{n}'" for n in by_name) or "none"
            raise ConfigError(
                f"model '{name}': the config declares {kind} '{tensor.name}' but the model has "
                f"no such {kind} (its {kind}s: {known})"
            )
        if tensor.data_type != found.data_type:
            raise ConfigError(
                f"model '{name}': {kind} '{tensor.name}' is declared {tensor.data_type} in the "
                f"config but is {found.data_type} in the model"
            )
        field = "reshape" if tensor.reshape is not None else "dims"
        own = list(tensor.reshape if tensor.reshape is not None else tensor.dims)
        shape = [-1, *own] if batched else own
        if len(shape) != len(found.dims) or any(
            a != b and -1 not in (a, b) for a, b in zip(shape, found.dims, strict=False)
        ):
            if batched:
                batch = f" (with the batch dimension: {shape})"
            elif len(found.dims) == len(own) + 1:
                batch = (
                    " (max_batch_size is 0, so dims are the full shape, batch dimension included)"
                )
            else:
                batch = ""
            raise ConfigError(
                f"model '{name}': {kind} '{tensor.name}' has {field} {own} in the config"
                f"{batch}, which does not fit the model's shape {list(found.dims)}"
            )
