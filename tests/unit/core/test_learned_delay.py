"""The learned queue delay: waited for while batches gather requests, skipped once nearly none
does (one batch in PROBE_EVERY still waits), back as soon as one holds several."""

from __future__ import annotations

from inferplex.config.model_config import DynamicBatching
from inferplex.core.batch import CloseReason, PendingRequest
from inferplex.core.batcher import DynamicBatcher
from inferplex.core.learned_delay import LEARN_AFTER, PROBE_EVERY

DELAY = 200e-6


def _batcher(learn: bool = True) -> DynamicBatcher:
    config = DynamicBatching(max_queue_delay_microseconds=200)
    return DynamicBatcher("m", 8, config, learn_delay=learn)


def _one_at_a_time(batcher: DynamicBatcher, now: float, count: int) -> tuple[float, list[bool]]:
    """``count`` requests, each alone (concurrency 1): whether each closed without waiting."""
    at_once = []
    for _ in range(count):
        batcher.submit(PendingRequest(1, "k", now), now)
        batch = batcher.next_batch(now)
        if batch is None:  # it waits the delay
            now += DELAY
            batch = batcher.next_batch(now)
            assert batch is not None and batch.reason is CloseReason.DELAY
            at_once.append(False)
        else:
            assert batch.reason is CloseReason.IDLE
            at_once.append(True)
        now += 0.001
    return now, at_once


def test_requests_that_come_one_at_a_time_stop_waiting_but_for_probes() -> None:
    batcher = _batcher()
    now, learning = _one_at_a_time(batcher, 0.0, 40)
    assert not any(learning[:LEARN_AFTER])  # the delay is waited until it has been seen
    assert batcher.delay_skipped
    now, later = _one_at_a_time(batcher, now, 3 * PROBE_EVERY)
    assert later.count(False) == 3  # one probe in PROBE_EVERY batches waits
    assert later.count(True) == 3 * (PROBE_EVERY - 1)


def test_a_batch_of_several_requests_brings_the_wait_back() -> None:
    batcher = _batcher()
    now, _ = _one_at_a_time(batcher, 0.0, 40)
    assert batcher.delay_skipped
    # two requests queued while the instance was busy: the batch that takes them holds both
    for _ in range(2):
        batcher.submit(PendingRequest(1, "k", now), now)
    batch = batcher.next_batch(now)
    assert batch is not None and len(batch.requests) == 2
    assert not batcher.delay_skipped
    batcher.submit(PendingRequest(1, "k", now), now)
    assert batcher.next_batch(now) is None  # it waits again


def test_a_fixed_delay_is_always_waited() -> None:
    batcher = _batcher(learn=False)
    _, at_once = _one_at_a_time(batcher, 0.0, 60)
    assert not any(at_once) and not batcher.delay_skipped
