"""The queue of lanes of a model whose requests are pinned to instances: a batch comes from
one lane whose instance is idle, carries that lane, and lanes take turns."""

from __future__ import annotations

from inferplex.config.model_config import DynamicBatching
from inferplex.core.batch import CloseReason, PendingRequest
from inferplex.core.batcher import DynamicBatcher
from inferplex.core.fifo import FifoQueue
from inferplex.core.lanes import LaneQueue


def _request(lane: int, arrival: float = 0.0, timeout_us: int = 0) -> PendingRequest:
    request = PendingRequest(1, None, arrival, timeout_us=timeout_us)
    request.lane = lane
    return request


def _lanes(count: int = 2) -> tuple[LaneQueue, list[str], list[str]]:
    instances = [f"instance{i}" for i in range(count)]
    idle = list(instances)
    return LaneQueue([FifoQueue() for _ in instances], instances, idle), instances, idle


def test_a_batch_comes_from_the_lane_of_an_idle_instance_and_names_it() -> None:
    queue, instances, idle = _lanes()
    queue.submit(_request(1), 0.0)
    idle.remove(instances[1])  # lane 1's instance is busy: nothing may start
    assert queue.pending_requests == 1
    assert queue.next_batch(0.0) is None and queue.next_wakeup(0.0) is None
    idle.append(instances[1])
    assert queue.next_wakeup(0.0) == 0.0
    batch = queue.next_batch(0.0)
    assert batch is not None and batch.lane == 1 and queue.pending_requests == 0


def test_lanes_take_turns_and_count_close_reasons_together() -> None:
    queue, _, _ = _lanes()
    for lane in (0, 0, 1, 1):
        queue.submit(_request(lane), 0.0)
    lanes = []
    while (batch := queue.next_batch(0.0)) is not None:
        lanes.append(batch.lane)
    assert lanes == [0, 1, 0, 1]
    assert queue.close_reasons[CloseReason.IDLE] == 4


def test_deadlines_count_while_the_instance_is_busy() -> None:
    queue, instances, idle = _lanes()
    queue.submit(_request(0, arrival=0.0, timeout_us=1000), 0.0)
    idle.remove(instances[0])
    assert queue.next_wakeup(0.0) == 0.001  # its deadline, though it cannot start
    expired = queue.expire(0.002)
    assert len(expired) == 1 and queue.pending_requests == 0


def test_each_lane_batches_with_the_model_s_policy() -> None:
    policy = DynamicBatching(max_queue_delay_microseconds=0)
    instances = ["a", "b"]
    queue = LaneQueue(
        [DynamicBatcher("m", 4, policy, lambda rows: None) for _ in instances],
        instances,
        list(instances),
    )
    for lane in (1, 1, 0):
        queue.submit(_request(lane), 0.0)
    first = queue.next_batch(0.0)
    second = queue.next_batch(0.0)
    assert first is not None and second is not None
    assert (first.lane, len(first.requests)) == (0, 1)
    assert (second.lane, len(second.requests)) == (1, 2)  # one lane's requests batch together
    assert queue.withdraw(lambda r: True) == 0
