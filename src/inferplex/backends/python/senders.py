"""The response senders of one batch, in the worker process: what a Triton model's
``request.get_response_sender()`` sends goes out here.

For a decoupled model each response leaves at once (``respond``: over the worker's pipe, its
tensors through the arena; the server answers once it has queued it for the client, so a
slow client holds the sender back). A model that is not decoupled may use senders too, as in
Triton: one response per request, kept and answered with the batch once every request had
it, which may come from threads the model started after ``execute`` returned (``wait``). A
decoupled model's batch is over when ``execute`` returns: the requests still open
(``still_open``) go on with the threads that hold their senders, while the next batch runs,
as in Triton.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from inferplex.backends.worker.messages import Failure
from inferplex.handler import triton

#: sends one response of a request (by its ``RequestInfo.number``): (number, outputs or
#: None, final, why it failed or None) -> whether its client is still there
Respond = Callable[[int, dict[str, np.ndarray] | None, bool, Failure | None], bool]


class BatchSenders:
    """The senders of one batch's requests (one each, made on first use)."""

    def __init__(
        self,
        numbers: list[int],
        respond: Respond | None,
        convert: Callable[[dict[str, Any]], dict[str, np.ndarray]],
    ) -> None:
        """``respond`` sends a decoupled model's responses (None: a model that is not
        decoupled, whose one response per request is kept in ``kept``); ``convert`` casts a
        response's outputs to the declared datatypes."""
        self._numbers = numbers
        self._respond = respond
        self._convert = convert
        count = len(numbers)
        self._open = count
        self._cond = threading.Condition()
        #: a model that is not decoupled: the response each request was sent
        self.kept: list[triton.InferenceResponse | None] = [None] * count
        #: requests whose client the server found gone when their response arrived (before
        #: the cancel board may say so)
        self._gone: set[int] = set()
        #: requests that had their final response
        self._ended = [False] * count

    def sender(self, index: int, cancelled: Callable[[], bool]) -> triton.InferenceResponseSender:
        """Request ``index``'s sender; ``cancelled``: the cancel board's check of it."""

        def gone() -> bool:
            return index in self._gone or cancelled()

        return triton.InferenceResponseSender(functools.partial(self._emit, index), gone)

    def _emit(self, index: int, response: triton.InferenceResponse | None, final: bool) -> None:
        if self._respond is None:
            if response is not None and self.kept[index] is not None:
                raise triton.TritonModelException(
                    "a model that is not decoupled sends one response per request "
                    "(model_transaction_policy { decoupled: true } sends more)"
                )
            self.kept[index] = response or self.kept[index]
        elif not self._send(index, response, final):
            self._gone.add(index)
        if final:
            with self._cond:
                self._ended[index] = True
                self._open -= 1
                self._cond.notify_all()

    def _send(self, index: int, response: triton.InferenceResponse | None, final: bool) -> bool:
        """A decoupled model's response out now; whether its client is still there."""
        assert self._respond is not None
        number = self._numbers[index]
        if response is None:
            return self._respond(number, None, final, None)
        error = response.error()
        if error is not None:
            failure = Failure(error.server_code(), error.message())
            return self._respond(number, None, final, failure)
        outputs = {t.name(): t.as_numpy() for t in response.output_tensors()}
        return self._respond(number, self._convert(outputs), final, None)

    def still_open(self) -> tuple[int, ...]:
        """The numbers of the requests whose final response has not been sent yet."""
        with self._cond:
            return tuple(
                n for n, ended in zip(self._numbers, self._ended, strict=True) if not ended
            )

    def wait(self) -> None:
        """Until every request of the batch had its final response."""
        with self._cond:
            while self._open > 0:
                self._cond.wait()
