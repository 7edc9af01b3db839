"""DynamicBatcher: the pure policy that turns queued requests into batches (Triton semantics).

No clock, no threads, no I/O: every method takes ``now`` (seconds on a monotonic clock the
caller owns), so the policy is tested with plain floats. The async driver owns the clock, the
timer, the instances, concatenation and splitting, and the answers. Its loop is::

    batcher.submit(request, now)               # may raise ServerBusyError / DeadlineExceededError
    for r in batcher.expire(now): ...          # answer each with DeadlineExceededError
    while an instance is idle and (batch := batcher.next_batch(now)): run batch
    wake = batcher.next_wakeup(now, instance_idle=...)   # arm one timer there (None: no timer)

A ``next_wakeup`` at or before ``now`` means "act now" (call ``expire``/``next_batch``).

Rules, as in Triton's dynamic batcher unless marked (ours):

- Batch size counts rows (the batch dimension), never requests; a batch never exceeds
  ``max_batch_size`` rows and a request is never split.
- A batch is formed from the head request (the oldest at the highest priority level): compatible
  requests (equal ``shape_key``) are taken in priority, then arrival order; incompatible ones are
  skipped and keep their place (ours: Triton stops at the first incompatible request). The scan
  stops at the first compatible request that does not fit: the batch cannot grow, so it is FULL.
- Preferred sizes: when a prefix of the taken rows equals a preferred size, the batch closes at
  the largest such prefix (PREFERRED, or FULL if that size is ``max_batch_size``), even if more
  rows are queued: a user who lists preferred sizes says other sizes run worse. Once the queue
  delay has expired, everything that fits goes (DELAY), as in Triton.
- ``max_queue_delay_microseconds`` 0: close with what is there whenever an instance is idle
  (IDLE). Above 0: wait until the oldest request of the batch has waited the delay (DELAY),
  unless the batch is FULL or PREFERRED earlier, or a deadline forces it (DEADLINE).
- Priority levels 1..N, 1 highest. A request's ``priority`` 0 or outside 1..N gets
  ``default_priority_level``; a default of 0 (Triton rejects that config) means the lowest level
  N, so unprioritised traffic never overtakes prioritised traffic. Without levels: one level, 0.
- Queue policy of a level: ``priority_queue_policy[level]``, else ``default_queue_policy``, else
  the defaults. ``max_queue_size`` counts requests queued at that level.
- Timeouts: ``default_timeout_microseconds`` (0: none). With ``allow_timeout_override`` a
  request's own ``timeout_us`` may only shorten it; where the level has no default timeout the
  request's timeout applies (ours: Triton's C++ ignores the request's timeout then, which makes
  the override useless without a default). Without ``allow_timeout_override`` the request's
  timeout is ignored, as in Triton. The deadline counts from ``arrival``.
- A deadline is met only by an answer strictly before it: a request is expired at ``now >=
  deadline``. Action REJECT: ``expire`` removes it (the driver answers it). DELAY: it is moved
  behind every request of its own and higher levels that has not timed out (Triton's delayed
  queue; it still runs ahead of lower levels) and is never rejected.
- Deadline awareness (ours) applies to REJECT levels only, where a missed deadline is a failure:
  with an execution estimate, ``submit`` rejects a request at once when ``now + estimate(rows) >=
  deadline``; a waiting batch closes (DEADLINE) when ``now + estimate(rows) >= deadline -
  deadline_margin`` for its earliest deadline. Without an estimate the execution time counts as 0.
- ``preserve_ordering`` is the driver's concern (response order); this policy ignores it.
- Learned queue delay (ours, ``learn_delay``): while waiting the delay gathers nothing, batches
  close without it (``core/learned_delay.py``).

Cost: ``submit`` is O(1); ``next_batch`` is O(rows taken) when the batch is a queue prefix, and
O(queue) at worst (skipped shape keys, levels with timeouts).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Callable, Hashable
from typing import NamedTuple

from inferplex.config.model_config import DynamicBatching
from inferplex.core.batch import Batch, CloseReason, PendingRequest
from inferplex.core.learned_delay import DelayLearner
from inferplex.core.levels import Level, build_levels
from inferplex.errors import ConfigError, DeadlineExceededError, ServerBusyError

#: rows -> predicted execution seconds of a batch of that many rows; None while unmeasured
Estimate = Callable[[int], float | None]

_NO_KEY = object()  # marks "no head request yet"; a shape key may legitimately be None


class Plan(NamedTuple):
    """The batch being formed, and whether it closes now."""

    candidates: list[PendingRequest]
    """the requests it may take, in batch order"""
    cut: int
    """how many of them (a prefix) close now"""
    rows: int
    """the rows of that prefix"""
    reason: CloseReason | None
    """why it closes now; None: it waits"""
    close_at: float
    """when it closes if it waits (``now`` when it closes now)"""


class _Gathered(NamedTuple):
    """One pass over the queues: what a batch may take."""

    taken: list[PendingRequest]
    rows: int
    best_cut: int
    """the longest prefix of ``taken`` whose rows are a preferred size (0: none)"""
    best_rows: int
    oldest: float
    """the earliest arrival among ``taken``"""
    earliest_deadline: float
    """the earliest deadline among ``taken`` at REJECT levels (inf: none)"""
    full: bool
    """the next compatible request does not fit, or ``rows`` reached the limit"""


class DynamicBatcher:
    """Queues of pending requests per priority level and the decision when to close a batch."""

    def __init__(
        self,
        model: str,
        max_batch_size: int,
        config: DynamicBatching,
        estimate: Estimate | None = None,
        *,
        deadline_margin: float = 100e-6,
        learn_delay: bool = False,
    ) -> None:
        """``estimate`` may be set later through the attribute of that name.
        ``deadline_margin`` (seconds) covers the driver's wake-up and concatenation time.
        ``learn_delay``: skip the queue delay while it gathers nothing (``DelayLearner``)."""
        if max_batch_size < 1:
            raise ConfigError(f"model '{model}': dynamic batching needs max_batch_size >= 1")
        for size in config.preferred_batch_size:
            if not 1 <= size <= max_batch_size:
                raise ConfigError(
                    f"model '{model}': preferred_batch_size {size} is outside "
                    f"[1, max_batch_size {max_batch_size}]"
                )
        self.model = model
        self.estimate = estimate
        self.close_reasons: Counter[CloseReason] = Counter()
        self._max_batch_size = max_batch_size
        self._preferred = frozenset(config.preferred_batch_size)
        self._delay = config.max_queue_delay_microseconds * 1e-6
        self._margin = deadline_margin
        self._levels = build_levels(config)
        self._n_levels = config.priority_levels
        self._default_level = config.default_priority_level or config.priority_levels
        # (queue, reject) in the order batches are formed: by level, live before delayed
        self._queues = [(q, lv.reject) for lv in self._levels for q in (lv.live, lv.delayed)]
        # One level, no queue delay, no preferred sizes (``dynamic_batching { }``): while no
        # queued request has a deadline, a batch is due whenever an instance is idle and is a
        # plain scan of the queue; ``next_wakeup`` and ``next_batch`` take that short way.
        self._plain: Level | None = None
        self._max_rows = max_batch_size  # the batch limit now: adaptive batching may lower it
        self._update_plain()
        self._seq = 0
        self._pending = 0
        self._pending_rows = 0
        # the last plan and its ``now``: the driver asks next_wakeup, then next_batch, at the
        # same moment; any change to the queues drops it
        self._memo: Plan | None = None
        self._memo_now = 0.0
        self._learner = DelayLearner() if learn_delay else None

    def set_limits(self, max_rows: int, delay_s: float) -> None:
        """Adaptive batching: close batches at ``max_rows`` (a larger request still runs, alone)
        and wait at most ``delay_s`` for one to fill."""
        self._max_rows = max(1, min(max_rows, self._max_batch_size))
        self._delay = max(delay_s, 0.0)
        self._update_plain()
        self._memo = None

    @property
    def limits(self) -> tuple[int, float]:
        """(batch rows, queue delay in seconds) batches are formed with now."""
        return self._max_rows, self._delay

    def _update_plain(self) -> None:
        self._plain = (
            self._levels[0] if not (self._n_levels or self._delay or self._preferred) else None
        )

    @property
    def pending_requests(self) -> int:
        """Requests queued now (including expired ones that ``expire`` has not taken yet)."""
        return self._pending

    @property
    def pending_rows(self) -> int:
        """Rows queued now."""
        return self._pending_rows

    @property
    def queue_sizes(self) -> dict[int, int]:
        """Requests queued per priority level (level 0 when the model has no levels)."""
        return {lv.number: len(lv.live) + len(lv.delayed) for lv in self._levels}

    def submit(self, request: PendingRequest, now: float) -> None:
        """Queue a request, or raise ServerBusyError (its level's queue is full) or
        DeadlineExceededError (its deadline cannot be met); nothing is queued then."""
        assert 1 <= request.rows <= self._max_batch_size, "rows must be checked before submit"
        level = self._level_for(request.priority) if self._n_levels else self._levels[0]
        if level.max_size and len(level.live) + len(level.delayed) >= level.max_size:
            where = f" at priority level {level.number}" if self._n_levels else ""
            raise ServerBusyError(
                f"model '{self.model}' queue is full (max_queue_size {level.max_size}{where}); "
                "retry later"
            )
        timeout_us = level.timeout_us
        own = request.timeout_us
        if level.allow_override and own > 0 and (timeout_us == 0 or own < timeout_us):
            timeout_us = own
        deadline = None
        if timeout_us:
            deadline = request.arrival + timeout_us * 1e-6
            if level.reject:
                self._check_deadline(request.rows, deadline, timeout_us, now)
            level.timed += 1
        request.deadline = deadline
        request.level = level.number
        request.delayed = False
        request.seq = self._seq
        self._seq += 1
        level.live.append(request)
        self._pending += 1
        self._pending_rows += request.rows
        self._memo = None

    def next_batch(self, now: float, instance_idle: bool = True) -> Batch | None:
        """Close and return the next batch if one is due now; None while it should wait (or
        when no instance is idle: nothing could run it)."""
        if not instance_idle or not self._pending:
            return None
        plain = self._plain
        if plain is not None and not plain.timed and not plain.delayed:
            batch = self._plain_batch(plain.live)
        else:
            self._demote(now)
            plan = self._planned(now)
            if plan.reason is None:
                return None
            taken, cut = plan.candidates, plan.cut
            batch = Batch(taken if cut == len(taken) else taken[:cut], plan.rows, plan.reason)
        self._remove(batch.requests, batch.rows)
        self.close_reasons[batch.reason] += 1
        if self._learner is not None and self._delay:
            self._learner.count(len(batch.requests) > 1, batch.reason is CloseReason.IDLE)
            self._memo = None
        return batch

    def next_wakeup(self, now: float, instance_idle: bool = True) -> float | None:
        """The absolute time at which the policy next has something to do: a request's deadline
        (expire it, or demote it under DELAY), or the moment the waiting batch closes (queue
        delay, DEADLINE). With ``instance_idle`` False only deadlines count. A value at or
        before ``now`` means "now"; None means nothing until the next submit."""
        if not self._pending:
            return None
        plain = self._plain
        if plain is not None and not plain.timed:
            return now if instance_idle else None
        self._demote(now)
        wake = math.inf
        for level in self._levels:
            # DELAY-level deadlines only reorder the queue: they matter when a batch can form
            if level.timed and (level.reject or instance_idle):
                for r in level.live:
                    if r.deadline is not None and r.deadline < wake:
                        wake = r.deadline
        if instance_idle:
            plan = self._planned(now)
            wake = min(wake, now if plan.reason is not None else plan.close_at)
        return None if wake == math.inf else wake

    def expire(self, now: float) -> list[PendingRequest]:
        """Remove and return the requests at REJECT levels whose deadline has come (``now >=
        deadline``); the caller answers each with DeadlineExceededError."""
        expired: list[PendingRequest] = []
        for level in self._levels:
            if level.reject and level.timed:
                expired.extend(level.take_expired(now))
        if expired:
            self._pending -= len(expired)
            self._pending_rows -= sum(r.rows for r in expired)
            self._memo = None
        return expired

    def withdraw(self, gone: Callable[[PendingRequest], bool]) -> int:
        """Remove the queued requests ``gone`` picks (their callers went away: a reset
        stream, a closed connection), keeping everyone else's order; returns how many.
        O(queue): the model calls it once the cancelled requests are a share of the queue."""
        removed = rows = 0
        for level in self._levels:
            for queue in (level.live, level.delayed):
                left = []
                for r in queue:  # one pass, ``gone`` asked once per request
                    if not gone(r):
                        left.append(r)
                        continue
                    removed += 1
                    rows += r.rows
                    if r.deadline is not None and not r.delayed:
                        level.timed -= 1
                if len(left) != len(queue):
                    queue.clear()
                    queue.extend(left)
        if removed:
            self._pending -= removed
            self._pending_rows -= rows
            self._memo = None
        return removed

    def drain(self) -> list[PendingRequest]:
        """Remove and return every queued request, in batch order (shutdown, unload)."""
        out: list[PendingRequest] = []
        for level in self._levels:
            out.extend(level.live)
            out.extend(level.delayed)
            level.live.clear()
            level.delayed.clear()
            level.timed = 0
        self._pending = 0
        self._pending_rows = 0
        self._memo = None
        return out

    def _level_for(self, priority: int) -> Level:
        if not self._n_levels:
            return self._levels[0]
        if not 1 <= priority <= self._n_levels:
            priority = self._default_level
        return self._levels[priority - 1]

    def _check_deadline(self, rows: int, deadline: float, timeout_us: int, now: float) -> None:
        seconds = self._estimate(rows)
        if now + seconds >= deadline:
            raise DeadlineExceededError(
                f"model '{self.model}' cannot meet the request's deadline: "
                f"{(deadline - now) * 1e3:.3f} ms left of its {timeout_us} µs timeout, "
                f"estimated execution time for {rows} row(s) is {seconds * 1e3:.3f} ms"
            )

    def _estimate(self, rows: int) -> float:
        if self.estimate is None:
            return 0.0
        seconds = self.estimate(rows)
        return 0.0 if seconds is None else seconds

    def _demote(self, now: float) -> None:
        """Move timed-out requests of DELAY levels behind the requests still in time."""
        for level in self._levels:
            if not level.reject and level.timed:
                expired = level.take_expired(now)
                if expired:
                    for r in expired:
                        r.delayed = True
                    level.delayed.extend(expired)
                    self._memo = None

    def _planned(self, now: float) -> Plan:
        """``_plan(now)``, made once for both questions the driver asks at one moment."""
        memo = self._memo
        if memo is not None and self._memo_now == now:
            return memo
        plan = self._plan(now)
        # a plan that waits or closes for a deadline read the execution estimate, which can
        # change while the queues do not: only the others are kept
        if plan.reason is not None and plan.reason is not CloseReason.DEADLINE:
            self._memo, self._memo_now = plan, now
        else:
            self._memo = None
        return plan

    def _plan(self, now: float) -> Plan:
        """The batch being formed (``_gather``), whether it closes now and why, else when."""
        taken, rows, best_cut, best_rows, oldest, earliest, full = self._gather(now)
        if not taken:
            return Plan(taken, 0, 0, None, math.inf)
        delay = 0.0 if self.delay_skipped else self._delay
        due = oldest + delay
        if best_cut and not (delay and now >= due):
            reason = CloseReason.FULL if best_rows >= self._max_rows else CloseReason.PREFERRED
            return Plan(taken, best_cut, best_rows, reason, now)
        if full:
            return Plan(taken, len(taken), rows, CloseReason.FULL, now)
        if not delay:
            return Plan(taken, len(taken), rows, CloseReason.IDLE, now)
        if now >= due:
            return Plan(taken, len(taken), rows, CloseReason.DELAY, now)
        if earliest < math.inf:
            # close in time for the earliest deadline of a request at a REJECT level
            close_at = earliest - self._margin - self._estimate(rows)
            if now >= close_at:
                return Plan(taken, len(taken), rows, CloseReason.DEADLINE, now)
            due = min(due, close_at)
        return Plan(taken, len(taken), rows, None, due)

    def _head_key(self, now: float) -> Hashable:
        """The shape key of the head request (the first one not expired), or ``_NO_KEY``."""
        for queue, reject in self._queues:
            for r in queue:
                if not (reject and r.deadline is not None and r.deadline <= now):
                    return r.shape_key
        return _NO_KEY

    def _gather(self, now: float) -> _Gathered:
        """The requests the batch may take, in batch order: those of the head's shape key
        that fit, skipping the others (they keep their place) and the expired ones (``expire``
        answers them)."""
        key = self._head_key(now)
        max_rows = self._max_rows
        preferred = self._preferred
        taken: list[PendingRequest] = []
        rows = best_cut = best_rows = 0
        oldest = earliest = math.inf
        for queue, reject in self._queues:
            for r in queue:
                deadline = r.deadline if reject else None  # only REJECT deadlines bind here
                if r.shape_key != key or (deadline is not None and deadline <= now):
                    continue
                if rows + r.rows > max_rows and taken:
                    # keep arrival order: never let a smaller request jump it
                    return _Gathered(taken, rows, best_cut, best_rows, oldest, earliest, True)
                taken.append(r)
                rows += r.rows
                if r.arrival < oldest:
                    oldest = r.arrival
                if deadline is not None and deadline < earliest:
                    earliest = deadline
                if rows in preferred:
                    best_cut, best_rows = len(taken), rows
                if rows >= max_rows:
                    return _Gathered(taken, rows, best_cut, best_rows, oldest, earliest, True)
        return _Gathered(taken, rows, best_cut, best_rows, oldest, earliest, False)

    @property
    def delay_skipped(self) -> bool:
        """Whether batches close without the queue delay now (learned: it gathers nothing)."""
        return self._learner is not None and self._learner.skipping()

    def _plain_batch(self, queue: deque[PendingRequest]) -> Batch:
        """The batch of a plain batcher (see ``_plain``) whose queue has no deadlines, without
        planning: the compatible requests from the head on that fit, closing now (FULL or
        IDLE)."""
        max_rows = self._max_rows
        taken: list[PendingRequest] = []
        rows = 0
        key = queue[0].shape_key
        for r in queue:
            if r.shape_key != key:
                continue
            if rows + r.rows > max_rows and taken:
                return Batch(taken, rows, CloseReason.FULL)
            taken.append(r)
            rows += r.rows
            if rows >= max_rows:
                return Batch(taken, rows, CloseReason.FULL)
        return Batch(taken, rows, CloseReason.IDLE)

    def _remove(self, requests: list[PendingRequest], rows: int) -> None:
        """Take a closed batch's requests out of their queues, keeping everyone else's order."""
        # a batch is usually a prefix of its queues (pop from the front); a skipped request
        # in front (other shape key) forces one rebuild of that queue
        leftover: dict[int, tuple[deque[PendingRequest], set[PendingRequest]]] = {}
        levels, leveled = self._levels, bool(self._n_levels)
        for r in requests:
            level = levels[r.level - 1 if leveled else 0]
            queue = level.delayed if r.delayed else level.live
            if queue[0] is r:
                queue.popleft()
            else:
                leftover.setdefault(id(queue), (queue, set()))[1].add(r)
            if r.deadline is not None and not r.delayed:
                level.timed -= 1
        for queue, gone in leftover.values():
            kept = [r for r in queue if r not in gone]
            queue.clear()
            queue.extend(kept)
        self._pending -= len(requests)
        self._pending_rows -= rows
        self._memo = None
