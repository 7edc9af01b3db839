"""Pacer: a load's steps take at most a share of the time while requests are served."""

from __future__ import annotations

import asyncio

import pytest

from inferplex.lifecycle import pacing
from inferplex.lifecycle.pacing import MAX_PAUSE_S, UNPACED, Pacer


class FakeClock:
    """perf_counter and sleep of the pacing module: steps 'take' the time they are given,
    pauses are recorded (and pass on the same clock)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 100.0
        self.pauses: list[float] = []
        monkeypatch.setattr(pacing, "perf_counter", lambda: self.now)
        monkeypatch.setattr(pacing, "sleep", self._sleep)

    async def _sleep(self, seconds: float) -> None:
        self.pauses.append(round(seconds, 9))
        self.now += seconds

    async def work(self, seconds: float, result: str = "done") -> str:
        self.now += seconds
        return result


async def test_beside_busy_serving_a_step_waits_until_the_earlier_ones_keep_their_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock(monkeypatch)
    pacer = Pacer(0.1, lambda: True)
    assert await pacer.step(lambda: clock.work(0.02)) == "done"
    assert clock.pauses == []  # the first step starts at once
    await pacer.step(lambda: clock.work(0.005))
    assert clock.pauses == [0.18]  # 20 ms of 200: a tenth
    await pacer.step(lambda: clock.work(0.0))
    assert clock.pauses == [0.18, 0.045]
    # nothing waits after the last step: the load answers when its work is done


async def test_time_between_steps_counts_towards_the_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock(monkeypatch)
    pacer = Pacer(0.1, lambda: True)
    await pacer.step(lambda: clock.work(0.02))
    clock.now += 0.15  # e.g. the replaced version draining
    await pacer.step(lambda: clock.work(0.01))
    assert clock.pauses == [0.03]
    clock.now += 1.0
    await pacer.step(lambda: clock.work(0.0))
    assert clock.pauses == [0.03]


async def test_an_idle_server_loads_at_full_speed(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock(monkeypatch)
    serving = [False]
    pacer = Pacer(0.1, lambda: serving[0])
    await pacer.step(lambda: clock.work(0.02))
    await pacer.step(lambda: clock.work(0.01))
    assert clock.pauses == []
    serving[0] = True  # requests arrive: the next step waits for the last one's share
    await pacer.step(lambda: clock.work(0.0))
    assert clock.pauses == [0.09]


async def test_share_one_and_unpaced_loads_never_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock(monkeypatch)
    for pacer in (Pacer(1.0, lambda: True), UNPACED):
        await pacer.step(lambda: clock.work(0.5))
        await pacer.step(lambda: clock.work(0.5))
    assert clock.pauses == []


async def test_a_very_long_step_pauses_at_most_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock(monkeypatch)
    pacer = Pacer(0.1, lambda: True)
    await pacer.step(lambda: clock.work(60.0))
    await pacer.step(lambda: clock.work(0.0))
    assert clock.pauses == [MAX_PAUSE_S]


async def test_a_failing_step_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock(monkeypatch)

    async def fails() -> None:
        clock.now += 0.01
        raise RuntimeError("broken model")

    with pytest.raises(RuntimeError, match="broken model"):
        await Pacer(0.1, lambda: True).step(fails)
    assert clock.pauses == []


@pytest.mark.parametrize("share", [0.0, -0.5, 1.5])
def test_share_must_be_above_zero_and_at_most_one(share: float) -> None:
    with pytest.raises(ValueError, match="share must be above 0 and at most 1"):
        Pacer(share, lambda: True)


async def test_real_pauses_pass_on_the_event_loop() -> None:
    """Without fakes: the pause is an asyncio sleep, other tasks run meanwhile."""
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.get_running_loop().create_task(ticker())
    pacer = Pacer(0.5, lambda: True)
    await pacer.step(lambda: asyncio.sleep(0.01))
    before = ticks
    await pacer.step(lambda: asyncio.sleep(0))
    task.cancel()
    # the 10 ms wait let the ticker run many times; the step itself yields only once
    assert ticks - before > 10


async def test_a_load_cancelled_while_it_waits_never_starts_the_step() -> None:
    pacer = Pacer(0.01, lambda: True)
    await pacer.step(lambda: asyncio.sleep(0.01))  # calls for about a second of waiting
    started: list[str] = []

    async def work() -> None:
        started.append("step")

    waiting = asyncio.get_running_loop().create_task(pacer.step(work))
    await asyncio.sleep(0.02)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert started == []
