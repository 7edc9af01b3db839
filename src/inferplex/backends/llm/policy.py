"""The continuous-batching policy: which sequences run in the next step and how many of
their tokens. Pure (no torch, no clock, no I/O): the engine owns the model and the thread,
and calls ``schedule`` before each forward pass and ``computed``/``append``/``finish``
after it.

Each step has a budget of tokens (``max_batched_tokens``) and of sequences
(``max_seqs``). Sequences decoding go first (one token each), then prompts part-way through
their prefill, then waiting sequences in arrival order: a long prompt is split across steps
(chunked prefill), so the decodes in flight are never held up by it. A sequence's blocks
cover the tokens computed so far; when the pool runs out, the newest running sequence is
preempted: its blocks go back and it waits again at the head of the line, to recompute its
prompt and the tokens it generated (the cache is never overcommitted, so a step never runs
out of memory). Full blocks are shared with later prompts that begin the same way (prefix
caching in ``blocks.BlockPool``).
"""

from __future__ import annotations

import contextlib
from collections import deque
from dataclasses import dataclass, field

from inferplex.backends.llm.blocks import BlockKey, BlockPool, block_keys


@dataclass(eq=False, slots=True)
class Sequence:
    """One request's tokens (its prompt, then what was generated) and its cache blocks."""

    seq_id: int
    tokens: list[int]
    prompt_len: int
    #: the most tokens it may hold (prompt + max_tokens): what it may ever need of the pool
    max_len: int
    blocks: list[int] = field(default_factory=list)
    #: tokens whose keys and values are in its blocks
    computed: int = 0
    #: full blocks registered for prefix caching so far
    registered: int = 0
    #: prompt tokens found in the prefix cache at admission
    cached_tokens: int = 0
    preemptions: int = 0
    finished: bool = False

    @property
    def pending(self) -> int:
        """Tokens still to run through the model before the next one can be sampled."""
        return len(self.tokens) - self.computed


@dataclass(frozen=True, slots=True)
class Chunk:
    """``count`` tokens of ``seq``, from position ``start``, in this step's forward pass;
    ``sample``: the chunk ends the sequence's pending tokens, so a token is sampled."""

    seq: Sequence
    start: int
    count: int
    sample: bool


@dataclass(slots=True)
class StepPlan:
    """One step: the chunks to run (decodes first) and the sequences preempted for them."""

    chunks: list[Chunk] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return sum(c.count for c in self.chunks)


class SchedulingPolicy:
    """Waiting and running sequences over one block pool (see the module docstring)."""

    def __init__(self, pool: BlockPool, max_batched_tokens: int, max_seqs: int) -> None:
        if max_batched_tokens < 1 or max_seqs < 1:
            raise ValueError("a step needs room for at least one token and one sequence")
        self.pool = pool
        self.max_batched_tokens = max_batched_tokens
        self.max_seqs = max_seqs
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # in admission order: the newest last
        self.preemptions = 0

    def capacity_error(self, max_len: int) -> str | None:
        """Why a sequence of at most ``max_len`` tokens can never run here, or None."""
        needed = -(-max_len // self.pool.block_size)
        if needed > self.pool.num_blocks:
            return (
                f"needs {needed} KV blocks of {self.pool.block_size} tokens, the cache holds "
                f"{self.pool.num_blocks}"
            )
        return None

    def add(self, seq: Sequence) -> None:
        """Queue a new sequence (the caller checked ``capacity_error``)."""
        self.waiting.append(seq)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    # -- one step ----------------------------------------------------------------------------
    def schedule(self) -> StepPlan:
        """The chunks of the next step; may preempt running sequences for room."""
        plan = StepPlan()
        budget = self.max_batched_tokens
        decoding = [s for s in self.running if s.pending == 1]
        prefilling = [s for s in self.running if s.pending > 1]
        for seq in (*decoding, *prefilling):
            if budget == 0:
                break
            if seq not in self.running:  # preempted earlier in this step
                continue
            count = min(seq.pending, budget)
            if self._grow(seq, count, plan):
                plan.chunks.append(Chunk(seq, seq.computed, count, count == seq.pending))
                budget -= count
        self._admit(plan, budget)
        return plan

    def _grow(self, seq: Sequence, count: int, plan: StepPlan) -> bool:
        """Blocks for ``count`` more tokens of a running ``seq``, preempting the newest
        running sequences while the pool is short; False if ``seq`` itself was preempted."""
        needed = self._blocks_needed(seq, count)
        while True:
            blocks = self.pool.allocate(needed)
            if blocks is not None:
                seq.blocks += blocks
                return True
            victim = self.running[-1]
            self._preempt(victim, plan)
            if victim is seq:
                return False

    def _admit(self, plan: StepPlan, budget: int) -> None:
        """Start waiting sequences in order while the step has room and the pool has blocks
        (none in a step that preempted: the pool is short, and the preempted would come
        straight back)."""
        if plan.preempted:
            return
        while self.waiting and budget > 0 and len(self.running) < self.max_seqs:
            seq = self.waiting[0]
            if not seq.blocks:
                self._match_prefix(seq)
            count = min(seq.pending, budget)
            blocks = self.pool.allocate(self._blocks_needed(seq, count))
            if blocks is None:  # it waits for blocks; those behind it wait their turn
                self._drop_blocks(seq)  # holding its cached prefix meanwhile would cost
                break
            seq.blocks += blocks
            self.waiting.popleft()
            self.running.append(seq)
            plan.chunks.append(Chunk(seq, seq.computed, count, count == seq.pending))
            budget -= count

    def _match_prefix(self, seq: Sequence) -> None:
        """Share the cached blocks of the longest cached prefix of ``seq``'s tokens; the last
        token is always computed (its logits give the next token)."""
        full = (len(seq.tokens) - 1) // self.pool.block_size
        found = self.pool.match(block_keys(seq.tokens, self.pool.block_size, full))
        seq.blocks = found
        seq.computed = len(found) * self.pool.block_size
        seq.registered = len(found)
        seq.cached_tokens = seq.computed

    def _blocks_needed(self, seq: Sequence, count: int) -> int:
        size = self.pool.block_size
        return max(0, -(-(seq.computed + count) // size) - len(seq.blocks))

    def _preempt(self, seq: Sequence, plan: StepPlan) -> None:
        # a decode of this step may be the newest: it leaves the step too
        plan.chunks = [c for c in plan.chunks if c.seq is not seq]
        self.running.remove(seq)
        self._drop_blocks(seq)
        seq.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(seq)
        plan.preempted.append(seq)

    def _drop_blocks(self, seq: Sequence) -> None:
        self.pool.release(seq.blocks)
        seq.blocks = []
        seq.computed = seq.registered = 0

    # -- after the forward pass --------------------------------------------------------------
    def computed(self, plan: StepPlan) -> None:
        """The step ran: its chunks' tokens are in the cache (full blocks become shareable)."""
        size = self.pool.block_size
        for chunk in plan.chunks:
            seq = chunk.seq
            seq.computed = chunk.start + chunk.count
            full = seq.computed // size
            if full > seq.registered and self.pool.prefix_caching:
                keys: list[BlockKey] = block_keys(seq.tokens, size, full)
                for index in range(seq.registered, full):
                    self.pool.register(seq.blocks[index], keys[index])
            seq.registered = full

    def append(self, seq: Sequence, token: int) -> None:
        """A token sampled for ``seq`` (it runs through the model in the next step)."""
        seq.tokens.append(token)

    def finish(self, seq: Sequence) -> None:
        """``seq`` ended (done, stopped or cancelled): it leaves and its blocks go back."""
        if seq.finished:
            return
        seq.finished = True
        if seq in self.running:
            self.running.remove(seq)
        else:
            with contextlib.suppress(ValueError):
                self.waiting.remove(seq)
        self._drop_blocks(seq)
