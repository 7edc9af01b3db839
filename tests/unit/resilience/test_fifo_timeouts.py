"""The FIFO queue (models without dynamic batching) honours request timeouts."""

from __future__ import annotations

from inferplex.core.batch import PendingRequest
from inferplex.core.fifo import FifoQueue


def pending(arrival: float, timeout_us: int = 0) -> PendingRequest:
    return PendingRequest(1, None, arrival, timeout_us=timeout_us)


def test_without_timeouts_nothing_expires_and_no_timer_is_needed() -> None:
    queue = FifoQueue()
    queue.submit(pending(0.0), 0.0)
    assert queue.expire(1e9) == []
    assert queue.next_wakeup(5.0, instance_idle=False) is None
    assert queue.next_wakeup(5.0) == 5.0


def test_expired_requests_leave_the_queue_in_order() -> None:
    queue = FifoQueue()
    a, b, c = pending(0.0, 1000), pending(0.0), pending(0.0005, 1000)
    for request in (a, b, c):
        queue.submit(request, request.arrival)
    assert a.deadline == 0.001 and b.deadline is None
    # busy instance: the timer is needed for the earliest deadline only
    assert queue.next_wakeup(0.0, instance_idle=False) == 0.001
    assert queue.expire(0.0009) == []
    assert queue.expire(0.001) == [a]
    assert queue.next_wakeup(0.001, instance_idle=False) == 0.0015
    assert queue.expire(0.002) == [c]
    assert queue.pending_requests == 1
    assert queue.next_wakeup(0.002, instance_idle=False) is None
    batch = queue.next_batch(0.002)
    assert batch is not None and batch.requests == [b]


def test_a_request_taken_to_run_no_longer_expires() -> None:
    queue = FifoQueue()
    request = pending(0.0, 10)
    queue.submit(request, 0.0)
    assert queue.next_batch(0.0) is not None
    assert queue.expire(1.0) == []
    assert queue.next_wakeup(1.0, instance_idle=False) is None
