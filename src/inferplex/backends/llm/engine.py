"""The engine: a thread that runs steps while there is work. A step (``step``) admits what
the policy lets in, runs one forward pass for the batch, samples each sequence's next token
and hands each request its new output; it is a unit of work on its own, so something other
than this loop (the server's cross-model scheduler) can run steps one at a time.

Requests arrive and leave from other threads through the inbox (``submit``, ``cancel``),
taken at the start of each step: a request whose client went away leaves the batch and its
blocks go back to the pool within one step.

With a ``StepGate`` (the server's cross-model scheduler, through ``core.step_gate``) each step
of the loop runs in a compute slot the gate grants, as a batch of any other model does: a
model of higher priority gets the next slot before the engine's next step.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from dataclasses import dataclass

import torch

from inferplex.backends.engine_stats import EngineStats, TokenLatency
from inferplex.backends.llm.generation import ABORT, Generation, Piece
from inferplex.backends.llm.policy import SchedulingPolicy, Sequence
from inferplex.backends.llm.runner import ModelRunner
from inferplex.backends.llm.sampler import sample
from inferplex.backends.step_gate import StepGate
from inferplex.errors import InferplexError, ModelExecutionError, ModelNotReadyError

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class EngineCounters:
    """What the engine did so far (for metrics and tests)."""

    steps: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    finished: int = 0
    cancelled: int = 0


class Engine:
    """Generates for the requests submitted, in steps on its own thread."""

    def __init__(
        self,
        runner: ModelRunner,
        policy: SchedulingPolicy,
        threads: int,
        gate: StepGate | None = None,
    ) -> None:
        self.runner = runner
        self.policy = policy
        self.counters = EngineCounters()
        self.time_to_first_token = TokenLatency()
        self.inter_token_latency = TokenLatency()
        #: grants each step of the loop a compute slot (None: steps run when they can)
        self.gate = gate
        self._threads = threads
        self._ids = itertools.count()
        self._cond = threading.Condition(threading.Lock())
        self._new: list[Generation] = []
        self._cancelled: list[Generation] = []
        self._closed = False
        #: the requests in the policy's hands, by sequence id (the engine thread's alone)
        self._active: dict[int, Generation] = {}
        self._thread = threading.Thread(target=self._loop, name="llm-engine", daemon=True)

    def start(self) -> None:
        """Run steps on the engine's own thread from now on (else the caller runs them)."""
        self._thread.start()

    def next_seq_id(self) -> int:
        return next(self._ids)

    # -- other threads ---------------------------------------------------------------------------
    def submit(self, generation: Generation) -> None:
        """Queue a request (its capacity was checked); its pieces come through ``deliver``."""
        with self._cond:
            if self._closed:
                raise ModelNotReadyError("the model is unloading")
            generation.arrival = time.perf_counter()
            self._new.append(generation)
            self._cond.notify()

    def cancel(self, generation: Generation) -> None:
        """The request's client went away (any thread, never blocks for long)."""
        with self._cond:
            self._cancelled.append(generation)
            self._cond.notify()

    def close(self) -> None:
        """Stop the loop; requests still held end with an error."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self.gate is not None:  # a step waiting for a slot waits no more
            self.gate.close()
        if self._thread.is_alive():
            self._thread.join()
        error = ModelNotReadyError("the model was unloaded while generating")
        for generation in [*self._active.values(), *self._new]:
            generation.deliver(Piece("", 0, error=error))
        self._active.clear()
        self._new.clear()

    # -- the engine's thread ---------------------------------------------------------------------
    def _loop(self) -> None:
        if self._threads > 0:
            torch.set_num_threads(self._threads)
        while True:
            with self._cond:
                while not (self._closed or self._new or self._cancelled or self._active):
                    self._cond.wait()
                if self._closed:
                    return
            try:
                progressed = self._gated_step()
            except Exception as exc:  # a step that failed fails its requests, not the engine
                logger.exception("LLM engine step failed")
                self._fail_all(ModelExecutionError(f"generation failed: {exc}"))
                continue
            if not progressed:  # nothing can run until a request comes or goes
                with self._cond:
                    while not (self._closed or self._new or self._cancelled):
                        self._cond.wait()

    def _gated_step(self) -> bool:
        """One step in a compute slot of the gate, if there is one (False, without a step:
        the gate closed)."""
        gate = self.gate
        if gate is None:
            return self.step()
        grant = gate.acquire()
        if grant is None:
            return False
        try:
            return self.step()
        finally:
            gate.release(grant)

    def stats(self) -> EngineStats:
        """The engine's state and totals now (any thread: see ``backends/engine_stats.py``)."""
        policy = self.policy
        pool = policy.pool
        counters = self.counters
        return EngineStats(
            running=len(policy.running),
            waiting=len(policy.waiting),
            kv_blocks_used=pool.used,
            kv_blocks_total=pool.num_blocks,
            prefix_queried_blocks=pool.stats.queried,
            prefix_hit_blocks=pool.stats.hit,
            preemptions=policy.preemptions,
            steps=counters.steps,
            prompt_tokens=counters.prompt_tokens,
            generated_tokens=counters.generated_tokens,
            finished=counters.finished,
            cancelled=counters.cancelled,
            time_to_first_token=self.time_to_first_token.read(),
            inter_token_latency=self.inter_token_latency.read(),
        )

    def step(self) -> bool:
        """One step; False when there was nothing to run."""
        self._take_inbox()
        policy = self.policy
        plan = policy.schedule()
        if not plan.chunks:
            return False
        sampled, logits = self.runner.run(plan)
        policy.computed(plan)
        self.counters.steps += 1
        self.counters.prompt_tokens += sum(
            c.count for c in plan.chunks if c.start < c.seq.prompt_len
        )
        active = self._active
        generations = [active[chunk.seq.seq_id] for chunk in sampled]
        tokens = sample(logits, [g.sampling_row() for g in generations])
        now = time.perf_counter()
        first, between = self.time_to_first_token.observe, self.inter_token_latency.observe
        for generation, token in zip(generations, tokens, strict=True):
            policy.append(generation.seq, token)
            if generation.generated:
                between(now - generation.last_token)
            else:
                first(now - generation.arrival)
            generation.last_token = now
            piece = generation.accept(token)
            if piece.final:
                self._retire(generation)
            generation.deliver(piece)
        self.counters.generated_tokens += len(tokens)
        return True

    def _take_inbox(self) -> None:
        with self._cond:
            new, self._new = self._new, []
            cancelled, self._cancelled = self._cancelled, []
        for generation in new:
            self._active[generation.seq.seq_id] = generation
            self.policy.add(generation.seq)
        for generation in cancelled:
            if generation.seq.seq_id in self._active:
                self._retire(generation)
                self.counters.cancelled += 1
                generation.deliver(Piece("", 0, ABORT))

    def _retire(self, generation: Generation) -> None:
        seq: Sequence = generation.seq
        self.policy.finish(seq)
        del self._active[seq.seq_id]
        self.counters.finished += 1

    def _fail_all(self, error: InferplexError) -> None:
        for generation in list(self._active.values()):
            self._retire(generation)
            generation.deliver(Piece("", 0, error=error))
