"""Config sections of composite models: models that answer by calling other served models.

``ensemble_scheduling`` is Triton's (``platform: "ensemble"``): steps that form a DAG through
the ensemble's tensor names. ``cascade`` and ``size_routing`` are inferplex's own
(backends ``cascade`` and ``size_routing``): a light model that answers when it is confident
enough, and a choice of model by the size of an input. What only the whole config can check
(tensor names, the DAG) is checked by the backends when the model loads.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from inferplex.config.sections import Section as _Section

#: Triton's model_version -1: whichever version the step model serves by default (the latest)
LATEST = -1


class EnsembleStep(_Section):
    """One step: run ``model_name`` on ensemble tensors and name its outputs."""

    model_name: str = Field(min_length=1)
    model_version: int = Field(default=LATEST, ge=LATEST, description="-1: the latest")
    input_map: dict[str, str] = Field(
        default_factory=dict, description="the step model's input -> the ensemble tensor fed"
    )
    output_map: dict[str, str] = Field(
        default_factory=dict, description="the step model's output -> the ensemble tensor made"
    )


class EnsembleScheduling(_Section):
    step: tuple[EnsembleStep, ...] = Field(min_length=1)
    max_inflight_requests: int = Field(
        default=0,
        ge=0,
        le=2**32 - 1,
        description="at most this many requests in flight at each step, across all of the "
        "ensemble's requests (Triton's field); 0: no limit",
    )

    def to_triton_dict(self) -> dict[str, Any]:
        return {
            "max_inflight_requests": self.max_inflight_requests,
            "step": [
                {
                    "model_name": s.model_name,
                    "model_version": s.model_version,
                    "input_map": dict(s.input_map),
                    "output_map": dict(s.output_map),
                }
                for s in self.step
            ],
        }


class Cascade(_Section):
    """Run ``light_model``; rows whose confidence is below ``threshold`` go to
    ``heavy_model``. Confidence: the largest value of ``confidence_output`` per row, after a
    softmax when ``confidence`` is ``softmax`` (the output holds logits) or as it is
    (``max``: the output holds probabilities)."""

    light_model: str = Field(min_length=1)
    light_model_version: int = Field(default=LATEST, ge=LATEST)
    heavy_model: str = Field(min_length=1)
    heavy_model_version: int = Field(default=LATEST, ge=LATEST)
    confidence_output: str = Field(min_length=1)
    confidence: Literal["softmax", "max"] = "softmax"
    threshold: float = Field(gt=0, le=1)
    answered_by_output: str = Field(
        default="answered_by",
        description="BYTES output naming the model that answered each row, if declared",
    )


class SizeRule(_Section):
    """Requests whose routed input fits ``max_dims`` (per dim, -1: any size) go to the rule's
    model; a rule without ``max_dims`` takes every request that reaches it."""

    model_name: str = Field(min_length=1)
    model_version: int = Field(default=LATEST, ge=LATEST)
    max_dims: tuple[int, ...] = ()

    def accepts(self, shape: tuple[int, ...]) -> bool:
        return not self.max_dims or all(
            limit == -1 or size <= limit for size, limit in zip(shape, self.max_dims, strict=True)
        )


class SizeRouting(_Section):
    """Send each request to the first rule whose ``max_dims`` the size of input
    ``input_name`` fits (dims without the batch dimension when the model batches)."""

    input_name: str = Field(min_length=1)
    rule: tuple[SizeRule, ...] = Field(min_length=1)
    answered_by_output: str = Field(
        default="answered_by",
        description="BYTES output naming the model that answered each row, if declared",
    )

    @model_validator(mode="after")
    def _check_rules(self) -> SizeRouting:
        for index, rule in enumerate(self.rule[:-1]):
            if not rule.max_dims:
                raise ValueError(
                    f"rule[{index}] has no max_dims, so it takes every request and the rules "
                    "after it are never used; put the rule without max_dims last"
                )
        for index, rule in enumerate(self.rule):
            if any(d < -1 or d == 0 for d in rule.max_dims):
                raise ValueError(
                    f"rule[{index}].max_dims must be positive or -1 (any size), "
                    f"got {list(rule.max_dims)}"
                )
        return self
