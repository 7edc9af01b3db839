"""Running a Triton python-backend model (``TritonPythonModel``): ``initialize(args)`` gets
Triton's ``args`` dict; ``execute(requests)`` gets one ``triton.InferenceRequest`` per client
request of the batch (its rows, id and parameters) and returns one ``InferenceResponse`` per
request (an error response fails its request alone), or None and answers through each
request's response sender (a decoupled model's only way: 0..N responses, then the final
flag). An ``async def execute`` runs on an event loop of the worker's own."""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np

from inferplex.backends.python.outputs import HandlerError, plain
from inferplex.backends.python.runner import BatchResult, HandlerRunner
from inferplex.backends.python.senders import BatchSenders, Respond
from inferplex.backends.worker.messages import Failure, RequestFailed, RequestInfo
from inferplex.errors import InferplexError
from inferplex.handler import triton
from inferplex.handler.base import Context, never


class TritonRunner(HandlerRunner):
    """A Triton-style model: one request per client request of a batch."""

    def __init__(self, handler: Any, context: Context) -> None:
        super().__init__(handler, context)
        #: runs an ``async def execute`` (made on first use)
        self._loop: asyncio.AbstractEventLoop | None = None
        if hasattr(handler, "initialize"):
            handler.initialize(_triton_args(context))

    def run(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        """The batch as one request; its error response fails the batch with its code."""
        result = self.run_requests(inputs, outputs, [RequestInfo(0, "", {}, self.rows(inputs))])
        if result.failed:
            failure = result.failed[0].failure
            error = InferplexError(failure.message)
            error.code = failure.code
            raise error
        return result.outputs

    def run_requests(
        self,
        inputs: dict[str, np.ndarray],
        outputs: list[str],
        requests: Sequence[RequestInfo],
        cancelled: Callable[[int], bool] = never,
        respond: Respond | None = None,
    ) -> BatchResult:
        convert = functools.partial(self.outputs.present, outputs)
        numbers = [request.number for request in requests]
        senders = BatchSenders(numbers, respond if self.decoupled else None, convert)
        split = self._requests(inputs, outputs, requests, cancelled, senders)
        responses = self._responses(self._execute(split), senders, len(split))
        if responses is None:  # a decoupled model: it sends them (maybe from its threads)
            return BatchResult(still_open=senders.still_open())
        failed: list[RequestFailed] = []
        answered: list[dict[str, np.ndarray]] = []
        for index, response in enumerate(responses):
            error = response.error()
            if error is not None:
                failed.append(RequestFailed(index, Failure(error.server_code(), error.message())))
            else:
                answered.append({t.name(): t.as_numpy() for t in response.output_tensors()})
        if not answered:
            return BatchResult({}, failed)
        return BatchResult(self.outputs.all(outputs, self._joined(answered)), failed)

    def finalize(self) -> None:
        super().finalize()
        if self._loop is not None:
            self._loop.close()

    def _requests(
        self,
        inputs: dict[str, np.ndarray],
        outputs: list[str],
        requests: Sequence[RequestInfo],
        cancelled: Callable[[int], bool],
        senders: BatchSenders,
    ) -> list[triton.InferenceRequest]:
        """The batch as the requests ``execute`` gets, each with its rows of the inputs."""
        split: list[triton.InferenceRequest] = []
        offset = 0
        batched = self.batched
        for index, info in enumerate(requests):
            end = offset + info.rows
            tensors = [
                triton.Tensor(name, array[offset:end] if batched else array)
                for name, array in inputs.items()
            ]
            check = Sticky(functools.partial(cancelled, index))
            request = triton.InferenceRequest.received(
                self.context.model_name,
                tensors,
                outputs,
                info.id,
                info.parameters,
                senders.sender(index, check),
                None if cancelled is never else check,
            )
            split.append(request)
            offset = end
        return split

    def _joined(self, answered: list[dict[str, np.ndarray]]) -> dict[str, Any]:
        """The answered requests' outputs as one batch (rows in order)."""
        if len(answered) == 1 or not self.batched:
            return answered[0]
        results = {}
        for name in {n for answer in answered for n in answer}:
            parts = [answer.get(name) for answer in answered]
            if any(part is None for part in parts):
                raise HandlerError(f"some responses of execute(requests) have no output '{name}'")
            results[name] = np.concatenate([np.asarray(plain(p)) for p in parts])
        return results

    def _execute(self, requests: list[triton.InferenceRequest]) -> Any:
        """``execute(requests)``; an ``async def execute`` runs to its end on the worker's
        event loop (its ``async_exec`` calls started together run at once in the server)."""
        returned = self.handler.execute(requests)
        if inspect.iscoroutine(returned):
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
            returned = self._loop.run_until_complete(returned)
        return returned

    def _responses(
        self, returned: Any, senders: BatchSenders, count: int
    ) -> list[triton.InferenceResponse] | None:
        """What ``execute`` answered: the list it returned, or (it returned None) the
        responses its senders kept, once each request had its final one; None for a
        decoupled model, which sent them."""
        if returned is None:
            if self.decoupled:
                return None
            senders.wait()
            missing = [i for i, response in enumerate(senders.kept) if response is None]
            if missing:
                raise HandlerError(
                    f"execute(requests) returned None and sent no response to request(s) "
                    f"{missing}: return one InferenceResponse per request, or send one with "
                    "request.get_response_sender()"
                )
            return cast(list[triton.InferenceResponse], senders.kept)
        if self.decoupled:
            raise HandlerError(
                "a decoupled model's execute(requests) returns None: it sends responses with "
                f"request.get_response_sender() (it returned a {type(returned).__name__})"
            )
        if not isinstance(returned, list | tuple) or len(returned) != count:
            got = f"{type(returned).__name__}"
            if isinstance(returned, list | tuple):
                got = f"{len(returned)} responses"
            raise HandlerError(
                f"execute(requests) must return a list with one InferenceResponse per request "
                f"({count} here), got {got}"
            )
        return list(returned)


class Sticky:
    """A request's cancellation check that stays true once it was: the cancel board's cell
    of a request whose responses go on after its batch is the next batch's too, and a later
    batch's notice there must not make it look uncancelled again."""

    __slots__ = ("_check", "_seen")

    def __init__(self, check: Callable[[], bool]) -> None:
        self._check = check
        self._seen = False

    def __call__(self) -> bool:
        if not self._seen:
            self._seen = self._check()
        return self._seen


def _triton_args(context: Context) -> dict[str, str]:
    """The ``args`` Triton passes to ``initialize``."""
    return {
        "model_config": json.dumps(context.config),
        "model_instance_kind": context.instance_kind,
        "model_instance_name": context.instance_name,
        "model_instance_device_id": str(context.device_id),
        "model_repository": str(Path(context.model_dir).parent),
        "model_version": context.model_version,
        "model_name": context.model_name,
    }
