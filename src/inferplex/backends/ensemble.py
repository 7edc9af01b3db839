"""Ensembles (pipelines): Triton's ``platform: "ensemble"`` with ``ensemble_scheduling`` steps.

Each step runs another served model; its ``input_map`` says which ensemble tensor feeds each
of the step model's inputs and its ``output_map`` names the ensemble tensors its outputs
become. The tensor names make a DAG, checked when the model loads. A batch runs every step
it needs as soon as the step's inputs exist, so independent branches run at the same time;
step requests go through the engine in-process (``InstanceSpec.caller``), so intermediate
tensors never leave the process.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Collection, Container, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferplex.backends.base import Backend, InstanceSpec, ModelCaller
from inferplex.backends.step_gates import shared_gates
from inferplex.config.composite import LATEST
from inferplex.config.model_config import ModelConfig
from inferplex.errors import ConfigError, InferplexError, InvalidInputError, ModelExecutionError
from inferplex.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor

logger = logging.getLogger(__name__)
#: (model, unused steps) already warned about
_WARNED: set[tuple[str, tuple[str, ...]]] = set()


@dataclass(frozen=True)
class Step:
    """One step of the DAG, with the tensor names resolved."""

    number: int  # 1-based, as messages name it
    model: str
    version: str  # "" for the latest
    inputs: tuple[tuple[str, str], ...]  # (step model input, ensemble tensor)
    outputs: dict[str, str]  # step model output -> ensemble tensor

    @property
    def label(self) -> str:
        return f"step {self.number} '{self.model}'"


@dataclass(frozen=True)
class Plan:
    """The steps that produce a set of wanted outputs, and what each must return."""

    steps: tuple[Step, ...]
    requested: dict[int, tuple[str, ...]]  # step number -> the step outputs asked for
    #: step number -> the longest chain of plan steps from it to the end (itself included):
    #: the dispatcher starts the ready step with the longest chain first
    precedence: dict[int, int]


class EnsembleGraph:
    """The steps of an ensemble as a DAG over its tensor names; ConfigError naming the step
    for unknown tensors, tensors made twice, cycles and outputs no step makes."""

    def __init__(self, config: ModelConfig) -> None:
        scheduling = config.ensemble_scheduling
        name = config.name
        if scheduling is None:
            raise ConfigError(
                f"model '{name}': an ensemble needs ensemble_scheduling {{ step [ ... ] }}"
            )
        self.inputs = {t.name: t.data_type for t in config.input}
        steps = [
            Step(
                i + 1,
                s.model_name,
                "" if s.model_version == LATEST else str(s.model_version),
                tuple(s.input_map.items()),
                dict(s.output_map),
            )
            for i, s in enumerate(scheduling.step)
        ]
        # ensemble tensor -> the step that makes it
        self.producer = _producers(name, steps, self.inputs)
        _check_reads(name, steps, self.inputs, self.producer)
        for declared in config.output:
            if declared.name not in self.producer:
                raise ConfigError(
                    f"model '{name}': output '{declared.name}' of the ensemble is made by no step "
                    f"(the steps make: {', '.join(sorted(self.producer)) or 'nothing'})"
                )
        _check_acyclic(name, steps, self.producer)
        self.steps = steps
        self._plans: dict[tuple[str, ...], Plan] = {}
        used = {s.number for s in self.plan(tuple(t.name for t in config.output)).steps}
        _warn_unused(name, [s.label for s in steps if s.number not in used])

    def plan(self, wanted: Sequence[str]) -> Plan:
        """The steps needed for the ensemble outputs ``wanted``, in the configured order."""
        key = tuple(wanted)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._make_plan(key)
        return plan

    def _make_plan(self, wanted: tuple[str, ...]) -> Plan:
        needed: set[str] = set()  # ensemble tensors some needed step or the caller reads
        todo = list(wanted)
        steps: set[int] = set()
        while todo:
            tensor = todo.pop()
            if tensor in needed:
                continue
            needed.add(tensor)
            step = self.producer.get(tensor)
            if step is not None and step.number not in steps:
                steps.add(step.number)
                todo.extend(t for _, t in step.inputs)
        chosen = tuple(s for s in self.steps if s.number in steps)
        requested = {
            s.number: tuple(o for o, t in s.outputs.items() if t in needed) for s in chosen
        }
        return Plan(chosen, requested, _chain_lengths(chosen))


def _producers(name: str, steps: list[Step], inputs: Container[str]) -> dict[str, Step]:
    """Each ensemble tensor a step makes, and the step; ConfigError for a step that makes
    nothing, an ensemble input, or what another step makes."""
    producer: dict[str, Step] = {}
    for step in steps:
        if not step.outputs:
            raise ConfigError(f"model '{name}': {step.label} has an empty output_map")
        for output, tensor in step.outputs.items():
            if tensor in inputs:
                raise ConfigError(
                    f"model '{name}': {step.label} output '{output}' writes ensemble tensor "
                    f"'{tensor}', which is an input of the ensemble"
                )
            if tensor in producer:
                raise ConfigError(
                    f"model '{name}': {step.label} output '{output}' writes ensemble tensor "
                    f"'{tensor}', which {producer[tensor].label} already makes"
                )
            producer[tensor] = step
    return producer


def _check_reads(
    name: str, steps: list[Step], inputs: Collection[str], producer: dict[str, Step]
) -> None:
    """ConfigError for a step that reads nothing, or reads a tensor nothing makes."""
    known = sorted({*inputs, *producer})
    for step in steps:
        if not step.inputs:
            raise ConfigError(f"model '{name}': {step.label} has an empty input_map")
        for step_input, tensor in step.inputs:
            if tensor not in inputs and tensor not in producer:
                raise ConfigError(
                    f"model '{name}': {step.label} input '{step_input}' reads ensemble "
                    f"tensor '{tensor}', which is neither an input of the ensemble nor an "
                    f"output of a step (known tensors: {', '.join(known)})"
                )


def _warn_unused(name: str, unused: list[str]) -> None:
    """Warn of steps the ensemble's outputs do not need: once, not once per instance."""
    if unused and (name, tuple(unused)) not in _WARNED:
        _WARNED.add((name, tuple(unused)))
        logger.warning(
            "model '%s': %s make(s) nothing the ensemble's outputs need and never run",
            name,
            ", ".join(unused),
        )


def _chain_lengths(steps: tuple[Step, ...]) -> dict[int, int]:
    """Per step, the most steps on a path from it through the steps that read what it makes
    (acyclic, checked at load): 1 for a step nothing in ``steps`` reads."""
    readers = {
        s.number: [r for r in steps if any(t in s.outputs.values() for _, t in r.inputs)]
        for s in steps
    }
    lengths: dict[int, int] = {}

    def length(step: Step) -> int:
        if step.number not in lengths:
            lengths[step.number] = 1 + max((length(r) for r in readers[step.number]), default=0)
        return lengths[step.number]

    for step in steps:
        length(step)
    return lengths


def _check_acyclic(name: str, steps: list[Step], producer: dict[str, Step]) -> None:
    """Kahn's algorithm: the steps left when no more can start are on (or behind) a cycle."""
    depends = {s.number: {producer[t].number for _, t in s.inputs if t in producer} for s in steps}
    done: set[int] = set()
    progress = True
    while progress:
        progress = False
        for number, before in depends.items():
            if number not in done and before <= done:
                done.add(number)
                progress = True
    stuck = [s for s in steps if s.number not in done]
    if stuck:
        labels = ", ".join(s.label for s in stuck)
        raise ConfigError(
            f"model '{name}': the steps form a cycle through their tensors: {labels} each "
            "wait on a tensor that only a step among them makes"
        )


class EnsembleBackend(Backend):
    """Runs the ensemble's steps on the served models, independent steps at once."""

    names = ("ensemble",)
    platforms = ("ensemble",)
    composite = True

    def __init__(self, model_path: Path, config: ModelConfig, instance: InstanceSpec) -> None:
        if instance.caller is None:
            raise ConfigError(f"model '{config.name}': an ensemble needs the engine's caller")
        self._caller: ModelCaller = instance.caller
        self._graph = EnsembleGraph(config)
        self._name = config.name
        assert config.ensemble_scheduling is not None  # (EnsembleGraph checked it)
        limit = config.ensemble_scheduling.max_inflight_requests
        self._gates = shared_gates(str(model_path.resolve()), limit, len(self._graph.steps))

    def execute(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        graph = self._graph
        plan = graph.plan(outputs)
        tensors = {
            name: Tensor(name, graph.inputs[name], array.shape, array)
            for name, array in inputs.items()
        }
        waiting = list(plan.steps)
        running: dict[concurrent.futures.Future[InferenceResponse], Step] = {}
        #: steps whose inputs are ready, waiting for a slot (max_inflight_requests)
        admitting: dict[concurrent.futures.Future[None], Step] = {}
        try:
            while waiting or running or admitting:
                blocked = []
                for step in waiting:
                    if all(t in tensors for _, t in step.inputs):
                        self._start(step, tensors, plan, running, admitting)
                    else:
                        blocked.append(step)
                waiting = blocked
                if not running and not admitting:  # only an optional input left out can
                    raise self._missing(waiting, tensors)  # starve a step
                pending: list[concurrent.futures.Future[Any]] = [*running, *admitting]
                finished, _ = concurrent.futures.wait(
                    pending, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for slot in [f for f in admitting if f in finished]:  # (in step order)
                    step = admitting.pop(slot)
                    running[self._submit(step, tensors, plan)] = step
                for future in [f for f in finished if f in running]:
                    self._collect(running.pop(future), future, tensors)
        finally:
            for future in running:  # a step failed: the others' answers are not needed
                future.cancel()
            if self._gates is not None:  # and the steps waiting for a slot go
                for slot, step in admitting.items():
                    self._gates.by_step[step.number].abandon(slot)
        return {name: tensors[name].data for name in outputs}

    def _start(
        self,
        step: Step,
        tensors: dict[str, Tensor],
        plan: Plan,
        running: dict[concurrent.futures.Future[InferenceResponse], Step],
        admitting: dict[concurrent.futures.Future[None], Step],
    ) -> None:
        """Submit a step whose inputs exist, or, without a free slot at its step, put it
        in line for one."""
        gates = self._gates
        slot = gates.by_step[step.number].acquire() if gates is not None else None
        if slot is None or slot.done():
            running[self._submit(step, tensors, plan)] = step
        else:
            admitting[slot] = step

    def _collect(
        self,
        step: Step,
        future: concurrent.futures.Future[InferenceResponse],
        tensors: dict[str, Tensor],
    ) -> None:
        """A step's answer into the ensemble's tensors, or its error naming the step."""
        try:
            response = future.result()
        except Exception as exc:
            raise failure(f"model '{self._name}': {step.label}", exc) from exc
        for tensor in response.outputs:
            tensors[step.outputs[tensor.name]] = tensor

    def _submit(
        self, step: Step, tensors: dict[str, Tensor], plan: Plan
    ) -> concurrent.futures.Future[InferenceResponse]:
        feeds = []
        for step_input, name in step.inputs:
            tensor = tensors[name]
            feeds.append(Tensor(step_input, tensor.datatype, tensor.shape, tensor.data))
        wanted = [RequestedOutput(o) for o in plan.requested[step.number]]
        request = InferenceRequest(step.model, feeds, step.version, outputs=wanted)
        future = self._caller.submit(request, plan.precedence[step.number])
        if self._gates is not None:  # the step's slot is free once its request completes
            gate = self._gates.by_step[step.number]
            future.add_done_callback(lambda _: gate.release())
        return future

    def _missing(self, blocked: list[Step], tensors: dict[str, Tensor]) -> InvalidInputError:
        """The error for steps that cannot start: some read an (optional) ensemble input the
        request left out."""
        for step in blocked:
            absent = [t for _, t in step.inputs if t not in tensors and t in self._graph.inputs]
            if absent:
                return InvalidInputError(
                    f"model '{self._name}': {step.label} needs input "
                    f"{', '.join(repr(t) for t in absent)}, which the request did not give"
                )
        raise AssertionError("a validated DAG always has a step that can start")


def failure(context: str, exc: BaseException) -> InferplexError:
    """``exc`` as "<context> failed: <its message>", keeping its error code (a called model
    that is not ready stays retryable, bad input stays a client error)."""
    detail = exc.message if isinstance(exc, InferplexError) else str(exc) or repr(exc)
    message = f"{context} failed: {detail}"
    if not isinstance(exc, InferplexError):
        return ModelExecutionError(message)
    # the same class and attributes with the new message; not copy.copy, which calls the
    # class with its args and fails for errors whose __init__ takes more than the message
    error = type(exc).__new__(type(exc), message)
    error.__dict__.update(exc.__dict__)
    error.args = (message,)
    error.message = message
    return error
