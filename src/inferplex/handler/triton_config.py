"""The model config as a Triton Python model sees it: Triton's JSON rendering (a dict), the
helpers that read it, and ``ModelConfig``, what ``auto_complete_config`` gets and returns.

``auto_complete_config(auto_complete_model_config)`` is a static method of the model's class
that the server calls once when it loads the model, in a short-lived process of its own
(``backends/python/autocomplete.py``), before any instance starts. It may add inputs and
outputs, set ``max_batch_size``, ask for the dynamic batcher and set the transaction policy,
with Triton's rules: what the config file already says must agree, or loading fails with
the reason.
"""

from __future__ import annotations

import json
from typing import Any

#: the fields ``add_input`` / ``add_output`` take, as Triton's
_INPUT_FIELDS = ("name", "data_type", "dims", "optional")
_OUTPUT_FIELDS = ("name", "data_type", "dims")


def _tensor_config(model_config: dict[str, Any], kind: str, name: str) -> dict[str, Any] | None:
    return next((t for t in model_config.get(kind, []) if t["name"] == name), None)


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The input's entry of the model config (None if there is none), as Triton's."""
    return _tensor_config(model_config, "input", name)


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The output's entry of the model config (None if there is none), as Triton's."""
    return _tensor_config(model_config, "output", name)


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    """Whether the config sets ``model_transaction_policy { decoupled: true }``."""
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


class ModelConfig:
    """The config handed to ``auto_complete_config``: read it with ``as_dict()``, change it
    with ``add_input``, ``add_output``, ``set_max_batch_size``, ``set_dynamic_batching`` and
    ``set_model_transaction_policy`` (ValueError when the change contradicts the config)."""

    def __init__(self, model_config: str | dict[str, Any]) -> None:
        config = json.loads(model_config) if isinstance(model_config, str) else model_config
        config.setdefault("max_batch_size", 0)
        config.setdefault("input", [])
        config.setdefault("output", [])
        self._model_config: dict[str, Any] = config

    def as_dict(self) -> dict[str, Any]:
        return self._model_config

    @property
    def _name(self) -> str:
        return str(self._model_config.get("name", ""))

    def set_max_batch_size(self, max_batch_size: int) -> None:
        """Triton's rule: a config file's larger max_batch_size is an error, not lowered."""
        configured = self._model_config["max_batch_size"]
        if configured > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {configured}, but in "
                f"auto-complete-config function for model '{self._name}' specified "
                f"max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        """The dynamic batcher with its defaults, unless the config chose it already; an
        error if the config chose another scheduler."""
        for other in ("sequence_batching", "ensemble_scheduling"):
            if other in self._model_config:
                raise ValueError(
                    f"configuration specified scheduling_choice as '{other}', but "
                    f"auto-complete-config function for model '{self._name}' tries to set "
                    "scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict[str, Any]) -> None:
        self._add("input", input, _INPUT_FIELDS)

    def add_output(self, output: dict[str, Any]) -> None:
        self._add("output", output, _OUTPUT_FIELDS)

    def _add(self, kind: str, tensor: dict[str, Any], fields: tuple[str, ...]) -> None:
        """A tensor the config lacks is appended; one it has must agree (datatype, dims,
        optional), and fills what the config left unset."""
        model = self._name
        label = tensor.get("name", "")
        extra = sorted(set(tensor) - set(fields))
        if extra:
            raise ValueError(
                f"{kind} '{label}' in auto-complete-config function for model '{model}' has "
                f"properties other than {', '.join(fields)}: {', '.join(extra)}"
            )
        for required in ("name", "data_type", "dims"):
            if required not in tensor:
                raise ValueError(
                    f"{kind} '{label}' in auto-complete-config function for model '{model}' "
                    f"is missing the '{required}' property"
                )
        current = _tensor_config(self._model_config, kind, tensor["name"])
        if current is None:
            self._model_config[kind].append(dict(tensor))
            return
        for field in fields[1:]:
            have, want = current.get(field), tensor.get(field)
            # what a config file leaves out renders as these (optional: false, the default)
            unset = have is None or have is False or have in ("TYPE_INVALID", [])
            if want is not None and not unset and _list_or_value(have) != _list_or_value(want):
                raise ValueError(
                    f"model '{model}', {kind} '{label}': the model's auto_complete_config says "
                    f"{field} {want} but the model configuration specifies {have}"
                )
        current.update({k: v for k, v in tensor.items() if k != "name"})

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        extra = sorted(set(transaction_policy_dict) - {"decoupled"})
        if extra:
            raise ValueError(
                f"model transaction property in auto-complete-config function for model "
                f"'{self._name}' contains property other than 'decoupled': {', '.join(extra)}"
            )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = transaction_policy_dict["decoupled"]
            if "decoupled" in policy and policy["decoupled"] != wanted:
                raise ValueError(
                    f"trying to change decoupled property in auto-complete-config for model "
                    f"'{self._name}', which is already set to '{policy['decoupled']}'"
                )
            policy["decoupled"] = wanted


def _list_or_value(value: Any) -> Any:
    """Dims compare as lists whether given as a list or a tuple."""
    return list(value) if isinstance(value, tuple | list) else value
