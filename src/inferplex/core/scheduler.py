"""Cross-model scheduling: which model's ready batch may start executing now.

The machine's compute is shared by every loaded model. Each model version (key
``"name/version"``) has a dynamic batcher that forms batches and a pool of instances that run
them. Whenever a model has a batch ready *and* an idle instance it is a **candidate**; the async
driver asks :meth:`Scheduler.pick` which candidate may start, calls :meth:`Scheduler.start` for
it (a :class:`Ticket`), and hands the ticket back to :meth:`Scheduler.finish` when the batch is
done. The scheduler is pure (no clock, threads or I/O): every call that needs time takes
``now``, seconds from a monotonic clock the driver owns, so tests drive it with a fake clock.

Driver contract: pass *every* current candidate to each ``pick`` call (a model that drops out
of the candidates while not running counts as idle, see "newly active" below), call
``note_arrival`` for each request a model receives, and ``finish`` each ticket exactly once.

**Slots.** ``slots`` bounds the batch executions that run at once server-wide (by default the
number of cores, chosen by the caller): ``pick`` answers ``None`` while all are taken and
``start`` refuses to exceed them. Cores are pooled, not partitioned: any model may use any free
slot, within the rules below.

**Resources** (Triton's rate limiter, ``instance_group.rate_limiter.resources``). A model may
hold named tokens while one of its batches runs (:attr:`ModelPolicy.resources`). The total of a
resource is the amount given to the constructor, or by default the largest amount any
registered model asks for, so every model can run alone. A candidate whose tokens are not all
free is skipped. To keep a model that needs many tokens from starving behind a stream of small
consumers, a skipped candidate *reserves* the resources it needs: candidates ranked after it
that need any of the same resources wait too (Triton serves its staged instances in order for
the same reason), while candidates needing other resources, or none, still run. A model that
asks for more of a resource than its explicit total could never run and is refused at
:meth:`Scheduler.register`.

**Policies** (``policy``, from the server settings):

``round_robin``
    Models of similar cost. Candidates are taken in a stable order (by key), starting after the
    model started last, so every ready model gets a turn in rotation.

``priority``
    Weighted fair sharing of compute time (start-time fair queuing). Each model has a virtual
    time: the compute seconds its batches used divided by its :attr:`ModelPolicy.weight`; the
    candidate with the smallest virtual time goes first, so over time each busy model gets
    compute in proportion to its weight. A batch is charged its estimated cost (the model's
    smoothed execution time) when it starts and corrected to the measured cost when it
    finishes, so one model cannot take several free slots before its first batch is charged.
    A model that becomes active again (since the previous ``pick`` it was neither running nor a
    candidate, nor finished a batch) starts no lower than the current minimum virtual time of
    the active models: an idle model cannot bank credit and then claim a backlog of compute.

    Slot reservation: while a model of higher weight has been active recently (a request noted
    by ``note_arrival`` in the last ``reserve_window`` seconds, default 1 s), lower-weight
    models together may occupy at most ``slots - 1`` executions, so a request to the most
    important active model never waits behind a machine full of less important batches. With a
    single slot there is nothing to reserve without idling the whole machine, so the rule is off.

    The policy only decides which batch *starts*: once batches of two models run, the operating
    system shares the cores between their threads (and the server's own). A model that floods
    the server beside one whose latency matters is configured with ``scheduling { nice: N }``
    (:mod:`inferplex.threadprio`), so its running batches yield the contended cores as well.

``adaptive``
    Like ``priority``, but the effective weight of a model with a latency target
    (:attr:`ModelPolicy.slo_p99_ms`) follows its measured p99: the end-to-end latencies reported
    to ``finish`` over a sliding window (the last 256 requests within the last 5 s). The policy
    aims at 90 % of the target, not the target itself: the window's p99 trails the latencies
    now, and a p99 that only reacts once over the target spends the time it takes to come back
    down above it. At most every 50 ms per model: a p99 above the aim multiplies the effective
    weight by 1.25 (up to 16x the base weight); a p99 under 70 % of the target decays it by 0.9
    back toward the base weight; in between it holds. Models without a target keep their base
    weight. Models above their aim (*missing* it) also get the slot reservation: while a
    recently active model misses its aim, every model that is not missing its own, whatever its
    weight, counts as lower, so a slot stays free for the models in trouble.

    Slots alone do not hold a target: the batches of other models that do run still take the
    cores from it. So the worst p99 / target of the recently active models with a target also
    steers an :class:`~inferplex.core.adaptive.SloGuard`: above the aim it halves the share of
    compute the models *without* a target may use (down to 1/64), well under the target it
    gives it back by steps of 5 %, and while it is below 1 and a model with a target is
    recently active, their batches are paced to that share (a candidate refused for it may
    start at :meth:`Scheduler.reservation_lifts`).

Ties (equal virtual times) go to Triton's rate-limiter rule: the smaller
``executions x max(resource_priority, 1)``, so a ``resource_priority`` of 2 gets half the
turns of 1 (0 counts as 1); remaining ties go by key. Every decision is deterministic.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from operator import attrgetter
from typing import Literal

from inferplex.core.adaptive import SloGuard
from inferplex.core.model_share import ADJUST_INTERVAL_S, AIM, WELL_UNDER, ModelPolicy, ModelState
from inferplex.core.resources import ResourcePool, needs_of
from inferplex.errors import ConfigError

# ModelPolicy is what ``register`` takes: it is imported from here with the scheduler
__all__ = ["POLICIES", "ModelPolicy", "Policy", "Scheduler", "Ticket"]

Policy = Literal["round_robin", "priority", "adaptive"]
POLICIES: tuple[Policy, ...] = ("round_robin", "priority", "adaptive")

#: smoothing of each model's execution-time estimate (the charge at start)
COST_SMOOTHING = 0.2


class Ticket:
    """One batch execution in progress; hand it to :meth:`Scheduler.finish` exactly once."""

    __slots__ = (
        "_charge",
        "_estimate",
        "_needs",
        "_pace",
        "_state",
        "_weight",
        "key",
        "started_at",
    )

    def __init__(
        self, state: ModelState, started_at: float, charge: float, estimate: float, pace: float
    ) -> None:
        self.key = state.key
        self.started_at = started_at
        self._state = state
        self._charge = charge  # virtual time charged at start, corrected at finish
        self._estimate = estimate  # the execution time ``_charge`` assumed
        self._pace = pace  # the SLO guard's rate where it paced this execution, else 0
        self._weight = state.weight
        self._needs = state.needs  # what this execution holds, even if the model re-registers

    def __repr__(self) -> str:
        return f"Ticket({self.key!r}, started_at={self.started_at})"


class Scheduler:
    """Decides which candidate model starts its next batch; see the module docstring."""

    def __init__(
        self,
        policy: Policy,
        slots: int,
        resources: Mapping[str, int] | None = None,
        *,
        reserve_window: float = 1.0,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown scheduling policy {policy!r}; expected one of {POLICIES}")
        if not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots must be a positive integer, got {slots!r}")
        if reserve_window < 0:
            raise ValueError(f"reserve_window must be >= 0 seconds, got {reserve_window!r}")
        self._resources = ResourcePool(resources)
        self._policy = policy
        self._fair = policy != "round_robin"
        self._adaptive = policy == "adaptive"
        self._slots = slots
        self._reserve_window = reserve_window
        self._models: dict[str, ModelState] = {}
        self._recent: dict[str, ModelState] = {}  # models with a noted arrival, pruned in pick
        #: every model has the same weight and none a latency target: no model is ever below
        #: the reservation's bar, so no pick needs it (nor a walk over the recent models)
        self._one_weight = True
        self._weights: Counter[float] = Counter()  # registered models per configured weight
        self._targeted = 0  # registered models with a latency target
        self._busy: set[ModelState] = set()  # models with executions running
        self._tickets: set[Ticket] = set()
        self._running = 0
        self._epoch = 0
        self._vfloor = 0.0  # never-decreasing minimum virtual time of the active models
        self._last_started: str | None = None
        self._compute_total = 0.0
        # the guard paces within what the slot reservation leaves (all of one slot: no reservation)
        self._guard = SloGuard(max(slots - 1, 1)) if self._adaptive else None
        self._paced_until: float | None = None  # a candidate refused by the guard may start then
        self._steered = -math.inf  # when the guard's share was last adjusted

    @property
    def policy(self) -> Policy:
        return self._policy

    @property
    def slots(self) -> int:
        return self._slots

    @property
    def running(self) -> int:
        """Batch executions running now, server-wide."""
        return self._running

    @property
    def resource_totals(self) -> dict[str, int]:
        """The total of each resource: explicit, or the largest amount a model asks for."""
        return self._resources.totals

    @property
    def untargeted_share(self) -> float:
        """``adaptive``: the share of their compute the models without a latency target may
        use while one with a target is active (1: not paced)."""
        return 1.0 if self._guard is None else self._guard.share

    def free_resources(self) -> dict[str, int]:
        """Tokens of each resource not held by a running execution."""
        return self._resources.free()

    def register(self, key: str, policy: ModelPolicy) -> None:
        """Add a model, or replace the policy of a registered one (its accounting is kept)."""
        if not (math.isfinite(policy.weight) and policy.weight > 0):
            raise ConfigError(f"model {key!r}: scheduling weight must be > 0, got {policy.weight}")
        slo = policy.slo_p99_ms
        if slo is not None and not (math.isfinite(slo) and slo > 0):
            raise ConfigError(f"model {key!r}: slo_p99_ms must be > 0 ms, got {slo}")
        if policy.resource_priority < 0:
            raise ConfigError(
                f"model {key!r}: rate_limiter priority must be >= 0, got {policy.resource_priority}"
            )
        self._resources.check(key, policy.resources)
        needs = needs_of(policy.resources)
        state = self._models.get(key)
        had_needs = False
        if state is None:
            state = self._models[key] = ModelState(key, policy, needs)
        else:
            self._count_out(state)
            had_needs = bool(state.needs)
            if slo is None or self._policy != "adaptive":
                state.boost, state.missing = 1.0, False
            state.configure(policy, needs)
        self._count_in(state)
        if needs or had_needs:  # (a walk over every model: not for the many without)
            self._recount()

    def unregister(self, key: str) -> None:
        """Remove a model. Its running executions still hold their slots until finished."""
        state = self._state(key)
        del self._models[key]
        self._count_out(state)
        self._recent.pop(key, None)
        if self._last_started == key:
            self._last_started = None
        if state.needs:
            self._recount()

    def note_arrival(self, key: str, now: float) -> None:
        """Record that a request for ``key`` arrived (activity for the slot reservation)."""
        state = self._models.get(key) or self._state(key)
        state.last_arrival = now
        self._recent[key] = state

    def reservation_lifts(self) -> float | None:
        """The earliest moment the slot reservation may lift (a recent arrival leaves the
        window) or a candidate the last ``pick`` refused for the SLO guard may start: a driver
        whose candidates were refused while slots were free waits until then. None when
        nothing reserves slots or paces."""
        lifts = None
        if self._fair and self._slots > 1 and self._recent and not self._one_weight:
            lifts = min(s.last_arrival for s in self._recent.values()) + self._reserve_window
        paced = self._paced_until
        if paced is not None and (lifts is None or paced < lifts):
            return paced
        return lifts

    def pick(self, candidates: Collection[str], now: float) -> str | None:
        """The candidate that may start a batch now, or None (no free slot or no candidate fits).

        ``candidates``: every model with a batch ready and an idle instance (all of them on each
        call: a model missing from the previous call that is not running counts as newly active).
        """
        previous, epoch = self._epoch, self._epoch + 1
        self._epoch = epoch
        states: list[ModelState] = []
        fresh: list[ModelState] = []
        active_min = math.inf  # over candidates that were already active
        models = self._models
        for key in candidates:
            state = models.get(key) or self._state(key)
            if state.seen == epoch:  # listed twice
                continue
            if state.running == 0 and state.seen != previous:
                fresh.append(state)
            else:
                active_min = state.vtime if state.vtime < active_min else active_min
            state.seen = epoch
            states.append(state)
        self._advance_floor(active_min, fresh)
        if self._running >= self._slots or not states:
            return None
        if len(states) > 1:  # one candidate (the usual case) needs no order
            self._order(states)
        bar = self._reservation_bar(now)
        reserved: set[str] | None = None
        self._paced_until = None
        for state in states:
            if self._waits(state, bar, now):
                continue
            # a model with rate-limiter resources waits while they are taken, and one that
            # cannot have them holds them back from those after it
            if (
                state.needs
                and (held := self._resources.held_back(state.needs, reserved)) is not None
            ):
                reserved = held
                continue
            return state.key
        return None

    def _order(self, states: list[ModelState]) -> None:
        """Sort candidates into the order they are offered a slot: fair (virtual time, then
        Triton's tie-break) or round robin after the model started last."""
        if self._fair:
            states.sort(key=_FAIR_ORDER)
        else:
            last = self._last_started
            states.sort(key=lambda s: (last is not None and s.key <= last, s.key))

    def start(self, key: str, now: float) -> Ticket:
        """Take a slot and the model's resources for one batch execution."""
        state = self._models.get(key) or self._state(key)
        if self._running >= self._slots:
            raise RuntimeError(f"cannot start {key!r}: all {self._slots} slots are running")
        needs = state.needs
        if needs and not self._resources.fits(needs):
            raise RuntimeError(
                f"cannot start {key!r}: it needs {dict(needs)}, free {self.free_resources()}"
            )
        if self._fair and state.running == 0 and state.seen != self._epoch:
            state.vtime = max(state.vtime, self._vfloor)  # started without being picked
        if needs:
            self._resources.take(needs)
        estimate = state.est_cost or 0.0
        charge = estimate / state.weight
        state.vtime += charge
        guard = None if state.targeted else self._pacing(now)
        pace = 0.0 if guard is None else guard.charge(now, estimate)
        state.running += 1
        state.executions += 1
        state.turns += state.priority
        self._running += 1
        self._busy.add(state)
        self._last_started = key
        ticket = Ticket(state, now, charge, estimate, pace)
        self._tickets.add(ticket)
        return ticket

    def finish(self, ticket: Ticket, now: float, latencies_s: Sequence[float]) -> None:
        """Return a ticket's slot and resources; ``latencies_s``: end-to-end latencies of the
        batch's requests (they feed the p99 that ``adaptive`` steers by)."""
        try:
            self._tickets.remove(ticket)
        except KeyError:
            raise RuntimeError(f"{ticket!r} was already finished or is not ours") from None
        state = ticket._state
        cost = max(now - ticket.started_at, 0.0)
        state.vtime += cost / ticket._weight - ticket._charge
        state.compute_s += cost
        self._compute_total += cost
        if ticket._pace and self._guard is not None:
            self._guard.settle(ticket._pace, ticket._estimate, cost)
        estimate = state.est_cost
        state.est_cost = cost if estimate is None else estimate + COST_SMOOTHING * (cost - estimate)
        if ticket._needs:
            self._resources.give_back(ticket._needs)
        state.running -= 1
        self._running -= 1
        if state.running == 0:
            self._busy.discard(state)
            state.seen = self._epoch  # active until now: a candidate at the next pick is not fresh
        state.record(now, latencies_s)
        if self._adaptive and state.due_to_steer(now):
            self._adapt(state, now)

    def snapshot(self) -> dict[str, dict[str, float]]:
        """Per model, for statistics: ``share`` (of all compute seconds used so far),
        ``weight`` (base), ``effective_weight``, ``p99_ms`` and ``slo_p99_ms`` (NaN when
        unknown / none), ``running``, ``executions``, ``compute_s``, ``virtual_time``."""
        total = self._compute_total
        result: dict[str, dict[str, float]] = {}
        for key, state in self._models.items():
            p99 = state.p99()
            slo = state.policy.slo_p99_ms
            result[key] = {
                "share": state.compute_s / total if total > 0 else 0.0,
                "weight": state.policy.weight,
                "effective_weight": state.weight,
                "p99_ms": math.nan if p99 is None else p99 * 1000.0,
                "slo_p99_ms": math.nan if slo is None else float(slo),
                "running": float(state.running),
                "executions": float(state.executions),
                "compute_s": state.compute_s,
                "virtual_time": state.vtime,
            }
        return result

    def _state(self, key: str) -> ModelState:
        try:
            return self._models[key]
        except KeyError:
            raise KeyError(f"model {key!r} is not registered with the scheduler") from None

    def _recount(self) -> None:
        self._resources.recount(state.needs for state in self._models.values())

    def _count_in(self, state: ModelState) -> None:
        self._weights[state.policy.weight] += 1
        self._targeted += state.targeted
        self._one_weight = len(self._weights) <= 1 and not self._targeted

    def _count_out(self, state: ModelState) -> None:
        weight = state.policy.weight
        self._weights[weight] -= 1
        if not self._weights[weight]:
            del self._weights[weight]
        self._targeted -= state.targeted
        self._one_weight = len(self._weights) <= 1 and not self._targeted

    def _advance_floor(self, active_min: float, fresh: list[ModelState]) -> None:
        """Raise the virtual-time floor to the active models' minimum; lift fresh ones to it
        (round robin keeps no virtual time)."""
        if not self._fair:
            return
        for state in self._busy:
            if state.vtime < active_min:
                active_min = state.vtime
        if active_min != math.inf and active_min > self._vfloor:
            self._vfloor = active_min
        for state in fresh:
            if state.vtime < self._vfloor:
                state.vtime = self._vfloor

    def _reservation_bar(self, now: float) -> float:
        """Models whose effective weight is below the bar (and that are not missing their
        target) share at most ``slots - 1`` executions. The bar is the weight of the most
        important recently active model, infinite while a recently active model misses its
        target, and 0 (no reservation) when nothing was active recently."""
        if not self._fair or self._slots < 2 or not self._recent or self._one_weight:
            return 0.0
        horizon = now - self._reserve_window
        bar = 0.0
        expired: list[str] | None = None
        for state in self._recent.values():
            if state.last_arrival < horizon:
                if expired is None:
                    expired = []
                expired.append(state.key)
            elif state.missing:
                bar = math.inf
            elif state.weight > bar:
                bar = state.weight
        if expired:
            for key in expired:
                del self._recent[key]
        return bar

    def _waits(self, state: ModelState, bar: float, now: float) -> bool:
        """Whether a candidate is held back: by the slot reservation (below ``bar``, with the
        slots it leaves taken) or by the SLO guard's pacing (noting when it may start)."""
        if state.weight < bar and not state.missing and self._room_below(bar) == 0:
            return True
        if not state.targeted and (guard := self._pacing(now)) and not guard.allows(now):
            self._paced_until = guard.resume_at
            return True
        return False

    def _pacing(self, now: float) -> SloGuard | None:
        """The SLO guard while it paces the models without a target: its share is below 1 and
        a model with a target had a request within the reserve window."""
        guard = self._guard
        if guard is None or not guard.pacing or not self._active_targets(now):
            return None
        return guard

    def _active_targets(self, now: float) -> list[ModelState]:
        """The models with a latency target that had a request within the reserve window."""
        horizon = now - self._reserve_window
        return [s for s in self._recent.values() if s.targeted and s.last_arrival >= horizon]

    def _room_below(self, bar: float) -> int:
        """How many more executions the models below ``bar`` may start."""
        below = sum(s.running for s in self._busy if s.weight < bar and not s.missing)
        return max(self._slots - 1 - below, 0)

    def _adapt(self, state: ModelState, now: float) -> None:
        """Steer the model's boost by its p99, and the SLO guard by the worst p99 / target of
        the active models with a target."""
        if not state.steer(now):
            return
        if self._guard is not None and now - self._steered >= ADJUST_INTERVAL_S:
            self._steered = now
            worst = max([state.ratio, *(s.ratio for s in self._active_targets(now))])
            self._guard.steer(worst, AIM, WELL_UNDER)


#: priority / adaptive order: virtual time, then Triton's tie-break, then the key
_FAIR_ORDER = attrgetter("vtime", "turns", "key")
