"""The sequence batcher of a stateful model (Triton's ``sequence_batching``).

A client sends the requests of a sequence with one correlation id (request parameter
``sequence_id``: a uint64 or a string), the first flagged ``sequence_start``, the last
``sequence_end``. Here each request:

- is checked: a correlation id is given, a sequence begins with its start flag, one row;
- waits for a slot: at most ``slots`` sequences are open at once (Triton's direct strategy
  gives each a batch slot; oldest considers ``max_candidate_sequences``); a sequence begun
  while all are taken waits in the backlog, first come first served, until one ends or
  idles out;
- keeps to one instance (its *lane*, the least loaded when it got its slot, or the lane of
  the sequence whose slot it took) from start to end, so a model that keeps a sequence's
  state in an instance's own memory sees all of it there (``core.lanes``);
- runs after the previous request of its sequence has been answered (so a sequence's
  requests reach the model in order, and a batch never holds two of one sequence; across
  sequences they batch as the strategy's delay and sizes allow);
- gets the control inputs the config names (start, end, ready: false/true values in their
  declared type; the correlation id) and, with implicit state, the state the sequence's
  previous request left (its initial state first); the state outputs stay here.

A sequence ends with its end request, when a new one starts under its id, or when it has had
no request for ``max_sequence_idle_microseconds`` (its state is then dropped and its next
request refused, as in Triton). Everything runs on the event loop.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from inferplex.config.model_config import DynamicBatching, ModelConfig
from inferplex.config.sequence_batching import SequenceBatching, State
from inferplex.datatypes import V2_TO_NUMPY
from inferplex.errors import ConfigError, InvalidInputError, ServerBusyError
from inferplex.types import InferenceRequest, Parameters

Outputs = dict[str, np.ndarray]
#: runs one request's feeds through the model's queue: (feeds, output names, the lane of the
#: instance it must run on) -> outputs
Submit = Callable[[dict[str, np.ndarray], list[str], int], Awaitable[Outputs]]
CorrelationId = int | str

_UINT64_MAX = (1 << 64) - 1


class _Sequence:
    """One open sequence: its turn (the request last queued), its state, its slot and the
    lane (instance) of the slot."""

    __slots__ = ("closing", "id", "idle_timer", "in_flight", "lane", "slot", "state", "tail")

    def __init__(self, sequence_id: CorrelationId, slot: asyncio.Future[None]) -> None:
        self.id = sequence_id
        self.slot = slot  # done once the sequence holds a slot
        self.lane = 0  # the instance it runs on, set with its slot
        #: done when the sequence's latest request has been answered (None: none yet)
        self.tail: asyncio.Future[None] | None = None
        self.state: dict[str, np.ndarray] = {}  # state input name -> the next request's
        self.in_flight = 0
        self.closing = False  # its end request arrived: it ends once nothing is in flight
        self.idle_timer: asyncio.TimerHandle | None = None


class SequenceBatcher:
    """Sequences of one model version."""

    def __init__(
        self,
        config: ModelConfig,
        batching: SequenceBatching,
        instances: int,
        loop: asyncio.AbstractEventLoop,
        max_backlog: int = 1024,
        initial_states: dict[str, np.ndarray] | None = None,
    ) -> None:
        """``initial_states``: the states whose initial values come from a data file (read
        at load, without a batch dimension), by state input name; the others start as
        zeros."""
        self._name = config.name
        self._batched = config.batched
        self._loop = loop
        self._idle_s = batching.idle_seconds
        rows = max(1, config.max_batch_size)
        oldest = batching.oldest
        if oldest is not None and oldest.max_candidate_sequences:
            self.slots = oldest.max_candidate_sequences
        else:
            self.slots = rows * max(1, instances)
        #: open sequences holding a slot, per lane (instance)
        self._lane_load = [0] * max(1, instances)
        self._controls = [_control(c.name, c.control[0]) for c in batching.control_input]
        #: the numeric type of the CORRID control input, if the model has one that is not a
        #: string: a string id cannot be fed to it, nor a number outside its range
        self._numeric_id = next(
            (
                dtype
                for _, kind, _, dtype in self._controls
                if kind == "CONTROL_SEQUENCE_CORRID" and dtype.kind != "O"
            ),
            None,
        )
        self._states = batching.state
        given = initial_states or {}
        self._initial = {
            s.input_name: _initial_state(s, self._batched, given.get(s.input_name))
            for s in batching.state
        }
        self._state_outputs = [s.output_name for s in batching.state]
        self._asked: list[str] = []
        self._wanted: list[str] = []
        self._open: dict[CorrelationId, _Sequence] = {}
        self._used = 0
        self._backlog: deque[_Sequence] = deque()
        self._max_backlog = max_backlog
        #: counters for the statistics: sequences begun, ended by request, idled out
        self.started = self.ended = self.timed_out = 0

    @property
    def open_sequences(self) -> int:
        return len(self._open)

    @property
    def backlog(self) -> int:
        """Sequences begun that wait for a slot."""
        return len(self._backlog)

    def statistics(self) -> dict[str, int]:
        """Sequences begun, ended by a request, idled out, open now, waiting for a slot."""
        return {
            "started": self.started,
            "ended": self.ended,
            "timed_out": self.timed_out,
            "open": len(self._open),
            "backlog": len(self._backlog),
            "slots": self.slots,
        }

    async def run(
        self,
        request: InferenceRequest,
        feeds: dict[str, np.ndarray],
        rows: int,
        outputs: list[str],
        submit: Submit,
    ) -> Outputs:
        """Run one request of a sequence (``feeds`` checked against the declared inputs)."""
        sequence_id, start, end = self._flags(request.parameters, rows)
        sequence = self._enter(sequence_id, start, end)
        previous, turn = sequence.tail, self._loop.create_future()
        sequence.tail = turn
        sequence.in_flight += 1
        try:
            if previous is not None and not previous.done():
                await asyncio.shield(previous)  # its cancellation must not cancel the turn
            if not sequence.slot.done():
                await asyncio.shield(sequence.slot)
            feeds = {**feeds, **self._server_inputs(sequence, start, end, rows)}
            wanted = self._with_states(outputs)
            results = await submit(feeds, wanted, sequence.lane)
            for state in self._states:
                sequence.state[state.input_name] = results[state.output_name]
            return results if len(wanted) == len(outputs) else {n: results[n] for n in outputs}
        finally:
            turn.set_result(None)
            sequence.in_flight -= 1
            if not sequence.in_flight:
                if sequence.closing:
                    self.ended += 1
                    self._release(sequence)
                elif self._open.get(sequence.id) is sequence:
                    sequence.idle_timer = self._loop.call_later(self._idle_s, self._idle, sequence)

    def _with_states(self, outputs: list[str]) -> list[str]:
        """``outputs`` and the state outputs: the same list for the same ``outputs`` (the
        batch takes requests asking for the same list as alike, without comparing them)."""
        if outputs is not self._asked:
            self._asked = outputs
            self._wanted = outputs + [n for n in self._state_outputs if n not in outputs]
        return self._wanted

    # -- sequences ----------------------------------------------------------------------------
    def _flags(self, parameters: Parameters, rows: int) -> tuple[CorrelationId, bool, bool]:
        """The request's correlation id and start and end flags, checked."""
        sequence_id = parameters.get("sequence_id", 0) if parameters else 0
        start = parameters.get("sequence_start", False) if parameters else False
        end = parameters.get("sequence_end", False) if parameters else False
        if isinstance(sequence_id, bool) or not isinstance(sequence_id, int | str):
            raise InvalidInputError(
                f"request parameter 'sequence_id' must be an unsigned integer or a string, "
                f"got {sequence_id!r}"
            )
        if sequence_id in (0, ""):
            raise InvalidInputError(
                f"inference request to model '{self._name}' must specify a non-zero or "
                "non-empty correlation ID (request parameter 'sequence_id'): it is a "
                "sequence model"
            )
        if isinstance(sequence_id, int) and not 0 < sequence_id <= _UINT64_MAX:
            raise InvalidInputError(
                f"request parameter 'sequence_id' must be an unsigned 64-bit integer, "
                f"got {sequence_id}"
            )
        if self._numeric_id is not None:
            self._check_numeric_id(sequence_id)
        for name, flag in (("sequence_start", start), ("sequence_end", end)):
            if not isinstance(flag, bool):
                raise InvalidInputError(
                    f"request parameter '{name}' must be a boolean, got {flag!r}"
                )
        if self._batched and rows != 1:
            raise InvalidInputError(
                f"inference request to model '{self._name}' must specify batch-size 1 due to "
                f"requirements of sequence batcher (got {rows}): each row of a sequence is "
                "one request"
            )
        return sequence_id, start, end

    def _check_numeric_id(self, sequence_id: CorrelationId) -> None:
        """A correlation id the model's numeric CORRID control input can hold."""
        dtype = self._numeric_id
        assert dtype is not None
        if isinstance(sequence_id, str):
            raise InvalidInputError(
                f"request parameter 'sequence_id' of model '{self._name}' must be an unsigned "
                f"integer: its CONTROL_SEQUENCE_CORRID input is {dtype.name}, not a string; "
                f"got the string {sequence_id[:64]!r}"
            )
        info = np.iinfo(dtype) if dtype.kind in "iu" else None
        if info is not None and sequence_id > info.max:
            raise InvalidInputError(
                f"request parameter 'sequence_id' of model '{self._name}' must be at most "
                f"{info.max} (its CONTROL_SEQUENCE_CORRID input is {dtype.name}), "
                f"got {sequence_id}"
            )

    def _enter(self, sequence_id: CorrelationId, start: bool, end: bool) -> _Sequence:
        """The open sequence a request belongs to (a new one for a start), taken out of the
        open ones by its end request (later requests under its id need a new start)."""
        sequence = self._open.get(sequence_id)
        if start:  # (a new sequence under an open id ends the old one)
            sequence = self._begin(sequence_id) if sequence is None else self._restart(sequence)
        elif sequence is None:
            raise InvalidInputError(
                f"inference request for sequence {sequence_id} to model '{self._name}' must "
                "specify the START flag on the first request of the sequence (it is not "
                "open: never started, ended, or idle for longer than "
                f"max_sequence_idle_microseconds, {self._idle_s * 1e6:.0f})"
            )
        if sequence.idle_timer is not None:
            sequence.idle_timer.cancel()
            sequence.idle_timer = None
        if end:
            del self._open[sequence_id]
            sequence.closing = True
        return sequence

    def _begin(self, sequence_id: CorrelationId) -> _Sequence:
        if self._used >= self.slots and len(self._backlog) >= self._max_backlog:
            raise ServerBusyError(
                f"model '{self._name}': {len(self._backlog)} sequences already wait for one of "
                f"its {self.slots} sequence slots (--max-sequence-backlog {self._max_backlog}); "
                "retry later"
            )
        sequence = _Sequence(sequence_id, self._loop.create_future())
        self._open[sequence_id] = sequence
        self.started += 1
        if self._used < self.slots:
            self._used += 1
            load = self._lane_load
            sequence.lane = load.index(min(load))
            load[sequence.lane] += 1
            sequence.slot.set_result(None)
        else:
            self._backlog.append(sequence)
        return sequence

    def _restart(self, old: _Sequence) -> _Sequence:
        """A start under the id of an open sequence: the old one ends, and shares its slot
        (or its place in the backlog) with the new one, which runs after the old's requests
        and keeps the slot."""
        new = _Sequence(old.id, old.slot)
        new.tail, new.lane = old.tail, old.lane
        self._open[old.id] = new
        if old in self._backlog:
            self._backlog[self._backlog.index(old)] = new
        self.started += 1
        self.ended += 1
        return new

    def _idle(self, sequence: _Sequence) -> None:
        """No request for the idle time: the sequence ends (a backlogged one leaves)."""
        sequence.idle_timer = None
        if sequence.in_flight or self._open.get(sequence.id) is not sequence:
            return
        del self._open[sequence.id]
        self.timed_out += 1
        self._release(sequence)

    def _release(self, sequence: _Sequence) -> None:
        """The sequence is over: its state goes, and its slot to the first in the backlog."""
        sequence.state.clear()
        if not sequence.slot.done():  # still in the backlog: it never held a slot
            if sequence in self._backlog:
                self._backlog.remove(sequence)
            return
        if self._backlog:  # the next takes the slot, on its lane
            waiting = self._backlog.popleft()
            waiting.lane = sequence.lane
            waiting.slot.set_result(None)
        else:
            self._used -= 1
            self._lane_load[sequence.lane] -= 1

    # -- what the server feeds the model -------------------------------------------------------
    def _server_inputs(
        self, sequence: _Sequence, start: bool, end: bool, rows: int
    ) -> dict[str, np.ndarray]:
        shape = (rows, 1) if self._batched else (1,)
        inputs: dict[str, np.ndarray] = {}
        for name, kind, values, dtype in self._controls:
            if kind == "CONTROL_SEQUENCE_CORRID":
                value: Any = sequence.id
                if dtype.kind == "O":
                    value = str(value).encode()
            else:
                flag = start if kind == "CONTROL_SEQUENCE_START" else end
                value = values[1] if kind == "CONTROL_SEQUENCE_READY" or flag else values[0]
            inputs[name] = np.full(shape, value, dtype=dtype)
        for state in self._states:
            held = sequence.state.get(state.input_name)
            inputs[state.input_name] = self._initial[state.input_name] if held is None else held
        return inputs


def _control(name: str, control: Any) -> tuple[str, str, tuple[Any, Any], np.dtype]:
    """(input name, kind, (false, true) values, numpy dtype) of a control input."""
    if control.kind == "CONTROL_SEQUENCE_CORRID":
        return name, control.kind, (None, None), V2_TO_NUMPY[control.data_type]
    false, true, datatype = control.values()
    return name, control.kind, (false, true), V2_TO_NUMPY[datatype]


def _initial_state(state: State, batched: bool, data: np.ndarray | None) -> np.ndarray:
    """What a sequence's state starts as: ``data`` (read from its data file), else zeros;
    with a batch dimension of one if ``batched``."""
    if data is not None:
        return data[None] if batched else data
    given = state.initial_state[0] if state.initial_state else None
    dims = given.dims if given is not None and given.dims else state.dims
    if any(d < 0 for d in dims):
        raise ConfigError(
            f"sequence_batching.state '{state.input_name}': dims {list(dims)} are variable; "
            "give initial_state.dims for the initial state's shape"
        )
    shape = (1, *dims) if batched else tuple(dims)
    return np.zeros(shape, V2_TO_NUMPY[state.data_type])


def batch_policy(batching: SequenceBatching) -> DynamicBatching:
    """How requests of different sequences share batches: the strategy's delay (and, for
    oldest, preferred sizes and ordering). Direct's minimum_slot_utilization is not used:
    a batch goes when the delay has passed or the model is free, as with a delay of 0."""
    oldest = batching.oldest
    if oldest is not None:
        return DynamicBatching(
            preferred_batch_size=oldest.preferred_batch_size,
            max_queue_delay_microseconds=oldest.max_queue_delay_microseconds,
            preserve_ordering=oldest.preserve_ordering,
        )
    delay = batching.direct.max_queue_delay_microseconds if batching.direct else 0
    return DynamicBatching(max_queue_delay_microseconds=delay)
