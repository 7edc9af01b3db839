"""The sequence batcher on its own: slots and the backlog, a sequence's order, restarts,
cancellation, the inputs it feeds, its errors."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from inferplex.config.model_config import ModelConfig
from inferplex.config.sequence_batching import SequenceBatching
from inferplex.core.sequences import SequenceBatcher, batch_policy
from inferplex.errors import InvalidInputError, ServerBusyError
from inferplex.types import InferenceRequest

CONTROLS = [
    {"name": "START", "control": [{"kind": "CONTROL_SEQUENCE_START", "int32_false_true": [0, 1]}]},
    {"name": "END", "control": [{"kind": "CONTROL_SEQUENCE_END", "fp32_false_true": [0, 1]}]},
    {"name": "READY", "control": [{"kind": "CONTROL_SEQUENCE_READY", "bool_false_true": [0, 1]}]},
    {"name": "ID", "control": [{"kind": "CONTROL_SEQUENCE_CORRID", "data_type": "TYPE_STRING"}]},
]
STATE = [{"input_name": "S_IN", "output_name": "S_OUT", "data_type": "TYPE_FP32", "dims": [1]}]


class _Model:
    """A queue the test answers by hand: each submit waits for ``answer``."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, np.ndarray], list[str], asyncio.Future[Any]]] = []
        self.lanes: list[int] = []  # the lane each call was queued on

    def submit(
        self, feeds: dict[str, np.ndarray], names: list[str], lane: int
    ) -> asyncio.Future[Any]:
        future = asyncio.get_running_loop().create_future()
        self.calls.append((feeds, names, future))
        self.lanes.append(lane)
        return future

    def answer(self, index: int, value: float) -> None:
        out = np.full((1, 1), value, np.float32)
        self.calls[index][2].set_result({"OUT": out, "S_OUT": out + 100})


def _batcher(
    max_batch_size: int = 1, instances: int = 1, max_backlog: int = 1024, **fields: Any
) -> SequenceBatcher:
    batching = SequenceBatching(**{"control_input": CONTROLS, "state": STATE, **fields})
    config = ModelConfig(name="m", max_batch_size=max_batch_size, sequence_batching=batching)
    loop = asyncio.get_running_loop()
    return SequenceBatcher(config, batching, instances, loop, max_backlog)


def _run(batcher: SequenceBatcher, model: _Model, sequence_id: Any, **flags: Any) -> Any:
    request = InferenceRequest("m", [], parameters={"sequence_id": sequence_id, **flags})
    feeds = {"IN": np.ones((1, 1), np.float32)}
    return asyncio.ensure_future(batcher.run(request, feeds, 1, ["OUT"], model.submit))


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_the_server_feeds_controls_and_state_and_keeps_the_state_output() -> None:
    batcher, model = _batcher(), _Model()
    first = _run(batcher, model, "a", sequence_start=True)
    await _settle()
    feeds, names, _ = model.calls[0]
    assert names == ["OUT", "S_OUT"]
    assert feeds["START"].tolist() == [[1]] and feeds["START"].dtype == np.int32
    assert feeds["END"].tolist() == [[0.0]] and feeds["READY"].tolist() == [[True]]
    assert feeds["ID"].tolist() == [[b"a"]] and feeds["S_IN"].tolist() == [[0.0]]
    model.answer(0, 5)
    assert list(await first) == ["OUT"]  # the state output stays with the server
    last = _run(batcher, model, "a", sequence_end=True)
    await _settle()
    feeds = model.calls[1][0]
    assert feeds["START"].tolist() == [[0]] and feeds["END"].tolist() == [[1.0]]
    assert feeds["S_IN"].tolist() == [[105.0]]  # what the previous request left
    model.answer(1, 6)
    await last
    assert batcher.open_sequences == 0 and batcher.ended == 1


async def test_a_sequence_runs_one_request_at_a_time_in_arrival_order() -> None:
    batcher, model = _batcher(max_batch_size=4), _Model()
    runs = [_run(batcher, model, 9, sequence_start=True)] + [_run(batcher, model, 9) for _ in "ab"]
    await _settle()
    assert len(model.calls) == 1  # the next waits for this one's answer
    model.answer(0, 1)
    await _settle()
    assert len(model.calls) == 2
    model.answer(1, 2)
    await _settle()
    model.answer(2, 3)
    assert [float(r["OUT"][0, 0]) for r in await asyncio.gather(*runs)] == [1, 2, 3]


async def test_sequences_past_the_slots_wait_in_the_backlog_first_come_first_served() -> None:
    batcher, model = _batcher(max_batch_size=1, instances=1), _Model()
    assert batcher.slots == 1
    first = _run(batcher, model, 1, sequence_start=True)
    second = _run(batcher, model, 2, sequence_start=True, sequence_end=True)
    third = _run(batcher, model, 3, sequence_start=True, sequence_end=True)
    await _settle()
    assert len(model.calls) == 1 and batcher.backlog == 2
    model.answer(0, 1)
    await first
    ending = _run(batcher, model, 1, sequence_end=True)  # sequence 1 ends: 2 takes its slot
    await _settle()
    model.answer(1, 1)
    await ending
    await _settle()
    assert model.calls[2][0]["ID"].tolist() == [[b"2"]] and batcher.backlog == 1
    model.answer(2, 2)
    await second
    await _settle()
    model.answer(3, 3)
    await third
    assert batcher.backlog == 0 and batcher.open_sequences == 0


async def test_a_start_past_the_backlog_bound_is_refused_and_holds_nothing() -> None:
    batcher, model = _batcher(max_backlog=1), _Model()
    running = _run(batcher, model, 1, sequence_start=True)
    waiting = _run(batcher, model, 2, sequence_start=True, sequence_end=True)
    await _settle()
    with pytest.raises(ServerBusyError, match="--max-sequence-backlog 1"):
        await _run(batcher, model, 3, sequence_start=True)
    assert batcher.backlog == 1 and batcher.started == 2  # the third never began
    model.answer(0, 1)
    await running
    _run(batcher, model, 1, sequence_end=True)
    await _settle()
    model.answer(1, 1)
    await _settle()
    model.answer(2, 2)
    await waiting
    assert batcher.backlog == 0 and batcher.open_sequences == 0


async def test_a_cancelled_request_does_not_hold_up_its_sequence() -> None:
    batcher, model = _batcher(), _Model()
    first = _run(batcher, model, 4, sequence_start=True)
    waiting = _run(batcher, model, 4)
    after = _run(batcher, model, 4)
    await _settle()
    waiting.cancel()
    model.answer(0, 1)
    await first
    await _settle()
    assert len(model.calls) == 2  # the cancelled one never ran; the next one does
    model.answer(1, 2)
    assert float((await after)["OUT"][0, 0]) == 2


async def test_a_start_under_an_open_id_begins_a_new_sequence_with_fresh_state() -> None:
    batcher, model = _batcher(), _Model()
    first = _run(batcher, model, 5, sequence_start=True)
    await _settle()
    model.answer(0, 1)
    await first
    again = _run(batcher, model, 5, sequence_start=True)
    await _settle()
    assert model.calls[1][0]["S_IN"].tolist() == [[0.0]]
    model.answer(1, 1)
    await again
    assert batcher.started == 2 and batcher.open_sequences == 1


async def test_an_idle_sequence_ends_and_frees_its_slot() -> None:
    batcher, model = _batcher(max_sequence_idle_microseconds=1000), _Model()
    first = _run(batcher, model, 6, sequence_start=True)
    await _settle()
    model.answer(0, 1)
    await first
    for _ in range(1000):  # its 1 ms timer: polled, not slept on
        if not batcher.open_sequences:
            break
        await asyncio.sleep(0.001)
    assert batcher.timed_out == 1 and batcher.open_sequences == 0
    with pytest.raises(InvalidInputError, match="START flag"):
        await _run(batcher, model, 6)


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({}, "non-zero or non-empty correlation ID"),
        ({"sequence_id": ""}, "non-zero or non-empty correlation ID"),
        ({"sequence_id": 1 << 64}, "unsigned 64-bit"),
        ({"sequence_id": 1.5}, "unsigned integer or a string"),
        ({"sequence_id": 3, "sequence_start": 1}, "'sequence_start' must be a boolean"),
        ({"sequence_id": 3}, "START flag"),
    ],
)
async def test_bad_sequence_parameters_are_refused(parameters: Any, message: str) -> None:
    batcher, model = _batcher(), _Model()
    request = InferenceRequest("m", [], parameters=parameters)
    with pytest.raises(InvalidInputError, match=message):
        await batcher.run(request, {}, 1, ["OUT"], model.submit)
    assert not model.calls and batcher.open_sequences == 0


async def test_a_request_of_several_rows_is_refused() -> None:
    batcher, model = _batcher(max_batch_size=4), _Model()
    request = InferenceRequest("m", [], parameters={"sequence_id": 1, "sequence_start": True})
    with pytest.raises(InvalidInputError, match="batch-size 1"):
        await batcher.run(request, {}, 2, ["OUT"], model.submit)


def test_strategies_map_to_batch_policies() -> None:
    oldest = SequenceBatching(
        oldest={"preferred_batch_size": [4], "max_queue_delay_microseconds": 7}
    )
    assert batch_policy(oldest).preferred_batch_size == (4,)
    assert batch_policy(oldest).max_queue_delay_microseconds == 7
    direct = SequenceBatching(direct={"max_queue_delay_microseconds": 9})
    assert batch_policy(direct).max_queue_delay_microseconds == 9


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"direct": {}, "oldest": {}}, "not both"),
        ({"iterative_sequence": True}, "not supported"),
        ({"control_input": CONTROLS[:1] * 2}, "repeated"),
        (
            {"control_input": [{"name": "S", "control": [{"kind": "CONTROL_SEQUENCE_START"}]}]},
            "exactly one of",
        ),
        (
            {"control_input": [{"name": "C", "control": [{"kind": "CONTROL_SEQUENCE_CORRID"}]}]},
            "needs data_type",
        ),
        ({"state": [{**STATE[0], "initial_state": [{"data_file": "../x"}]}]}, "must stay inside"),
    ],
)
def test_configs_the_batcher_cannot_run_fail_at_load(fields: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SequenceBatching(**fields)


async def test_each_sequence_keeps_to_the_least_loaded_lane_of_its_slot() -> None:
    batcher, model = _batcher(max_batch_size=2, instances=2), _Model()
    runs = [_run(batcher, model, i, sequence_start=True) for i in (1, 2, 3)]
    await _settle()
    assert model.lanes == [0, 1, 0]  # spread over the instances
    for i in range(3):
        model.answer(i, i)
    await asyncio.gather(*runs)
    nexts = [_run(batcher, model, i) for i in (3, 1, 2)]
    await _settle()
    assert model.lanes[3:] == [0, 0, 1]  # each on the lane it started on
    for i in range(3, 6):
        model.answer(i, i)
    await asyncio.gather(*nexts)


async def test_a_sequence_from_the_backlog_takes_the_lane_of_the_slot_it_gets() -> None:
    batcher, model = _batcher(max_batch_size=1, instances=2), _Model()
    first = _run(batcher, model, 1, sequence_start=True)
    second = _run(batcher, model, 2, sequence_start=True)
    waiting = _run(batcher, model, 3, sequence_start=True, sequence_end=True)
    await _settle()
    assert model.lanes == [0, 1] and batcher.backlog == 1
    model.answer(1, 0)
    await second
    ending = _run(batcher, model, 2, sequence_end=True)  # lane 1's slot frees
    await _settle()
    model.answer(2, 0)
    await ending
    await _settle()
    assert model.lanes == [0, 1, 1, 1]  # the waiting sequence runs on lane 1
    model.answer(3, 0)
    model.answer(0, 0)
    await asyncio.gather(first, waiting)


@pytest.mark.parametrize(
    ("data_type", "sequence_id", "expected"),
    [
        (
            "TYPE_UINT64",
            "abc",
            "must be an unsigned integer: its CONTROL_SEQUENCE_CORRID input is uint64",
        ),
        ("TYPE_INT32", "7", "not a string; got the string '7'"),
        ("TYPE_INT32", 1 << 40, "must be at most 2147483647"),
    ],
)
async def test_an_id_the_numeric_corrid_input_cannot_hold_is_a_400(
    data_type: str, sequence_id: Any, expected: str
) -> None:
    """A string id for a numeric CORRID was a 500 (``invalid literal for int()``)."""
    corrid = {"kind": "CONTROL_SEQUENCE_CORRID", "data_type": data_type}
    batching = SequenceBatching(control_input=[{"name": "ID", "control": [corrid]}])
    config = ModelConfig(name="m", max_batch_size=1, sequence_batching=batching)
    batcher = SequenceBatcher(config, batching, 1, asyncio.get_running_loop())
    with pytest.raises(InvalidInputError, match=expected) as refused:
        await _run(batcher, _Model(), sequence_id, sequence_start=True)
    assert "'sequence_id' of model 'm'" in refused.value.message
    # a number within range is fed as the control's type
    model = _Model()
    running = _run(batcher, model, 5, sequence_start=True)
    await _settle()
    assert model.calls[0][0]["ID"].tolist() == [[5]]
    running.cancel()
