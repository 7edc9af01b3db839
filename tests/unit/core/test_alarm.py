"""The dispatcher's alarm: short waits kept by its thread (on time once it has learned how
long its hand-over takes), long ones by the loop's timers, a new setting replacing the
pending one, a cancelled one silent."""

from __future__ import annotations

import asyncio
import time

from inferplex.core.alarm import EARLY_OK_S, THREAD_BELOW_S, Alarm


class _Fired:
    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.calls: list[tuple[float, float]] = []  # (moment given, clock when called)

    def __call__(self, moment: float) -> None:
        self.calls.append((moment, time.perf_counter()))
        self.event.set()

    async def after(self, alarm: Alarm, wait: float) -> tuple[float, float]:
        self.event.clear()
        now = time.perf_counter()
        alarm.set(now + wait, now)
        await asyncio.wait_for(self.event.wait(), 10)
        moment, called = self.calls[-1]
        assert moment == now + wait  # the moment set, whatever the clock said
        return moment, called


async def test_short_waits_fire_once_each_near_their_moment() -> None:
    fired = _Fired()
    alarm = Alarm(asyncio.get_running_loop(), fired)
    try:
        for _ in range(20):
            moment, called = await fired.after(alarm, 0.0002)
            assert called >= moment - EARLY_OK_S
        await asyncio.sleep(0.01)
    finally:
        await asyncio.to_thread(alarm.close)
    assert len(fired.calls) == 20 and alarm.at == float("inf")


async def test_a_long_wait_goes_to_the_loop_and_a_new_setting_replaces_it() -> None:
    fired = _Fired()
    alarm = Alarm(asyncio.get_running_loop(), fired)
    try:
        now = time.perf_counter()
        alarm.set(now + 5.0, now)  # on the loop's timers: far away
        assert alarm._thread is None
        moment, called = await fired.after(alarm, THREAD_BELOW_S * 2)
        await asyncio.sleep(0.01)
    finally:
        await asyncio.to_thread(alarm.close)
    assert called >= moment - EARLY_OK_S and len(fired.calls) == 1


async def test_a_cancelled_alarm_does_not_fire() -> None:
    fired = _Fired()
    alarm = Alarm(asyncio.get_running_loop(), fired)
    now = time.perf_counter()
    alarm.set(now + 0.001, now)
    alarm.cancel()
    await asyncio.sleep(0.02)
    await asyncio.to_thread(alarm.close)
    assert fired.calls == [] and alarm.at == float("inf")
