"""The ``llm`` backend: a Hugging Face causal LM folder served by the engine, as a decoupled
model with Triton's LLM conventions (``text_input`` in, ``text_output`` streamed).

The engine batches by iteration, so a request must not wait for its batch's others: each
instance is a thread that hands its request to the one engine of the model version and
relays its output, and the version has as many instances as requests it keeps in flight
(``max_num_seqs`` unless the config's instance_group says otherwise). The instances share
the engine (made by the first, stopped with the last) and take no compute slot of the
server's scheduler: the engine's thread does the computing, each step in a slot the
scheduler grants (``backends.step_gate``), weighed against the other models' batches.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from inferplex.backends.base import (
    Backend,
    BatchOutcome,
    BatchRequest,
    Cancellation,
    InstanceSpec,
)
from inferplex.backends.engine_stats import EngineStats
from inferplex.backends.llm.admission import prepare
from inferplex.backends.llm.generation import Generation
from inferplex.backends.llm.relay import Outbox, Reply
from inferplex.backends.llm.request import INPUTS, OUTPUTS, GenerateRequest, read_request
from inferplex.backends.llm.settings import read_settings
from inferplex.backends.pytorch import PyTorchBackend
from inferplex.backends.step_gate import StepGates
from inferplex.config.model_config import InstanceGroup, ModelConfig, ModelTransactionPolicy
from inferplex.errors import InferplexError, UnsupportedError

if TYPE_CHECKING:
    from inferplex.backends.llm.loading import LoadedModel


class _Shared:
    """The engine of one loaded version and how many instances hold it."""

    def __init__(self, model: LoadedModel, config: ModelConfig) -> None:
        self.model = model
        self.config = config  # keeps the key's object alive while the engine is
        self.holders = 0


_shared: dict[tuple[int, Path], _Shared] = {}
_shared_lock = threading.Lock()
#: numbers the engines' gates in the scheduler (a reload's engine runs beside the old one)
_gate_numbers = itertools.count(1)


def _hold(
    folder: Path, config: ModelConfig, instance: InstanceSpec
) -> tuple[_Shared, tuple[int, Path]]:
    """The version's engine, made by its first instance (the instances of one load share
    the config object that keys it)."""
    key = (id(config), folder)
    with _shared_lock:
        shared = _shared.get(key)
        if shared is None:  # torch is imported only when an LLM is loaded
            import torch

            from inferplex.backends.llm.loading import load_model

            device = torch.device(
                f"cuda:{instance.device_id}" if instance.kind == "KIND_GPU" else "cpu"
            )
            settings = read_settings(config.parameters, config.name)
            caller = instance.caller
            gate = (
                caller.step_gate(
                    config, f"{config.name}/{folder.name} engine#{next(_gate_numbers)}"
                )
                if isinstance(caller, StepGates)
                else None
            )
            try:
                model = load_model(folder, settings, device, instance.intra_op_threads, gate=gate)
            except BaseException:
                if gate is not None:  # (no engine will ever ask it for a slot)
                    gate.close()
                raise
            shared = _shared[key] = _Shared(model, config)
        shared.holders += 1
    return shared, key


class LlmBackend(Backend):
    """One instance of an LLM version (see the module docstring)."""

    names = ("llm",)
    # no model file: the version folder is the model (a config.json there is no sign of an
    # LLM: exported ONNX models often keep theirs beside model.onnx)
    default_model_filename = ""
    composite = True
    per_request = True
    cancellable = True
    decoupled = True

    def __init__(self, model_path: Path, config: ModelConfig, instance: InstanceSpec) -> None:
        folder = model_path if model_path.is_dir() else model_path.parent
        self._shared, self._key = _hold(folder, config, instance)
        self._model = self._shared.model
        self._closed = False

    def execute(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        raise UnsupportedError("the llm backend runs requests (execute_requests)")

    def execute_requests(
        self,
        inputs: dict[str, np.ndarray],
        outputs: list[str],
        requests: list[BatchRequest],
        cancellation: Cancellation | None = None,
    ) -> list[BatchOutcome]:
        """Generate for each request, sending its output to its sink as it comes; returns
        when all have ended."""
        outbox = Outbox()
        answers, replies, generations = self._read(inputs, requests, outbox)
        engine = self._model.engine
        for generation in generations.values():
            engine.submit(generation)
        if cancellation is not None:

            def forward(indexes: Iterable[int]) -> None:
                for index in indexes:
                    if index in generations:
                        engine.cancel(generations[index])

            cancellation.forward_to(forward)
        try:
            self._relay(outbox, replies, generations)
        finally:  # a relay that failed leaves nothing generating for nobody
            for index, reply in replies.items():
                if not reply.done:
                    engine.cancel(generations[index])
        for index, reply in replies.items():
            answers[index] = reply.outcome
        return answers

    def _read(
        self, inputs: dict[str, np.ndarray], requests: list[BatchRequest], outbox: Outbox
    ) -> tuple[list[BatchOutcome], dict[int, Reply], dict[int, Generation]]:
        """Each request read and made ready for the engine, or the error that refuses it
        alone: (answers so far, the replies and generations of those ready, by index)."""
        answers: list[BatchOutcome] = [{} for _ in requests]
        replies: dict[int, Reply] = {}
        generations: dict[int, Generation] = {}
        offset = 0
        for index, batch_request in enumerate(requests):
            rows = {n: a[offset : offset + batch_request.rows] for n, a in inputs.items()}
            offset += batch_request.rows
            try:
                request = read_request(rows, batch_request.parameters)
                generation = self._generation(request, outbox, index)
            except InferplexError as exc:
                answers[index] = exc
                continue
            replies[index] = Reply(request, generation.seq.prompt_len, batch_request.sink)
            generations[index] = generation
        return answers, replies, generations

    def _relay(
        self, outbox: Outbox, replies: dict[int, Reply], generations: dict[int, Generation]
    ) -> None:
        waiting = set(replies)
        while waiting:
            for index, pieces in outbox.take().items():
                reply = replies[index]
                if not reply.take(pieces) and not reply.done:
                    self._model.engine.cancel(generations[index])  # its reader went away
                if reply.done:
                    waiting.discard(index)

    def _generation(self, request: GenerateRequest, outbox: Outbox, index: int) -> Generation:
        model = self._model
        prompt = model.tokenizer.encode(request.prompt)
        return prepare(model, prompt, request.params, outbox.deliver_to(index))

    def engine_stats(self) -> EngineStats:
        """The version's engine now (the LLM metrics: one engine for all its instances)."""
        return self._model.engine.stats()

    def close(self) -> None:
        """The last instance of the version stops its engine."""
        if self._closed:
            return
        self._closed = True
        with _shared_lock:
            self._shared.holders -= 1
            last = self._shared.holders == 0
            if last:
                del _shared[self._key]
        if last:
            self._model.engine.close()

    @classmethod
    def gpu_available(cls) -> bool:
        return PyTorchBackend.gpu_available()  # the same torch, the same devices

    @classmethod
    def auto_complete(
        cls, config: ModelConfig | None, name: str, model_path: Path
    ) -> ModelConfig | None:
        """Triton's LLM signature (request.py), decoupled, unbatched, and one instance per
        sequence the engine runs at once, where the config does not say."""
        config = config or ModelConfig(name=name, backend="llm")
        update: dict[str, object] = {}
        if not config.input:
            update["input"] = INPUTS
            update["model_transaction_policy"] = ModelTransactionPolicy(decoupled=True)
        if not config.output:
            update["output"] = OUTPUTS
        if not config.instance_group:
            settings = read_settings(config.parameters, name)
            update["instance_group"] = (InstanceGroup(count=settings.max_num_seqs),)
        return config.model_copy(update=update) if update else config
