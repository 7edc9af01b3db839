"""The cross-model scheduler, driven directly with a fake clock (no threads, no sleeps)."""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable, Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplex.core.model_share import AIM, MAX_BOOST
from inferplex.core.scheduler import ModelPolicy, Policy, Scheduler, Ticket
from inferplex.errors import ConfigError


def scheduler(policy: Policy, slots: int, **models: ModelPolicy | float) -> Scheduler:
    """A scheduler with the given models registered (a float is a plain weight)."""
    sched = Scheduler(policy, slots)
    for key, model in models.items():
        sched.register(key, model if isinstance(model, ModelPolicy) else ModelPolicy(weight=model))
    return sched


def pick_and_start(sched: Scheduler, candidates: list[str], now: float) -> Ticket:
    key = sched.pick(candidates, now)
    assert key is not None
    return sched.start(key, now)


def run_once(sched: Scheduler, candidates: list[str], now: float, cost: float = 0.001) -> str:
    """Pick, start and finish one batch; returns the model that ran."""
    ticket = pick_and_start(sched, candidates, now)
    sched.finish(ticket, now + cost, [cost])
    return ticket.key


def simulate(
    sched: Scheduler,
    costs: Mapping[str, float],
    until: float,
    *,
    start: float = 0.0,
    latency: Callable[[str], float] | None = None,
) -> Counter[str]:
    """Every model always has a batch ready and as many instances as there are slots; each
    batch of a model takes its fixed cost. Returns the executions per model."""
    now, seq = start, 0
    running: list[tuple[float, int, Ticket]] = []
    busy: Counter[str] = Counter()
    started: Counter[str] = Counter()
    while now < until:
        while (key := sched.pick([k for k in costs if busy[k] < sched.slots], now)) is not None:
            heapq.heappush(running, (now + costs[key], seq, sched.start(key, now)))
            busy[key] += 1
            started[key] += 1
            seq += 1
        now, _, ticket = heapq.heappop(running)
        busy[ticket.key] -= 1
        sched.finish(ticket, now, [latency(ticket.key) if latency else costs[ticket.key]])
    return started


def shares(
    before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]
) -> dict[str, float]:
    """Each model's share of the compute seconds used between two snapshots."""
    used = {k: after[k]["compute_s"] - before.get(k, {}).get("compute_s", 0.0) for k in after}
    total = sum(used.values())
    return {k: v / total for k, v in used.items()}


# --- round robin ----------------------------------------------------------------------------


def test_round_robin_rotates_in_a_stable_order() -> None:
    sched = scheduler("round_robin", 1, b=1.0, a=1.0, c=1.0)
    picks = [run_once(sched, ["c", "b", "a"], float(i)) for i in range(7)]
    assert picks == ["a", "b", "c", "a", "b", "c", "a"]


def test_round_robin_starts_after_the_last_started_model() -> None:
    sched = scheduler("round_robin", 1, a=1.0, b=1.0, c=1.0, d=1.0)
    assert run_once(sched, ["b", "d"], 0.0) == "b"
    assert run_once(sched, ["a", "b"], 1.0) == "a"  # nothing after b: wrap around
    assert run_once(sched, ["a", "c", "d"], 2.0) == "c"
    sched.unregister("c")  # the last started model leaves: start from the beginning
    assert run_once(sched, ["a", "d"], 3.0) == "a"


def test_round_robin_gives_equal_turns_whatever_the_cost() -> None:
    sched = scheduler("round_robin", 1, cheap=1.0, dear=5.0)
    started = simulate(sched, {"cheap": 0.001, "dear": 0.004}, 1.0)
    assert abs(started["cheap"] - started["dear"]) <= 1


# --- priority: weighted fair sharing ---------------------------------------------------------


@pytest.mark.parametrize(
    ("slots", "weights", "costs"),
    [
        (1, {"a": 1.0, "b": 2.0, "c": 5.0}, {"a": 0.001, "b": 0.003, "c": 0.002}),
        (2, {"light": 1.0, "heavy": 3.0}, {"light": 0.002, "heavy": 0.005}),
        (3, {"a": 1.0, "b": 1.0, "c": 4.0}, {"a": 0.004, "b": 0.001, "c": 0.002}),
    ],
)
def test_weighted_shares_converge_to_the_weights(
    slots: int, weights: dict[str, float], costs: dict[str, float]
) -> None:
    sched = scheduler("priority", slots, **weights)
    simulate(sched, costs, 20.0)
    total = sum(weights.values())
    for key, share in shares({}, sched.snapshot()).items():
        assert share == pytest.approx(weights[key] / total, abs=0.01)


def test_a_newly_active_model_does_not_claim_a_backlog() -> None:
    sched = scheduler("priority", 1, old=1.0)
    simulate(sched, {"old": 0.001}, 5.0)
    sched.register("new", ModelPolicy())
    picks = [run_once(sched, ["old", "new"], 5.0 + i * 0.001) for i in range(20)]
    assert picks.count("new") == 10  # equal weights, equal cost: it alternates from the start


def test_a_model_back_from_idle_starts_at_the_floor_but_a_busy_one_keeps_its_place() -> None:
    def second_model_after(idle: bool) -> float:
        sched = scheduler("priority", 2, a=1.0, b=10.0)
        ticket_b = pick_and_start(sched, ["b"], 0.0)
        # for one second `a` runs batch after batch in the other slot; `b` runs one long batch
        # (idle=False) or had finished at once and sent nothing since (idle=True)
        if idle:
            sched.finish(ticket_b, 0.0, [])
        for i in range(1000):
            assert run_once(sched, ["a"], i * 0.001) == "a"
        if not idle:
            sched.finish(ticket_b, 1.0, [1.0])
        sched.pick(["a", "b"], 1.0)
        return sched.snapshot()["b"]["virtual_time"]

    assert second_model_after(idle=False) == pytest.approx(0.1)  # 1 s of compute / weight 10
    assert second_model_after(idle=True) == pytest.approx(1.0)  # lifted to a's virtual time


def test_a_starting_batch_is_charged_its_estimated_cost_at_once() -> None:
    sched = scheduler("priority", 2, a=2.0, b=1.0)
    sched.finish(sched.start("a", 0.0), 0.010, [])  # a: 10 ms / weight 2 = 0.005
    sched.finish(sched.start("b", 0.010), 0.014, [])  # b: 4 ms / weight 1 = 0.004
    assert sched.pick(["a", "b"], 0.014) == "b"
    sched.start("b", 0.014)  # charged its 4 ms estimate now, not when it finishes
    assert sched.pick(["a", "b"], 0.014) == "a"


def test_tied_candidates_follow_triton_rate_limiter_priority() -> None:
    sched = scheduler(
        "priority", 1, a=ModelPolicy(resource_priority=1), b=ModelPolicy(resource_priority=2)
    )
    # batches that take no time keep the virtual times tied: Triton's rule decides
    picks = Counter(run_once(sched, ["a", "b"], 0.0, cost=0.0) for _ in range(300))
    assert picks == {"a": 200, "b": 100}


# --- priority: slot reservation --------------------------------------------------------------


def test_lower_weight_models_leave_a_slot_for_the_important_active_model() -> None:
    sched = scheduler("priority", 2, high=4.0, low=1.0)
    sched.note_arrival("high", 0.0)
    pick_and_start(sched, ["low"], 0.0)
    assert sched.pick(["low"], 0.5) is None  # one slot free, but it is held for `high`
    assert sched.pick(["low", "high"], 0.5) == "high"
    assert sched.pick(["low"], 1.5) == "low"  # no request to `high` in the last second


def test_reservation_counts_every_lower_weight_model_together() -> None:
    sched = scheduler("priority", 3, high=4.0, mid=2.0, low=1.0)
    sched.note_arrival("high", 0.0)
    sched.start("mid", 0.0)
    pick_and_start(sched, ["low"], 0.0)
    assert sched.pick(["mid", "low"], 0.1) is None
    assert sched.pick(["mid", "low", "high"], 0.1) == "high"


@pytest.mark.parametrize(
    ("slots", "weights"), [(2, {"x": 1.0, "y": 1.0}), (1, {"x": 1.0, "y": 4.0})]
)
def test_no_reservation_among_equals_or_with_a_single_slot(
    slots: int, weights: dict[str, float]
) -> None:
    sched = scheduler("priority", slots, **weights)
    sched.note_arrival("y", 0.0)
    for _ in range(slots):
        pick_and_start(sched, ["x"], 0.0)
    assert sched.running == slots


def test_round_robin_reserves_nothing() -> None:
    sched = scheduler("round_robin", 2, high=4.0, low=1.0)
    sched.note_arrival("high", 0.0)
    sched.start("low", 0.0)
    assert sched.pick(["low"], 0.0) == "low"


def test_under_a_flood_the_important_model_always_finds_a_slot() -> None:
    sched = scheduler("priority", 2, high=4.0, low=1.0)
    now, low_running = 0.0, []
    for step in range(200):
        now += 0.001
        sched.note_arrival("high", now)
        while (key := sched.pick(["low"], now)) is not None:
            low_running.append(sched.start(key, now))
        assert len(low_running) == 1
        if step % 3 == 0:
            assert sched.pick(["low", "high"], now) == "high"
            sched.finish(sched.start("high", now), now + 0.0005, [0.001])
        sched.finish(low_running.pop(0), now, [0.01])


# --- adaptive --------------------------------------------------------------------------------


def test_adaptive_raises_the_share_of_a_model_missing_its_target_then_decays_back() -> None:
    sched = scheduler("adaptive", 1, slo=ModelPolicy(slo_p99_ms=10.0), other=1.0, untargeted=1.0)
    costs = {"slo": 0.002, "other": 0.002, "untargeted": 0.002}
    slow = {"slo": 0.05, "other": 0.05, "untargeted": 0.5}  # slo misses 10 ms
    simulate(sched, costs, 2.0, latency=slow.__getitem__)
    before = sched.snapshot()
    assert before["slo"]["effective_weight"] == MAX_BOOST
    assert before["untargeted"]["effective_weight"] == 1.0  # no target: base weight
    assert before["slo"]["p99_ms"] == pytest.approx(50.0)
    simulate(sched, costs, 4.0, start=2.0, latency=slow.__getitem__)
    missing = shares(before, sched.snapshot())
    assert missing["slo"] == pytest.approx(MAX_BOOST / (MAX_BOOST + 2), abs=0.02)

    fast = {"slo": 0.001, "other": 0.05, "untargeted": 0.5}  # slo now well under its target
    simulate(sched, costs, 14.0, start=4.0, latency=fast.__getitem__)
    before = sched.snapshot()
    assert before["slo"]["effective_weight"] == 1.0
    simulate(sched, costs, 17.0, start=14.0, latency=fast.__getitem__)
    assert shares(before, sched.snapshot())["slo"] == pytest.approx(1 / 3, abs=0.02)


def test_adaptive_steers_to_headroom_under_the_target() -> None:
    target_ms = 10.0
    sched = scheduler("adaptive", 2, slo=ModelPolicy(slo_p99_ms=target_ms), other=1.0)
    near = (AIM + (1 - AIM) / 2) * target_ms / 1000  # under the target, above the aim
    sched.finish(sched.start("slo", 0.0), 0.1, [near])
    assert sched.snapshot()["slo"]["effective_weight"] > 1.0
    sched.note_arrival("slo", 0.1)
    sched.start("other", 0.1)
    assert sched.pick(["other"], 0.2) is None  # above the aim: the reservation holds a slot

    calm = scheduler("adaptive", 2, slo=ModelPolicy(slo_p99_ms=target_ms), other=1.0)
    calm.finish(calm.start("slo", 0.0), 0.1, [0.99 * AIM * target_ms / 1000])
    assert calm.snapshot()["slo"]["effective_weight"] == 1.0


def test_priority_policy_ignores_latency_targets() -> None:
    sched = scheduler("priority", 1, slo=ModelPolicy(slo_p99_ms=1.0), other=1.0)
    simulate(sched, {"slo": 0.002, "other": 0.002}, 1.0, latency=lambda _: 1.0)
    assert sched.snapshot()["slo"]["effective_weight"] == 1.0


def test_a_model_missing_its_target_gets_the_slot_reservation() -> None:
    sched = scheduler("adaptive", 2, slo=ModelPolicy(slo_p99_ms=10.0), other=1.0)
    sched.finish(sched.start("slo", 0.0), 0.1, [0.1])  # p99 100 ms: missing
    sched.note_arrival("slo", 0.1)
    sched.start("other", 0.1)
    assert sched.pick(["other"], 0.2) is None
    assert sched.pick(["other", "slo"], 0.2) == "slo"


def missed_target(slots: int = 2) -> Scheduler:
    """adaptive: ``slo`` (weight 8, target 20 ms) active and just missing its target by 2.5x
    beside ``low`` (weight 1, no target): the guard has cut the untargeted share to 0.5."""
    sched = scheduler("adaptive", slots, slo=ModelPolicy(weight=8.0, slo_p99_ms=20.0), low=1.0)
    sched.note_arrival("slo", 0.0)
    sched.finish(sched.start("slo", 0.0), 0.05, [0.05])
    assert sched.untargeted_share == 0.5
    return sched


def test_a_missed_target_paces_the_models_without_one() -> None:
    sched = missed_target()
    sched.register("own", ModelPolicy(slo_p99_ms=500.0))  # a target of its own: never paced
    sched.finish(pick_and_start(sched, ["low"], 0.1), 0.11, [0.01])
    # 10 ms run at half of the one execution's worth the reservation leaves: next at 0.12
    assert sched.pick(["low"], 0.115) is None
    assert sched.reservation_lifts() == pytest.approx(0.12)  # before the window lifts at 1.0
    assert sched.pick(["low", "slo"], 0.115) == "slo"
    assert sched.pick(["low", "own"], 0.115) == "own"
    assert sched.pick(["low"], 0.12) == "low"


def test_paced_models_use_their_share_of_the_capacity() -> None:
    sched = missed_target()
    now, until, end, ticket = 0.0, 2.0, 0.0, None
    while now < until:
        sched.note_arrival("slo", now)  # keeps the target's model active; it runs no batch
        if ticket is not None and now >= end:
            sched.finish(ticket, now, [0.01])
            ticket = None
        if ticket is None and sched.pick(["low"], now) == "low":
            ticket, end = sched.start("low", now), now + 0.010
        now = round(now + 0.001, 6)
    assert sched.snapshot()["low"]["compute_s"] == pytest.approx(0.5 * until, abs=0.02)


def test_pacing_ends_when_the_targeted_model_goes_quiet() -> None:
    sched = missed_target()
    sched.finish(pick_and_start(sched, ["low"], 0.1), 0.6, [0.5])  # paced until 1.1
    assert sched.pick(["low"], 0.9) is None
    assert sched.pick(["low"], 1.05) == "low"  # no request to slo within the last second


def test_the_untargeted_share_comes_back_once_the_target_is_met_again() -> None:
    sched = missed_target()
    sched.finish(pick_and_start(sched, ["low"], 0.1), 0.6, [0.5])  # paced until 1.1
    now = 0.6
    while sched.untargeted_share < 1.0:
        # the 50 ms latency is the p99 until it leaves the 5 s window (meanwhile the share is
        # cut to the minimum), then the share grows by 5 % per adjustment
        assert now < 6.5
        now += 0.06
        sched.note_arrival("slo", now)
        sched.finish(sched.start("slo", now), now, [0.002])
    assert now > 5.05
    assert sched.pick(["low"], now) == "low"


def test_the_priority_policy_never_paces() -> None:
    sched = scheduler("priority", 2, slo=ModelPolicy(weight=8.0, slo_p99_ms=20.0), low=1.0)
    sched.note_arrival("slo", 0.0)
    sched.finish(sched.start("slo", 0.0), 0.05, [0.05])
    assert sched.untargeted_share == 1.0
    sched.finish(pick_and_start(sched, ["low"], 0.1), 0.11, [0.01])
    assert sched.pick(["low"], 0.11) == "low"


# --- resources (Triton's rate limiter) -------------------------------------------------------


def test_default_resource_totals_are_the_largest_request() -> None:
    sched = scheduler(
        "round_robin",
        4,
        a=ModelPolicy(resources={"R1": 4, "R2": 4}),
        b=ModelPolicy(resources={"R2": 5, "R3": 10, "R4": 5}),
        c=ModelPolicy(resources={"R1": 1, "R3": 7, "R4": 2}),
    )
    assert sched.resource_totals == {"R1": 4, "R2": 5, "R3": 10, "R4": 5}
    sched.unregister("b")
    assert sched.resource_totals == {"R1": 4, "R2": 4, "R3": 7, "R4": 2}


def test_explicit_resource_totals() -> None:
    sched = Scheduler("priority", 4, resources={"gpu": 3})
    sched.register("a", ModelPolicy(resources={"gpu": 1, "mem": 2}))
    assert sched.resource_totals == {"gpu": 3, "mem": 2}  # mem: not given, so the default
    with pytest.raises(ConfigError, match=r"needs 4 of resource 'gpu'.*only 3"):
        sched.register("b", ModelPolicy(resources={"gpu": 4}))
    sched.start("a", 0.0)
    assert sched.free_resources() == {"gpu": 2, "mem": 0}


def test_a_model_needing_more_than_is_free_waits() -> None:
    sched = scheduler(
        "round_robin",
        4,
        small=ModelPolicy(resources={"R": 1}),
        big=ModelPolicy(resources={"R": 2}),
        free=1.0,
    )
    first = sched.start("small", 0.0)
    assert sched.pick(["big"], 0.0) is None
    assert sched.pick(["big", "free"], 0.0) == "free"
    with pytest.raises(RuntimeError, match="needs"):
        sched.start("big", 0.0)
    sched.finish(first, 0.1, [0.1])
    assert sched.pick(["big"], 0.1) == "big"


def test_a_waiting_model_is_not_overtaken_on_the_resources_it_waits_for() -> None:
    sched = scheduler(
        "round_robin",
        4,
        a=ModelPolicy(resources={"R": 1}),
        b=ModelPolicy(resources={"R": 2}),
        c=ModelPolicy(resources={"R": 1}),
        d=ModelPolicy(resources={"S": 1}),
    )
    held = sched.start("a", 0.0)
    # rotation after `a`: b (blocked: waits for R), c (needs R: waits behind b), d (other)
    assert sched.pick(["b", "c", "d"], 0.0) == "d"
    assert sched.pick(["b", "c"], 0.0) is None
    sched.finish(held, 0.1, [])
    assert sched.pick(["b", "c"], 0.1) == "b"


# --- slots, balance, snapshot, errors --------------------------------------------------------


def test_slots_are_never_exceeded() -> None:
    sched = scheduler("priority", 2, a=1.0, b=1.0)
    tickets = [pick_and_start(sched, ["a", "b"], 0.0) for _ in range(2)]
    assert sched.running == 2
    assert sched.pick(["a", "b"], 0.0) is None
    with pytest.raises(RuntimeError, match="all 2 slots"):
        sched.start("a", 0.0)
    sched.finish(tickets[0], 0.1, [])
    assert sched.pick(["a", "b"], 0.1) is not None


def test_start_and_finish_balance_exactly() -> None:
    sched = scheduler("priority", 2, a=ModelPolicy(resources={"R": 1}))
    ticket = sched.start("a", 0.0)
    assert sched.free_resources() == {"R": 0}
    sched.finish(ticket, 0.1, [0.1])
    assert (sched.running, sched.free_resources()) == (0, {"R": 1})
    with pytest.raises(RuntimeError, match="already finished"):
        sched.finish(ticket, 0.2, [])
    other = scheduler("priority", 1, a=1.0)
    with pytest.raises(RuntimeError, match="not ours"):
        other.finish(sched.start("a", 0.3), 0.4, [])


def test_an_unregistered_model_keeps_its_slot_until_its_batch_finishes() -> None:
    sched = scheduler("priority", 1, a=ModelPolicy(resources={"R": 1}), b=1.0)
    ticket = sched.start("a", 0.0)
    sched.unregister("a")
    assert sched.pick(["b"], 0.0) is None
    sched.finish(ticket, 0.1, [0.1])
    assert sched.running == 0
    assert sched.pick(["b"], 0.1) == "b"


def test_snapshot_contents() -> None:
    sched = scheduler("adaptive", 2, a=ModelPolicy(weight=2.0, slo_p99_ms=50.0), b=1.0)
    sched.finish(sched.start("a", 0.0), 0.3, [0.01, 0.02, 0.03])
    sched.finish(sched.start("b", 0.3), 0.4, [])
    sched.start("b", 0.4)
    snap = sched.snapshot()
    assert set(snap) == {"a", "b"}
    a, b = snap["a"], snap["b"]
    assert set(a) == {
        "share", "weight", "effective_weight", "p99_ms", "slo_p99_ms",
        "running", "executions", "compute_s", "virtual_time",
    }  # fmt: skip
    assert (a["share"], b["share"]) == (pytest.approx(0.75), pytest.approx(0.25))
    assert (a["weight"], a["effective_weight"], a["slo_p99_ms"]) == (2.0, 2.0, 50.0)
    assert a["p99_ms"] == pytest.approx(30.0)
    assert math.isnan(b["p99_ms"]) and math.isnan(b["slo_p99_ms"])
    assert (a["running"], b["running"], b["executions"]) == (0.0, 1.0, 2.0)
    assert a["compute_s"] == pytest.approx(0.3)
    assert a["virtual_time"] == pytest.approx(0.15)


def test_latencies_age_out_of_the_window() -> None:
    sched = scheduler("adaptive", 1, a=ModelPolicy(slo_p99_ms=10.0))
    sched.finish(sched.start("a", 0.0), 0.0, [0.5])
    sched.finish(sched.start("a", 10.0), 10.0, [0.002])
    assert sched.snapshot()["a"]["p99_ms"] == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("make", "error", "fragment"),
    [
        (lambda: Scheduler("fifo", 1), ValueError, "unknown scheduling policy"),  # type: ignore[arg-type]
        (lambda: Scheduler("priority", 0), ValueError, "slots"),
        (lambda: Scheduler("priority", 1, {"R": -1}), ValueError, "resource 'R'"),
        (lambda: scheduler("priority", 1, a=ModelPolicy(weight=0)), ConfigError, "weight"),
        (lambda: scheduler("priority", 1, a=ModelPolicy(slo_p99_ms=-1)), ConfigError, "slo"),
        (
            lambda: scheduler("priority", 1, a=ModelPolicy(resources={"R": -2})),
            ConfigError,
            "resource 'R'",
        ),
        (lambda: scheduler("priority", 1, a=1.0).pick(["zz"], 0.0), KeyError, "'zz'"),
    ],
)
def test_bad_arguments_are_refused(make: Callable[[], object], error: type, fragment: str) -> None:
    with pytest.raises(error, match=fragment):
        make()


# --- properties ------------------------------------------------------------------------------

MODEL = st.builds(
    ModelPolicy,
    weight=st.sampled_from([0.5, 1.0, 2.0, 8.0]),
    slo_p99_ms=st.none() | st.sampled_from([1.0, 20.0]),
    resources=st.dictionaries(st.sampled_from(["R", "S"]), st.integers(0, 3), max_size=2),
    resource_priority=st.integers(0, 3),
)


OPS = st.lists(
    st.tuples(
        st.sampled_from(["pick", "pick", "finish", "arrive"]),
        st.sampled_from([0.0, 0.001, 0.05, 0.7]),  # clock advance
        st.integers(0, 31),  # pick: bit mask of the candidates; else which ticket / model
        st.lists(st.floats(0.0, 0.1), max_size=3),  # latencies reported at finish
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(
    policy=st.sampled_from(["round_robin", "priority", "adaptive"]),
    slots=st.integers(1, 4),
    explicit=st.dictionaries(st.sampled_from(["R", "S"]), st.integers(3, 6), max_size=2),
    models=st.lists(MODEL, min_size=1, max_size=5),
    ops=OPS,
)
def test_random_operations_keep_every_invariant(
    policy: Policy,
    slots: int,
    explicit: dict[str, int],
    models: list[ModelPolicy],
    ops: list[tuple[str, float, int, list[float]]],
) -> None:
    sched = Scheduler(policy, slots, explicit)
    keys = [f"m{i}" for i in range(len(models))]
    for key, model in zip(keys, models, strict=True):
        sched.register(key, model)
    needs = dict(zip(keys, (m.resources for m in models), strict=True))
    now, last_arrival, tickets = 0.0, -math.inf, []
    for op, advance, number, latencies in ops:
        now += advance
        if op == "pick":
            candidates = [k for i, k in enumerate(keys) if number >> i & 1]
            picked = sched.pick(candidates, now)
            if sched.running == slots:
                assert picked is None
            elif now - last_arrival > 1.01 and any(not needs[k] for k in candidates):
                assert picked is not None  # a free slot, no reservation, a candidate without needs
            if picked is not None:
                assert picked in candidates
                tickets.append(sched.start(picked, now))  # what pick allows, start accepts
        elif op == "finish" and tickets:
            sched.finish(tickets.pop(number % len(tickets)), now, latencies)
        elif op == "arrive":
            sched.note_arrival(keys[number % len(keys)], now)
            last_arrival = now
        _check_accounting(sched, slots, tickets, needs)


def _check_accounting(
    sched: Scheduler, slots: int, tickets: list[Ticket], needs: dict[str, Mapping[str, int]]
) -> None:
    """The running executions and the free resources are what the tickets held say."""
    assert sched.running == len(tickets) <= slots
    held = Counter[str]()
    for ticket in tickets:
        held.update(needs[ticket.key])
    free = sched.free_resources()
    for name, total in sched.resource_totals.items():
        assert 0 <= free[name] == total - held[name]


def test_reservation_lifts_when_the_last_important_arrival_leaves_the_window() -> None:
    scheduler = Scheduler("priority", slots=2, reserve_window=1.0)
    assert scheduler.reservation_lifts() is None
    scheduler.register("high", ModelPolicy(weight=4))
    scheduler.register("low", ModelPolicy(weight=1))
    scheduler.note_arrival("high", 10.0)
    assert scheduler.reservation_lifts() == 11.0
    assert Scheduler("round_robin", slots=2).reservation_lifts() is None


def test_models_of_one_weight_and_no_target_never_reserve_a_slot() -> None:
    """Among equals nothing is ever below the bar: no pick weighs the recently active models
    (with hundreds of them that walk cost more than the rest of a pick), and nothing waits
    for the reservation to lift; a model of another weight or with a target brings it back."""
    sched = Scheduler("priority", slots=2, reserve_window=1.0)
    for index in range(300):
        sched.register(f"m{index}", ModelPolicy(weight=1))
        sched.note_arrival(f"m{index}", 10.0)
    assert sched.reservation_lifts() is None
    pick_and_start(sched, ["m0"], 10.0)
    pick_and_start(sched, ["m1"], 10.0)
    sched.register("heavy", ModelPolicy(weight=4))
    sched.note_arrival("heavy", 10.5)
    assert sched.reservation_lifts() == 11.0
    sched.unregister("heavy")
    sched.register("targeted", ModelPolicy(weight=1, slo_p99_ms=20))
    assert sched.reservation_lifts() == 11.0
