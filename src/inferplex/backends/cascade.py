"""Adaptive inference: a cascade of a light and a heavy model, and routing by input size.

Both are composite backends: they answer by calling other served models in-process
(``InstanceSpec.caller``) and take no compute slot of their own. When the config declares the
BYTES output named by ``answered_by_output`` (``dims: [1]``), each row of the answer says
which model answered it.

- ``backend: "cascade"`` with a ``cascade`` section: the light model runs on the whole batch;
  rows whose confidence (largest softmax probability of ``confidence_output``) is below
  ``threshold`` are sent, together, to the heavy model, whose rows replace the light ones.
- ``backend: "size_routing"`` with a ``routing`` section: the batch goes to the model of the first
  rule whose ``max_dims`` the size of input ``input_name`` fits (a batch holds one input size).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from inferplex.backends.base import Backend, InstanceSpec, ModelCaller
from inferplex.backends.ensemble import failure
from inferplex.config.composite import LATEST
from inferplex.config.model_config import ModelConfig
from inferplex.errors import ConfigError, InvalidInputError, ModelExecutionError
from inferplex.types import InferenceRequest, RequestedOutput, Tensor

Arrays = dict[str, np.ndarray]


class _Composite(Backend):
    """What cascades and routers share: calling a served model with the request's inputs,
    and the optional output that names the model answering each row."""

    composite = True

    def __init__(self, config: ModelConfig, instance: InstanceSpec, answered_by: str) -> None:
        if instance.caller is None:
            raise ConfigError(f"model '{config.name}': a {self.names[0]} needs the engine's caller")
        self._caller: ModelCaller = instance.caller
        self._name = config.name
        self._datatypes = {t.name: t.data_type for t in config.input}
        self._answered_by = answered_by
        declared = next((t for t in config.output if t.name == answered_by), None)
        if declared is not None and (declared.data_type != "BYTES" or declared.dims != (1,)):
            raise ConfigError(
                f"model '{config.name}': output '{answered_by}' names the model that answered "
                f"each row, so it must be declared BYTES with dims [1], not "
                f"{declared.data_type} {list(declared.dims)}"
            )
        # the shape of one row of it, as this backend returns it (the model side of reshape)
        self._answered_row = () if declared is not None and declared.reshape == () else (1,)
        self._batched = config.batched

    def _call(
        self, role: str, model: str, version: int, inputs: Arrays, outputs: list[str]
    ) -> Arrays:
        feeds = [Tensor(n, self._datatypes[n], a.shape, a) for n, a in inputs.items()]
        request = InferenceRequest(
            model,
            feeds,
            "" if version == LATEST else str(version),
            outputs=[RequestedOutput(o) for o in outputs],
        )
        try:
            response = self._caller.infer(request)
        except Exception as exc:
            raise failure(f"model '{self._name}': {role} model '{model}'", exc) from exc
        return {t.name: t.data for t in response.outputs}

    def _answered(self, rows: int, model: str) -> np.ndarray:
        shape = (rows, *self._answered_row) if self._batched else self._answered_row
        out = np.empty(shape, dtype=np.object_)
        out[...] = model.encode()
        return out


class CascadeBackend(_Composite):
    """Light model first; only its low-confidence rows go to the heavy model."""

    names = ("cascade",)

    def __init__(self, model_path: Path, config: ModelConfig, instance: InstanceSpec) -> None:
        cascade = config.cascade
        if cascade is None:
            raise ConfigError(
                f"model '{config.name}': backend 'cascade' needs a cascade section "
                "(light_model, heavy_model, confidence_output, threshold)"
            )
        if not config.batched:
            raise ConfigError(
                f"model '{config.name}': a cascade decides row by row, so it needs "
                "max_batch_size > 0 (the first dimension is the row)"
            )
        super().__init__(config, instance, cascade.answered_by_output)
        self._cascade = cascade

    def execute(self, inputs: Arrays, outputs: list[str]) -> Arrays:
        cascade = self._cascade
        answered_by = self._answered_by
        wanted = [o for o in outputs if o != answered_by]
        asked = (
            wanted if cascade.confidence_output in wanted else [*wanted, cascade.confidence_output]
        )
        light = self._call("light", cascade.light_model, cascade.light_model_version, inputs, asked)
        scores = light.get(cascade.confidence_output)
        if scores is None:
            raise ModelExecutionError(
                f"model '{self._name}': light model '{cascade.light_model}' returned no "
                f"output '{cascade.confidence_output}' (cascade.confidence_output)"
            )
        rows = scores.shape[0]
        # NaN confidence is not confident: "not >=" sends it on
        low = np.flatnonzero(~(confidence(scores, cascade.confidence) >= cascade.threshold))
        result = {name: light[name] for name in wanted}
        if low.size and wanted:
            heavy = self._call(
                "heavy",
                cascade.heavy_model,
                cascade.heavy_model_version,
                {name: array[low] for name, array in inputs.items()},
                wanted,
            )
            for name in wanted:
                result[name] = self._merge(name, light[name], heavy[name], low)
        if answered_by in outputs:
            answered = self._answered(rows, cascade.light_model)
            answered[low] = cascade.heavy_model.encode()
            result[answered_by] = answered
        return result

    def _merge(
        self, name: str, light: np.ndarray, heavy: np.ndarray, rows: np.ndarray
    ) -> np.ndarray:
        if light.shape[1:] != heavy.shape[1:] or light.dtype != heavy.dtype:
            raise ModelExecutionError(
                f"model '{self._name}': output '{name}' is {light.dtype} {list(light.shape[1:])} "
                f"per row from the light model but {heavy.dtype} {list(heavy.shape[1:])} from "
                "the heavy one; a cascade needs them alike"
            )
        merged = light.copy()  # the light answer may be a read-only view of a batch
        merged[rows] = heavy
        return merged


def confidence(scores: np.ndarray, mode: str) -> np.ndarray:
    """Per row, the largest probability: of ``softmax(scores)`` (mode ``softmax``: logits)
    or of the scores as they are (mode ``max``: probabilities already)."""
    flat = scores.reshape(scores.shape[0], -1).astype(np.float64, copy=False)
    if mode == "max":
        return flat.max(axis=1)
    # the largest softmax value is exp(0) / sum(exp(x - max)) once the max is subtracted
    shifted = flat - flat.max(axis=1, keepdims=True)
    return 1.0 / np.exp(shifted).sum(axis=1)


class SizeRoutingBackend(_Composite):
    """The batch goes to the model of the first rule its input size fits."""

    names = ("size_routing",)

    def __init__(self, model_path: Path, config: ModelConfig, instance: InstanceSpec) -> None:
        routing = config.size_routing
        if routing is None:
            raise ConfigError(
                f"model '{config.name}': backend 'size_routing' needs a size_routing section "
                "(input_name, rule [ { model_name, max_dims } ])"
            )
        declared = next((t for t in config.input if t.name == routing.input_name), None)
        if declared is None:
            names = ", ".join(f"'{t.name}'" for t in config.input) or "none"
            raise ConfigError(
                f"model '{config.name}': size_routing.input_name '{routing.input_name}' is not "
                f"an input of the model (its inputs: {names})"
            )
        dims = declared.reshape if declared.reshape is not None else declared.dims
        for index, rule in enumerate(routing.rule):
            if rule.max_dims and len(rule.max_dims) != len(dims):
                raise ConfigError(
                    f"model '{config.name}': size_routing.rule[{index}].max_dims "
                    f"{list(rule.max_dims)} has {len(rule.max_dims)} dims but input "
                    f"'{routing.input_name}' has {len(dims)} ({list(dims)}"
                    f"{', without the batch dimension' if config.batched else ''})"
                )
        super().__init__(config, instance, routing.answered_by_output)
        self._routing = routing

    def execute(self, inputs: Arrays, outputs: list[str]) -> Arrays:
        routing = self._routing
        shape = inputs[routing.input_name].shape
        size = shape[1:] if self._batched else shape
        rule = next((r for r in routing.rule if r.accepts(size)), None)
        if rule is None:
            limits = "; ".join(str(list(r.max_dims)) for r in routing.rule)
            raise InvalidInputError(
                f"model '{self._name}': input '{routing.input_name}' of size {list(size)} fits "
                f"no size_routing rule (max_dims: {limits})"
            )
        answered_by = self._answered_by
        wanted = [o for o in outputs if o != answered_by]
        result = (
            self._call("routed", rule.model_name, rule.model_version, inputs, wanted)
            if wanted
            else {}
        )
        if answered_by in outputs:
            result[answered_by] = self._answered(shape[0], rule.model_name)
        return result
