"""The engine's steps as units of the server's cross-model scheduler (core/step_gate.py),
through the real dispatcher, scheduler and a served vision-like model: with one compute slot
a step runs only in a slot the scheduler grants, and a model's batch queued while a step
waits is granted before the engine's next step (the scheduler's grant order, no clock)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from inferplex.backends.base import Backend  # noqa: E402
from inferplex.backends.llm.admission import prepare  # noqa: E402
from inferplex.backends.llm.engine import Engine  # noqa: E402
from inferplex.backends.llm.generation import Piece  # noqa: E402
from inferplex.backends.llm.loading import LoadedModel, load_model  # noqa: E402
from inferplex.backends.llm.params import SamplingParams  # noqa: E402
from inferplex.backends.llm.settings import EngineSettings  # noqa: E402
from inferplex.config import ModelConfig  # noqa: E402
from inferplex.core.caller import EngineCaller  # noqa: E402
from inferplex.core.dispatcher import Dispatcher  # noqa: E402
from inferplex.core.model import ModelVersion  # noqa: E402
from inferplex.core.registry import scheduling_policy  # noqa: E402
from inferplex.core.scheduler import Scheduler  # noqa: E402
from inferplex.core.step_gate import SchedulerGate  # noqa: E402
from inferplex.types import InferenceRequest, Tensor  # noqa: E402

TOKENS = 8


class Vision(Backend):
    """A batch that runs when the test lets it, noting how many engine steps ran before."""

    def __init__(self, engine: list[Engine], gate: threading.Semaphore) -> None:
        self.engine, self.gate = engine, gate
        self.steps_seen: list[int] = []

    def execute(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        self.steps_seen.append(self.engine[0].counters.steps)
        self.gate.acquire()
        return {"y": inputs["x"]}


def vision_config() -> ModelConfig:
    return ModelConfig(
        name="vision",
        max_batch_size=8,
        input=[{"name": "x", "data_type": "FP32", "dims": [1]}],
        output=[{"name": "y", "data_type": "FP32", "dims": [1]}],
        scheduling={"weight": 8},
    )


def vision_request() -> InferenceRequest:
    x = np.ones((1, 1), dtype=np.float32)
    return InferenceRequest("vision", [Tensor("x", "FP32", x.shape, x)])


async def until(condition, what: str) -> None:  # type: ignore[no-untyped-def]
    """Wait (on the loop, bounded) for something other threads do; never a timing claim."""
    for _ in range(5000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"waited in vain for {what}")


@pytest.fixture
def folder(llm_repository: Path) -> Iterator[Path]:
    yield llm_repository / "tiny_llama" / "1"


@dataclass
class Rig:
    """One compute slot shared by a vision model (weight 8) and an LLM engine (weight 1)."""

    dispatcher: Dispatcher
    vision: ModelVersion
    backend: Vision
    release: threading.Semaphore
    gate: SchedulerGate
    model: LoadedModel


async def rig(folder: Path) -> Rig:
    loop = asyncio.get_running_loop()
    dispatcher = Dispatcher(Scheduler("priority", 1), loop)
    holder: list[Engine] = []
    release = threading.Semaphore(0)
    backend = Vision(holder, release)
    vision = ModelVersion(vision_config(), 1, [backend], loop, dispatcher)
    dispatcher.add(vision.queueing, scheduling_policy(vision_config()))

    async def no_calls(request: InferenceRequest) -> object:
        raise AssertionError("the engine calls no model")

    gate = EngineCaller(no_calls, loop, dispatcher=dispatcher).step_gate(  # type: ignore[arg-type]
        ModelConfig(name="llm", backend="llm"), "llm/1 engine#1"
    )
    assert gate is not None
    settings = EngineSettings(kv_cache_bytes=1 << 22)
    model: LoadedModel = await asyncio.to_thread(
        load_model, folder, settings, torch.device("cpu"), 1, True, gate
    )
    holder.append(model.engine)
    return Rig(dispatcher, vision, backend, release, gate, model)


def submit(model: LoadedModel, deliver: Callable[[Piece], None]) -> None:
    ids = model.tokenizer.encode("The server loads models from a repository")
    params = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=TOKENS)
    model.engine.submit(prepare(model, ids, params, deliver))


async def test_a_priority_batch_is_granted_before_the_next_engine_step(folder: Path) -> None:
    r = await rig(folder)
    dispatcher, vision, backend, release, gate, model = (
        r.dispatcher, r.vision, r.backend, r.release, r.gate, r.model
    )  # fmt: skip
    pieces: list[Piece] = []
    done = threading.Event()

    def deliver(piece: Piece) -> None:
        pieces.append(piece)
        if piece.final:
            done.set()

    try:
        first = asyncio.create_task(vision.infer(vision_request()))  # takes the only slot
        await until(lambda: backend.steps_seen, "the first vision batch to run")
        submit(model, deliver)
        await until(lambda: gate.queue.pending_requests == 1, "the engine to ask for a slot")
        assert model.engine.counters.steps == 0  # no step while the vision batch holds the slot
        second = asyncio.create_task(vision.infer(vision_request()))
        await until(lambda: vision.queue.pending_requests == 1, "the second vision request")
        for _ in range(2):
            release.release()
        await asyncio.gather(first, second)
        # the engine was waiting first, so it had one step; the vision batch then went before
        # the engine's next step although the engine asked for it at once
        assert backend.steps_seen == [0, 1]
        await asyncio.to_thread(done.wait, 60)
        assert sum(p.tokens for p in pieces) == TOKENS and pieces[-1].finish_reason == "length"
        assert model.engine.counters.steps == TOKENS
        await until(lambda: dispatcher.scheduler.running == 0, "the last step's slot back")
    finally:
        for _ in range(4):
            release.release()
        await asyncio.to_thread(model.engine.close)
        vision.close()
    await until(lambda: gate.key not in dispatcher.scheduler.snapshot(), "the gate to leave")


async def test_unloading_while_a_step_waits_for_a_slot_ends_the_request(folder: Path) -> None:
    """The engine closed while its next step waits for the slot another model holds: the
    close returns (no step ever waits forever), the request ends with an error and the gate
    leaves the scheduler."""
    r = await rig(folder)
    pieces: list[Piece] = []
    try:
        busy = asyncio.create_task(r.vision.infer(vision_request()))
        await until(lambda: r.backend.steps_seen, "the vision batch to hold the slot")
        submit(r.model, pieces.append)
        await until(lambda: r.gate.queue.pending_requests == 1, "the engine to ask for a slot")
        await asyncio.wait_for(asyncio.to_thread(r.model.engine.close), 30)
        assert r.model.engine.counters.steps == 0
        assert len(pieces) == 1 and pieces[0].error is not None
        await until(lambda: r.gate.key not in r.dispatcher.scheduler.snapshot(), "the gate gone")
        r.release.release()
        await busy  # the slot's holder finishes as usual
        assert r.dispatcher.scheduler.running == 0
    finally:
        for _ in range(4):
            r.release.release()
        r.vision.close()
