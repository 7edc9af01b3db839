"""The continuous-batching policy without a model: admission under the step's token budget
and the pool's blocks, chunked prefill beside decodes, preemption of the newest sequences
by recompute, prefix-cache hits, finishing and freeing. Each step here plays the engine:
``schedule``, then ``computed`` and a token for each sampled chunk."""

from __future__ import annotations

from itertools import count

from inferplex.backends.llm.blocks import BlockPool
from inferplex.backends.llm.policy import SchedulingPolicy, Sequence, StepPlan

_ids = count()


def seq(prompt: int, max_new: int = 8, first: int = 0) -> Sequence:
    tokens = list(range(first, first + prompt))
    return Sequence(next(_ids), tokens, prompt, prompt + max_new)


def run_step(policy: SchedulingPolicy, token: int = 7) -> StepPlan:
    plan = policy.schedule()
    policy.computed(plan)
    for chunk in plan.chunks:
        if chunk.sample:
            policy.append(chunk.seq, token)
    return plan


def test_a_long_prompt_is_chunked_and_decodes_in_flight_keep_going() -> None:
    policy = SchedulingPolicy(BlockPool(64, 4), max_batched_tokens=8, max_seqs=8)
    short = seq(3)
    policy.add(short)
    run_step(policy)  # the short prompt whole: a token sampled
    long = seq(20)
    policy.add(long)
    steps = []
    while long.pending > 1 or long.computed == 0:
        plan = run_step(policy)
        steps.append([(c.seq is short, c.count) for c in plan.chunks])
        assert plan.tokens <= 8
    # every step decoded the short one (first, one token) beside a chunk of the long prompt
    assert all(step[0] == (True, 1) for step in steps)
    assert [n for step in steps for is_short, n in step if not is_short] == [7, 7, 6]
    assert long.computed == 20 and len(long.tokens) == 21


def test_admission_stops_at_max_seqs_and_resumes_when_one_finishes() -> None:
    policy = SchedulingPolicy(BlockPool(64, 4), max_batched_tokens=64, max_seqs=2)
    a, b, c = seq(2), seq(2), seq(2)
    for s in (a, b, c):
        policy.add(s)
    run_step(policy)
    assert policy.running == [a, b] and list(policy.waiting) == [c]
    policy.finish(a)
    assert a.blocks == []
    plan = run_step(policy)
    assert {id(ch.seq) for ch in plan.chunks} == {id(b), id(c)}


def test_preemption_takes_the_newest_and_it_resumes_with_all_its_tokens() -> None:
    # 4 blocks of 2 slots; two sequences of 3 prompt tokens take 2 blocks each; growing
    # past 4 tokens needs a third block: the newest is preempted for the oldest
    pool = BlockPool(4, 2)
    policy = SchedulingPolicy(pool, max_batched_tokens=16, max_seqs=4)
    old, new = seq(3), seq(3, first=10)
    policy.add(old)
    policy.add(new)
    run_step(policy)  # prompts: 3 tokens each, 4 blocks used
    run_step(policy)  # decodes: 4 tokens each, still 2 blocks each
    assert pool.available == 0
    plan = run_step(policy)  # the 5th token needs a block: the newest goes
    assert plan.preempted == [new] and policy.preemptions == 1
    assert new.blocks == [] and new.computed == 0 and list(policy.waiting) == [new]
    assert [c.seq for c in plan.chunks] == [old]
    assert len(new.tokens) == 5  # its prompt and its 2 tokens: all recomputed later
    policy.finish(old)
    plan = run_step(policy)
    # back with all 5 tokens: those of its blocks still cached are not computed again
    (chunk,) = plan.chunks
    assert chunk.seq is new and chunk.sample
    assert chunk.start == new.cached_tokens == 2 and chunk.start + chunk.count == 5


def test_a_sequence_alone_that_cannot_grow_is_preempted_rather_than_overcommitting() -> None:
    pool = BlockPool(2, 2)
    policy = SchedulingPolicy(pool, max_batched_tokens=16, max_seqs=4)
    only = seq(4)
    policy.add(only)
    run_step(policy)
    plan = policy.schedule()  # the 5th token needs a 3rd block: there is none
    assert plan.chunks == [] and plan.preempted == [only]
    assert pool.used == 0


def test_capacity_error_names_what_a_sequence_needs_beyond_the_pool() -> None:
    policy = SchedulingPolicy(BlockPool(4, 16), max_batched_tokens=16, max_seqs=4)
    assert policy.capacity_error(64) is None
    assert "needs 5 KV blocks" in (policy.capacity_error(65) or "")


def test_a_prompt_with_a_cached_prefix_computes_only_the_rest() -> None:
    pool = BlockPool(32, 4)
    policy = SchedulingPolicy(pool, max_batched_tokens=64, max_seqs=4)
    first = seq(10)
    policy.add(first)
    run_step(policy)
    policy.finish(first)  # its 2 full blocks stay cached
    again = seq(11)  # the same 10 tokens and one more
    policy.add(again)
    plan = run_step(policy)
    assert again.cached_tokens == 8
    assert plan.chunks[0].start == 8 and plan.chunks[0].count == 3
    assert pool.stats.hit == 2


def test_a_fully_cached_prompt_still_computes_its_last_token() -> None:
    pool = BlockPool(32, 4)
    policy = SchedulingPolicy(pool, max_batched_tokens=64, max_seqs=4)
    first = seq(8)
    policy.add(first)
    run_step(policy)
    policy.finish(first)
    again = seq(8)
    policy.add(again)
    plan = run_step(policy)
    assert again.cached_tokens == 4  # the second block holds the last token: computed
    assert (plan.chunks[0].start, plan.chunks[0].count) == (4, 4)


def test_finish_frees_a_waiting_or_running_sequence_once() -> None:
    pool = BlockPool(8, 4)
    policy = SchedulingPolicy(pool, max_batched_tokens=4, max_seqs=4)
    running, waiting = seq(4), seq(4)
    policy.add(running)
    policy.add(waiting)
    run_step(policy)
    assert policy.running == [running] and list(policy.waiting) == [waiting]
    policy.finish(waiting)
    policy.finish(running)
    policy.finish(running)
    assert policy.idle and pool.used == 0
