"""DynamicBatcher policy tests: a fake clock (plain floats), no threads, no sleeping."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from inferplex.config.model_config import DynamicBatching, QueuePolicy
from inferplex.core.batch import Batch, CloseReason, PendingRequest
from inferplex.core.batcher import DynamicBatcher
from inferplex.errors import ConfigError, DeadlineExceededError, ErrorCode, ServerBusyError

MS = 1e-3


def make(max_batch_size: int = 8, estimate: Any = None, **config: Any) -> DynamicBatcher:
    return DynamicBatcher("m", max_batch_size, DynamicBatching(**config), estimate)


def req(
    rows: int = 1,
    key: Hashable = "k",
    at: float = 0.0,
    priority: int = 0,
    timeout_us: int = 0,
    tag: Any = None,
) -> PendingRequest:
    return PendingRequest(rows, key, at, priority=priority, timeout_us=timeout_us, payload=tag)


def submit_all(batcher: DynamicBatcher, *requests: PendingRequest) -> None:
    for r in requests:
        batcher.submit(r, r.arrival)


def tags(batch: Batch | None) -> list[Any]:
    assert batch is not None
    return [r.payload for r in batch.requests]


# --- sizes and rows ---------------------------------------------------------------------------


def test_multi_row_requests_merge_and_count_rows() -> None:
    b = make(max_batch_size=8)
    submit_all(b, req(2, tag="a"), req(3, tag="b"), req(1, tag="c"))
    assert (b.pending_requests, b.pending_rows) == (3, 6)
    batch = b.next_batch(0.0)
    assert batch is not None
    assert (tags(batch), batch.rows, batch.reason) == (["a", "b", "c"], 6, CloseReason.IDLE)
    assert (b.pending_requests, b.pending_rows) == (0, 0)


def test_batch_never_exceeds_max_rows_and_requests_are_never_split() -> None:
    b = make(max_batch_size=8)
    submit_all(b, req(5, tag="a"), req(4, tag="b"), req(3, tag="c"))
    first = b.next_batch(0.0)
    # "b" does not fit next to "a"; "c" would, but must not jump the queue
    assert (tags(first), first.rows, first.reason) == (["a"], 5, CloseReason.FULL)
    second = b.next_batch(0.0)
    assert (tags(second), second.rows, second.reason) == (["b", "c"], 7, CloseReason.IDLE)


def test_exactly_max_rows_is_full_and_the_rest_waits() -> None:
    b = make(max_batch_size=4)
    submit_all(b, *(req(tag=i) for i in range(6)))
    batch = b.next_batch(0.0)
    assert (tags(batch), batch.reason) == ([0, 1, 2, 3], CloseReason.FULL)
    assert b.pending_requests == 2


def test_rows_above_max_are_refused_by_assertion() -> None:
    with pytest.raises(AssertionError):
        make(max_batch_size=4).submit(req(5), 0.0)


# --- preferred sizes ---------------------------------------------------------------------------


def test_closes_at_the_largest_reachable_preferred_size() -> None:
    b = make(max_batch_size=16, preferred_batch_size=(2, 4, 8))
    submit_all(b, *(req(tag=i) for i in range(10)))
    batch = b.next_batch(0.0)
    assert (batch.rows, batch.reason) == (8, CloseReason.PREFERRED)
    rest = b.next_batch(0.0)
    assert (tags(rest), rest.reason) == ([8, 9], CloseReason.PREFERRED)


def test_preferred_size_reached_by_multi_row_prefix() -> None:
    b = make(max_batch_size=16, preferred_batch_size=(8,))
    submit_all(b, req(3, tag="a"), req(3, tag="b"), req(2, tag="c"), req(1, tag="d"))
    batch = b.next_batch(0.0)
    assert (tags(batch), batch.rows, batch.reason) == (["a", "b", "c"], 8, CloseReason.PREFERRED)


def test_preferred_size_equal_to_max_is_full() -> None:
    b = make(max_batch_size=4, preferred_batch_size=(2, 4))
    submit_all(b, *(req() for _ in range(4)))
    assert b.next_batch(0.0).reason is CloseReason.FULL


def test_unreachable_preferred_size_waits_for_the_delay() -> None:
    b = make(max_batch_size=16, preferred_batch_size=(4,), max_queue_delay_microseconds=1000)
    submit_all(b, req(3, tag="a"), req(3, tag="b"))  # prefix sums 3, 6: never 4
    assert b.next_batch(0.5 * MS) is None
    assert b.next_wakeup(0.5 * MS) == pytest.approx(1 * MS)
    batch = b.next_batch(1 * MS)
    assert (batch.rows, batch.reason) == (6, CloseReason.DELAY)


def test_preferred_size_closes_before_the_delay() -> None:
    b = make(max_batch_size=16, preferred_batch_size=(4,), max_queue_delay_microseconds=10_000)
    submit_all(b, *(req(at=i * MS, tag=i) for i in range(3)))
    assert b.next_batch(3 * MS) is None
    b.submit(req(at=3 * MS, tag=3), 3 * MS)
    batch = b.next_batch(3 * MS)
    assert (tags(batch), batch.reason) == ([0, 1, 2, 3], CloseReason.PREFERRED)


def test_after_the_delay_everything_that_fits_goes() -> None:
    b = make(max_batch_size=16, preferred_batch_size=(4,), max_queue_delay_microseconds=1000)
    submit_all(b, *(req(tag=i) for i in range(6)))
    batch = b.next_batch(2 * MS)  # the delay is over: no need to cut at 4
    assert (batch.rows, batch.reason) == (6, CloseReason.DELAY)


def test_preferred_size_above_max_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="preferred_batch_size 16 is outside"):
        make(max_batch_size=8, preferred_batch_size=(4, 16))
    with pytest.raises(ConfigError, match="max_batch_size >= 1"):
        make(max_batch_size=0)


# --- delay -------------------------------------------------------------------------------------


def test_delay_waits_for_the_oldest_request_of_the_batch() -> None:
    b = make(max_batch_size=8, max_queue_delay_microseconds=2000)
    b.submit(req(at=1 * MS, tag="a"), 1 * MS)
    assert b.next_wakeup(1 * MS) == pytest.approx(3 * MS)
    b.submit(req(at=2 * MS, tag="b"), 2 * MS)
    assert b.next_wakeup(2 * MS) == pytest.approx(3 * MS)  # the oldest sets the time
    assert b.next_batch(2.9 * MS) is None
    wake = b.next_wakeup(2.9 * MS)
    batch = b.next_batch(wake)
    assert (tags(batch), batch.reason) == (["a", "b"], CloseReason.DELAY)
    assert b.next_wakeup(wake) is None


def test_full_closes_before_the_delay() -> None:
    b = make(max_batch_size=2, max_queue_delay_microseconds=10_000)
    submit_all(b, req(tag="a"))
    assert b.next_batch(0.0) is None
    b.submit(req(tag="b"), 0.0)
    assert b.next_wakeup(0.0) == 0.0  # due now
    assert b.next_batch(0.0).reason is CloseReason.FULL


def test_a_batch_taken_after_a_wakeup_query_sees_every_change_in_between() -> None:
    """The driver asks next_wakeup, then next_batch, at one moment; a request queued in
    between joins the batch, and a batch taken is never handed out again."""
    b = make(max_batch_size=8)
    submit_all(b, req(tag="a"))
    assert b.next_wakeup(0.0) == 0.0
    b.submit(req(tag="b"), 0.0)
    assert tags(b.next_batch(0.0)) == ["a", "b"]
    assert b.next_batch(0.0) is None
    submit_all(b, req(tag="c"))
    assert b.next_wakeup(0.0) == 0.0
    assert tags(b.next_batch(0.0)) == ["c"]
    assert (b.next_wakeup(0.0), b.next_batch(0.0)) == (None, None)


def test_no_instance_idle_means_no_batch_and_no_close_wakeup() -> None:
    b = make(max_batch_size=2, max_queue_delay_microseconds=1000)
    submit_all(b, req(), req())
    assert b.next_batch(0.0, instance_idle=False) is None
    assert b.next_wakeup(0.0, instance_idle=False) is None
    assert b.next_batch(0.0, instance_idle=True).reason is CloseReason.FULL


def test_delay_zero_closes_with_what_is_there_when_idle() -> None:
    b = make(max_batch_size=8)
    assert b.next_batch(0.0) is None
    assert b.next_wakeup(0.0) is None
    submit_all(b, req(tag="a"))
    assert b.next_batch(0.0, instance_idle=False) is None
    assert b.next_wakeup(0.0, instance_idle=False) is None  # wait for an instance, not a time
    assert b.next_wakeup(0.0) == 0.0
    batch = b.next_batch(0.0)
    assert (tags(batch), batch.reason) == (["a"], CloseReason.IDLE)


# --- shape keys --------------------------------------------------------------------------------


def test_only_equal_shape_keys_merge_and_skipped_requests_keep_their_order() -> None:
    b = make(max_batch_size=8)
    keys = ["A", "B", "A", "B", "A", "C", "B"]
    submit_all(b, *(req(key=k, tag=f"{k}{i}") for i, k in enumerate(keys)))
    assert tags(b.next_batch(0.0)) == ["A0", "A2", "A4"]
    assert tags(b.next_batch(0.0)) == ["B1", "B3", "B6"]
    assert tags(b.next_batch(0.0)) == ["C5"]
    assert b.pending_requests == 0


def test_skipped_request_heads_the_next_batch_after_new_arrivals() -> None:
    b = make(max_batch_size=2)
    submit_all(b, req(key="A", tag=1), req(key="B", tag=2), req(key="A", tag=3))
    assert tags(b.next_batch(0.0)) == [1, 3]
    submit_all(b, req(key="A", tag=4), req(key="B", tag=5))
    assert tags(b.next_batch(0.0)) == [2, 5]
    assert tags(b.next_batch(0.0)) == [4]


# --- priorities --------------------------------------------------------------------------------


def test_higher_priority_levels_go_first() -> None:
    b = make(max_batch_size=3, priority_levels=3, default_priority_level=2)
    for i, priority in enumerate([3, 1, 2, 1, 3]):
        b.submit(req(at=i, priority=priority, tag=f"p{priority}#{i}"), float(i))
    assert b.queue_sizes == {1: 2, 2: 1, 3: 2}
    assert tags(b.next_batch(5.0)) == ["p1#1", "p1#3", "p2#2"]
    assert tags(b.next_batch(5.0)) == ["p3#0", "p3#4"]


def test_head_is_the_oldest_request_of_the_highest_level() -> None:
    b = make(max_batch_size=8, priority_levels=2, default_priority_level=2)
    submit_all(b, req(key="A", priority=2, tag="A2"), req(key="B", at=1, priority=1, tag="B1"))
    b.submit(req(key="B", at=2, priority=2, tag="B2"), 2.0)
    assert tags(b.next_batch(2.0)) == ["B1", "B2"]
    assert tags(b.next_batch(2.0)) == ["A2"]


def test_default_and_out_of_range_priorities_resolve_to_the_default_level() -> None:
    b = make(priority_levels=3, default_priority_level=2)
    requests = [req(priority=p) for p in (0, 7, -1, 1, 3)]
    submit_all(b, *requests)
    assert [r.level for r in requests] == [2, 2, 2, 1, 3]
    assert [r.seq for r in requests] == [0, 1, 2, 3, 4]


def test_default_level_zero_means_the_lowest_level() -> None:
    b = make(priority_levels=3)
    r = req()
    b.submit(r, 0.0)
    assert r.level == 3


def test_without_priority_levels_everything_is_one_level() -> None:
    b = make(max_batch_size=8)
    requests = [req(priority=p, tag=p) for p in (5, 1, 0)]
    submit_all(b, *requests)
    assert {r.level for r in requests} == {0}
    assert b.queue_sizes == {0: 3}
    assert tags(b.next_batch(0.0)) == [5, 1, 0]  # arrival order


def test_inconsistent_priority_config_is_refused() -> None:
    with pytest.raises(ValidationError, match="default_priority_level 4 is above"):
        make(priority_levels=3, default_priority_level=4)
    with pytest.raises(ValidationError, match="priority_queue_policy has level 5"):
        make(priority_levels=3, default_priority_level=1, priority_queue_policy={5: QueuePolicy()})


# --- queue policies: size ----------------------------------------------------------------------


def test_queue_full_per_level_names_model_level_and_limit() -> None:
    b = make(
        max_batch_size=8,
        priority_levels=2,
        default_priority_level=2,
        priority_queue_policy={1: QueuePolicy(max_queue_size=2)},
    )
    submit_all(b, req(priority=1), req(priority=1))
    with pytest.raises(ServerBusyError) as caught:
        b.submit(req(priority=1), 0.0)
    assert caught.value.message == (
        "model 'm' queue is full (max_queue_size 2 at priority level 1); retry later"
    )
    assert caught.value.code is ErrorCode.UNAVAILABLE
    for _ in range(5):
        b.submit(req(priority=2), 0.0)  # level 2 has its own (unlimited) queue
    assert b.queue_sizes == {1: 2, 2: 5}
    b.next_batch(0.0)
    b.submit(req(priority=1), 0.0)  # room again


def test_queue_full_without_levels_and_default_policy_for_every_level() -> None:
    b = make(default_queue_policy=QueuePolicy(max_queue_size=1))
    b.submit(req(), 0.0)
    with pytest.raises(ServerBusyError, match=r"^model 'm' queue is full \(max_queue_size 1\);"):
        b.submit(req(), 0.0)
    levels = make(
        priority_levels=2,
        default_priority_level=1,
        default_queue_policy=QueuePolicy(max_queue_size=1),
    )
    submit_all(levels, req(priority=1), req(priority=2))
    with pytest.raises(ServerBusyError, match="at priority level 2"):
        levels.submit(req(priority=2), 0.0)


# --- queue policies: timeouts ------------------------------------------------------------------


def test_reject_timeout_is_removed_by_expire() -> None:
    b = make(max_batch_size=8, default_queue_policy=QueuePolicy(default_timeout_microseconds=1000))
    r = req(tag="late")
    b.submit(r, 0.0)
    assert r.deadline == pytest.approx(1 * MS)
    assert b.next_wakeup(0.0, instance_idle=False) == pytest.approx(1 * MS)
    assert b.expire(0.9 * MS) == []
    assert b.expire(r.deadline) == [r]
    assert (b.pending_requests, b.pending_rows) == (0, 0)
    assert b.next_wakeup(r.deadline) is None


def test_expired_request_is_never_batched_even_before_expire_is_called() -> None:
    policy = QueuePolicy(default_timeout_microseconds=1000)
    b = make(max_batch_size=8, default_queue_policy=policy)
    old, new = req(tag="old"), req(at=1 * MS, tag="new")
    submit_all(b, old, new)
    assert tags(b.next_batch(1.5 * MS)) == ["new"]
    assert b.next_wakeup(1.5 * MS) == pytest.approx(1 * MS)  # past: "call expire now"
    assert b.expire(1.5 * MS) == [old]


def test_delay_action_moves_timed_out_requests_behind_the_others() -> None:
    policy = QueuePolicy(timeout_action="DELAY", default_timeout_microseconds=1000)
    b = make(max_batch_size=1, default_queue_policy=policy)
    submit_all(b, req(tag="a"), req(at=0.5 * MS, tag="b"), req(at=0.8 * MS, tag="c"))
    assert b.expire(1.2 * MS) == []  # DELAY never rejects
    assert tags(b.next_batch(1.2 * MS)) == ["b"]
    assert tags(b.next_batch(1.2 * MS)) == ["c"]
    late = b.next_batch(1.2 * MS)
    assert tags(late) == ["a"]
    assert late.requests[0].delayed


def test_delayed_requests_still_run_ahead_of_lower_levels() -> None:
    b = make(
        max_batch_size=1,
        priority_levels=2,
        default_priority_level=2,
        priority_queue_policy={
            1: QueuePolicy(timeout_action="DELAY", default_timeout_microseconds=1000)
        },
    )
    submit_all(b, req(priority=1, tag="p1-late"), req(priority=2, tag="p2"))
    b.submit(req(at=1.5 * MS, priority=1, tag="p1"), 1.5 * MS)
    assert [tags(b.next_batch(2 * MS)) for _ in range(3)] == [["p1"], ["p1-late"], ["p2"]]


def test_delay_action_requests_are_not_deadline_rejected() -> None:
    policy = QueuePolicy(timeout_action="DELAY", default_timeout_microseconds=1000)
    b = make(default_queue_policy=policy, estimate=lambda rows: 5 * MS)
    b.submit(req(), 0.0)  # would miss under REJECT; DELAY promises an answer
    assert b.pending_requests == 1


@pytest.mark.parametrize(
    ("default_us", "allow", "own_us", "expected_us"),
    [
        (1000, False, 500, 1000),  # no override: the request's timeout is ignored
        (0, False, 500, None),
        (1000, True, 500, 500),  # an override may shorten
        (1000, True, 5000, 1000),  # ... never lengthen
        (1000, True, 0, 1000),  # no own timeout: the default
        (0, True, 500, 500),  # no default: the request's timeout applies
        (0, True, 0, None),
    ],
)
def test_timeout_override_rules(
    default_us: int, allow: bool, own_us: int, expected_us: int | None
) -> None:
    policy = QueuePolicy(default_timeout_microseconds=default_us, allow_timeout_override=allow)
    b = make(default_queue_policy=policy)
    r = req(at=10.0, timeout_us=own_us)
    b.submit(r, 10.0)
    if expected_us is None:
        assert r.deadline is None
    else:
        assert r.deadline == pytest.approx(10.0 + expected_us * 1e-6)


# --- deadline awareness ------------------------------------------------------------------------


def test_submit_rejects_a_deadline_that_cannot_be_met() -> None:
    policy = QueuePolicy(default_timeout_microseconds=1000)
    b = make(default_queue_policy=policy, estimate=lambda rows: rows * 0.4 * MS)
    b.submit(req(2), 0.0)  # 0.8 ms fits in 1 ms
    with pytest.raises(DeadlineExceededError) as caught:
        b.submit(req(3, at=1 * MS), 1 * MS)  # 1.2 ms does not
    message = caught.value.message
    assert message.startswith("model 'm' cannot meet the request's deadline")
    assert "1000 µs timeout" in message and "1.200 ms" in message
    assert caught.value.code is ErrorCode.DEADLINE_EXCEEDED
    assert b.pending_requests == 1


def test_submit_without_a_measurement_accepts() -> None:
    policy = QueuePolicy(default_timeout_microseconds=1000)
    make(default_queue_policy=policy, estimate=lambda rows: None).submit(req(), 0.0)


def test_batch_closes_early_for_the_earliest_deadline() -> None:
    policy = QueuePolicy(default_timeout_microseconds=5000, allow_timeout_override=True)
    b = make(
        max_batch_size=8,
        max_queue_delay_microseconds=10_000,
        default_queue_policy=policy,
        estimate=lambda rows: 1 * MS,
    )
    b.submit(req(tag="a"), 0.0)
    b.submit(req(at=1 * MS, timeout_us=3000, tag="b"), 1 * MS)  # deadline 4 ms
    wake = b.next_wakeup(1 * MS)
    assert wake == pytest.approx(4 * MS - 1 * MS - 100e-6)  # deadline - estimate - margin
    assert b.next_batch(wake - 0.1 * MS) is None
    batch = b.next_batch(wake)
    assert (tags(batch), batch.reason) == (["a", "b"], CloseReason.DEADLINE)


def test_deadline_close_without_estimate_uses_the_margin_only() -> None:
    policy = QueuePolicy(default_timeout_microseconds=2000)
    b = make(max_queue_delay_microseconds=10_000, default_queue_policy=policy)
    b.submit(req(), 0.0)
    assert b.next_wakeup(0.0) == pytest.approx(2 * MS - 100e-6)
    assert b.next_batch(2 * MS - 100e-6).reason is CloseReason.DEADLINE


# --- drain, statistics -------------------------------------------------------------------------


def test_drain_returns_everything_in_batch_order() -> None:
    b = make(priority_levels=2, default_priority_level=2)
    submit_all(b, req(priority=2, tag="x"), req(key="B", priority=1, tag="y"), req(tag="z"))
    assert [r.payload for r in b.drain()] == ["y", "x", "z"]
    assert (b.pending_requests, b.pending_rows, b.queue_sizes) == (0, 0, {1: 0, 2: 0})
    assert b.next_batch(0.0) is None


def test_close_reasons_are_counted() -> None:
    b = make(max_batch_size=4, preferred_batch_size=(2,), max_queue_delay_microseconds=1000)
    submit_all(b, *(req() for _ in range(3)))
    b.next_batch(0.0)  # PREFERRED 2
    b.next_batch(1 * MS)  # DELAY 1
    submit_all(b, req(3), req(1))
    b.next_batch(0.0)  # FULL 4
    assert b.close_reasons == {CloseReason.PREFERRED: 1, CloseReason.DELAY: 1, CloseReason.FULL: 1}
    assert str(CloseReason.DELAY) == "delay"


# --- property: nothing lost, nothing duplicated, never above max --------------------------------

_policies = st.builds(
    QueuePolicy,
    timeout_action=st.sampled_from(["REJECT", "DELAY"]),
    default_timeout_microseconds=st.sampled_from([0, 500, 3000]),
    allow_timeout_override=st.booleans(),
    max_queue_size=st.sampled_from([0, 0, 2, 5]),
)


@st.composite
def _configs(draw: st.DrawFn) -> tuple[int, DynamicBatching, bool]:
    max_batch_size = draw(st.integers(1, 8))
    levels = draw(st.sampled_from([0, 0, 1, 3]))
    config = DynamicBatching(
        preferred_batch_size=draw(st.lists(st.integers(1, max_batch_size), max_size=3)),
        max_queue_delay_microseconds=draw(st.sampled_from([0, 0, 400, 2000])),
        priority_levels=levels,
        default_priority_level=draw(st.integers(0, levels)),
        default_queue_policy=draw(st.none() | _policies),
        priority_queue_policy=draw(
            st.dictionaries(st.integers(1, levels), _policies) if levels else st.just({})
        ),
    )
    return max_batch_size, config, draw(st.booleans())


_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("submit"),
            st.sampled_from([1, 1, 1, 2, 3, 8]),  # rows, clipped to max
            st.sampled_from(["A", "B"]),
            st.integers(-1, 4),  # priority
            st.sampled_from([0, 0, 300, 1000, 5000]),  # own timeout
        ),
        st.tuples(st.just("next"), st.booleans()),
        st.tuples(st.just("expire")),
        st.tuples(st.just("tick"), st.sampled_from([0.0, 0.1 * MS, 0.5 * MS, 3 * MS])),
    ),
    min_size=8,
    max_size=60,
)


class _Run:
    """A batcher driven by a property test's operations, with how each request ended."""

    def __init__(self, batcher: DynamicBatcher, max_batch_size: int) -> None:
        self.b = batcher
        self.max_batch_size = max_batch_size
        self.now = 0.0
        self.outcomes: dict[int, str] = {}
        self.rows_of: dict[int, int] = {}
        self.submitted = 0

    def apply(self, op: tuple[Any, ...]) -> None:
        """Carry out one operation of ``_ops``, then check the batcher's counts."""
        steps = {"submit": self.submit, "next": self.next, "expire": self.expire}
        steps.get(op[0], self.tick)(*op[1:])
        b = self.b
        assert b.pending_requests == sum(b.queue_sizes.values())
        assert b.pending_requests == self.submitted - len(self.outcomes)
        pending_rows = sum(n for tag, n in self.rows_of.items() if tag not in self.outcomes)
        assert b.pending_rows == pending_rows

    def settle(self, r: PendingRequest, outcome: str) -> None:
        assert r.payload not in self.outcomes, f"request {r.payload} ended twice"
        self.outcomes[r.payload] = outcome

    def submit(self, rows: int, key: Hashable, priority: int, timeout_us: int) -> None:
        rows = min(rows, self.max_batch_size)
        r = req(rows, key, self.now, priority, timeout_us, tag=self.submitted)
        self.rows_of[self.submitted] = r.rows
        self.submitted += 1
        try:
            self.b.submit(r, self.now)
        except (ServerBusyError, DeadlineExceededError):
            self.settle(r, "refused")

    def next(self, instance_idle: bool) -> None:
        batch = self.b.next_batch(self.now, instance_idle=instance_idle)
        if batch is None:
            return
        assert 1 <= batch.rows <= self.max_batch_size
        assert batch.rows == sum(r.rows for r in batch.requests)
        assert len({r.shape_key for r in batch.requests}) == 1
        for r in batch.requests:
            assert r.deadline is None or r.delayed or r.deadline > self.now
            self.settle(r, "batch")

    def expire(self) -> None:
        for r in self.b.expire(self.now):
            assert r.deadline is not None and r.deadline <= self.now
            self.settle(r, "expired")

    def tick(self, seconds: float) -> None:
        self.now += seconds

    def settle_due(self) -> None:
        """Everything due now: expired requests, then every batch that closes."""
        for r in self.b.expire(self.now):
            self.settle(r, "expired")
        while (batch := self.b.next_batch(self.now)) is not None:
            for r in batch.requests:
                self.settle(r, "batch")

    def drain(self) -> None:
        for r in self.b.drain():
            self.settle(r, "drained")


@settings(max_examples=300, deadline=None)
@given(setup=_configs(), ops=_ops, drain_first=st.booleans())
def test_every_request_ends_exactly_once(
    setup: tuple[int, DynamicBatching, bool], ops: list[tuple[Any, ...]], drain_first: bool
) -> None:
    max_batch_size, config, with_estimate = setup
    estimate = (lambda rows: 0.2 * MS * rows) if with_estimate else None
    run = _Run(DynamicBatcher("m", max_batch_size, config, estimate), max_batch_size)
    b = run.b
    for op in ops:
        run.apply(op)
    if drain_first:  # shutdown: everything still queued comes back, in batch order
        run.drain()
    # a driver that is idle never busy-loops: once settled, the next wake-up is in the future
    run.settle_due()
    wake = b.next_wakeup(run.now)
    assert wake is None or wake > run.now
    if config.max_queue_delay_microseconds == 0:
        assert b.pending_requests == 0  # delay 0: an idle instance takes everything
    # liveness: follow the wake-ups and everything left closes or expires
    while (wake := b.next_wakeup(run.now)) is not None:
        assert wake > run.now
        run.now = wake
        run.settle_due()
    assert b.pending_requests == 0
    run.drain()
    assert sorted(run.outcomes) == list(range(run.submitted))
    for kind in {*run.outcomes.values(), *b.close_reasons}:
        event(str(kind))  # shown by --hypothesis-show-statistics: every path is exercised
    assert (b.pending_requests, b.pending_rows) == (0, 0)


# --- adaptive limits --------------------------------------------------------------------------


def test_lowered_limit_closes_batches_at_the_new_size() -> None:
    b = make(max_batch_size=8)
    b.set_limits(3, 0.0)
    submit_all(b, *(req(tag=i) for i in range(5)))
    batch = b.next_batch(0.0)
    assert (tags(batch), batch.reason) == ([0, 1, 2], CloseReason.FULL)
    assert b.limits == (3, 0.0)


def test_a_request_larger_than_the_lowered_limit_still_runs_alone() -> None:
    b = make(max_batch_size=8)
    b.set_limits(2, 0.0)
    submit_all(b, req(5, tag="big"), req(1, tag="small"))
    first = b.next_batch(0.0)
    assert (tags(first), first.rows, first.reason) == (["big"], 5, CloseReason.FULL)
    assert tags(b.next_batch(0.0)) == ["small"]


def test_limits_stay_within_the_config_and_a_delay_makes_batches_wait() -> None:
    b = make(max_batch_size=4)
    b.set_limits(99, 2 * MS)
    assert b.limits == (4, 2 * MS)
    submit_all(b, req(tag="a"))
    assert b.next_batch(0.0) is None  # waits for the delay now
    batch = b.next_batch(2 * MS)
    assert (tags(batch), batch.reason) == (["a"], CloseReason.DELAY)


# --- callers that went away -------------------------------------------------------------------


def test_withdrawn_requests_leave_the_queue_and_free_their_place() -> None:
    """A reset stream's request (issue 18, rapid reset) leaves the queue: it never runs, and
    no longer counts toward max_queue_size or a level's deadlines."""
    b = make(
        max_batch_size=2,
        default_queue_policy=QueuePolicy(max_queue_size=3, default_timeout_microseconds=500),
    )
    gone = {"b", "c"}
    submit_all(b, req(tag="a"), req(tag="b"), req(tag="c"))
    with pytest.raises(ServerBusyError):
        b.submit(req(tag="full"), 0.0)
    assert b.withdraw(lambda r: r.payload in gone) == 2
    assert (b.pending_requests, b.pending_rows) == (1, 1)
    b.submit(req(tag="d"), 0.0)  # a place is free again
    assert tags(b.next_batch(0.0)) == ["a", "d"]
    assert b.withdraw(lambda r: True) == 0
    assert b.next_wakeup(0.0) is None and not b.expire(1.0)


def test_withdrawing_from_a_fifo_queue() -> None:
    from inferplex.core.fifo import FifoQueue

    q = FifoQueue()
    for tag, timeout in (("a", 0), ("b", 100), ("c", 0)):
        q.submit(PendingRequest(1, None, 0.0, timeout_us=timeout, payload=tag), 0.0)
    assert q.withdraw(lambda r: r.payload == "b") == 1
    assert q.next_wakeup(0.0, instance_idle=False) is None  # its deadline went with it
    assert [tags(q.next_batch(0.0)), tags(q.next_batch(0.0))] == [["a"], ["c"]]
