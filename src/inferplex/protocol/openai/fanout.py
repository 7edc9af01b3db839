"""One OpenAI request as several calls through the data plane's door.

The data plane's codec is one model request per call; an OpenAI request may be several: a
chat's ``n`` choices, a completion's prompts times ``n``, an embedding request's batches. Each
is one call through the door (``DataPlane.stream`` / ``DataPlane.infer``) with the request's
meta, so each model request gets what an ``/infer`` call gets: admission, the routing key,
its tracing span, its deadline, the model's breaker.

The body is read once: the first call's ``decode`` reads it (in a worker thread when it is
large: the door's offload) and makes the :class:`Plan` of every call; the other calls go
through the door as soon as the plan is made (while the first waits for its model), their
``decode`` taking their request from the plan. :func:`start` sends them and answers once one
has answered (a stream's reader reads each as it opens); :func:`answers` waits for every
call's answer (an embedding's batches).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from typing import Any, Generic, TypeVar

from inferplex.dataplane.codec import CallMeta
from inferplex.tracing.context import CallTrace

__all__ = ["Plan", "answers", "give_up", "later_meta", "merged", "start"]

T = TypeVar("T")
R = TypeVar("R")
I = TypeVar("I")  # noqa: E741 (an item)


class Plan(Generic[T]):
    """What the first call's ``decode`` made of the body, for the other calls. Made on the
    event loop or in a worker thread; ``made`` resolves on the loop once it is."""

    __slots__ = ("_loop", "made", "value")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.made: asyncio.Future[None] = self._loop.create_future()
        self.value: T | None = None

    def make(self, value: T) -> T:
        """Keep ``value`` (in whichever thread decodes) and tell the loop."""
        self.value = value
        self._loop.call_soon_threadsafe(_resolve, self.made)
        return value

    @property
    def ready(self) -> T:
        """The plan (made: the first call decoded its body)."""
        assert self.value is not None, "the first call has not planned the others"
        return self.value


def _resolve(made: asyncio.Future[None]) -> None:
    if not made.done():
        made.set_result(None)


async def start(
    first: Coroutine[Any, Any, R],
    plan: Plan[Any],
    rest: Callable[[], list[Coroutine[Any, Any, R]]],
    release: Callable[[R], None] | None = None,
) -> list[asyncio.Future[R]]:
    """Send ``first`` and, once its decode made ``plan``, the calls ``rest()`` makes; answer
    them (in that order) as soon as one has answered, the others still running. Not all: a
    stream's call answers with its first response, and two choices queued on one model
    instance would wait on each other (the first, unread, filling its response channel; the
    second never starting). Raises the error of a call that ended first in error (the
    others cancelled, their answers released with ``release``), and when the caller goes
    away (cancelled)."""
    calls: list[asyncio.Future[R]] = [asyncio.ensure_future(first)]
    try:
        await asyncio.wait((calls[0], plan.made), return_when=asyncio.FIRST_COMPLETED)
        # read the value, not ``made``: a first call that ended without suspending may end
        # before the loop ran the callback that resolves ``made``
        if plan.value is not None:
            calls.extend(asyncio.ensure_future(call) for call in rest())
        await asyncio.wait(calls, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        give_up(calls, release)
        raise
    ended = [call for call in calls if call.done()]
    if not any(_answered(call) for call in ended):
        give_up(calls, release)
        ended[0].result()  # raises its error
    return calls


async def answers(
    calls: list[asyncio.Future[R]], release: Callable[[R], None] | None = None
) -> list[R]:
    """Every call's answer, in order; the first error in call order is raised, the others'
    answers released (``release``)."""
    try:
        await asyncio.wait(calls)
    except BaseException:
        give_up(calls, release)
        raise
    failed = next((call for call in calls if not _answered(call)), None)
    if failed is not None:
        give_up(calls, release)
        failed.result()  # raises its error
    return [call.result() for call in calls]


def give_up(calls: list[asyncio.Future[R]], release: Callable[[R], None] | None) -> None:
    """Cancel the calls still running; release the answers of those that made one (a
    stream released twice is closed once)."""
    for call in calls:
        if not call.done():
            call.cancel()  # a call cancelled inside the door cleans up after itself
        elif release is not None and _answered(call):
            release(call.result())


def _answered(call: asyncio.Future[Any]) -> bool:
    return call.done() and not call.cancelled() and call.exception() is None


def later_meta(meta: CallMeta) -> CallMeta:
    """The meta of the calls after the first (whose span is open): the same, in the same
    trace. A call that came with a ``traceparent`` has every span a child of the caller's;
    one that came without has the later spans children of the first call's (each would
    otherwise start a trace of its own), and none where the first was not sampled. The
    answer names the first call's span (``meta.trace.traceparent``)."""
    trace = meta.trace
    if trace is None:
        return meta
    if "traceparent" in trace.carrier:
        carrier = trace.carrier
    elif trace.traceparent:
        carrier = {"traceparent": trace.traceparent}
    else:
        return dataclasses.replace(meta, trace=None)
    return dataclasses.replace(meta, trace=CallTrace(carrier, trace.received_ns))


async def merged(streams: list[AsyncIterator[I]]) -> AsyncGenerator[tuple[int, I], None]:
    """The items of several streams as they come, with their stream's index; one read in
    flight per stream, so each stream's back-pressure holds (its model is not read ahead)."""
    if len(streams) == 1:
        async for item in streams[0]:
            yield 0, item
        return
    pending = {asyncio.ensure_future(_next(stream)): i for i, stream in enumerate(streams)}
    try:
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for future in done:
                index = pending.pop(future)
                found = future.result()
                if found is _END:
                    continue
                yield index, found
                pending[asyncio.ensure_future(_next(streams[index]))] = index
    finally:
        for future in pending:
            future.cancel()


#: what a stream answers once it has ended
_END: Any = object()


async def _next(stream: AsyncIterator[I]) -> I:
    return await anext(stream, _END)
