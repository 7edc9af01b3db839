"""Backends whose every instance runs in its own worker process (``backends/python/worker.py``):
Python models (``backends/python``) and models isolated with the parameter ``isolation``
(``backends/isolated.py``).

The base class starts the worker, sends it batches and reads their results through the
worker's shared-memory arena, and turns every way a worker can fail into an error of the
batch it was running: an exception (the worker goes on), a crash or a hang (the worker is
replaced; the next batch waits for the new one to load). Calls the worker makes to other
served models (``inferplex.handler.infer``) come back over its pipe and run through
``InstanceSpec.caller``, in-process; calls whose responses the handler reads as they come
(a decoupled model's, ``exec(decoupled=True)``) are ``call_streams.py``'s.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from typing import Any

import numpy as np

from inferplex.backends.base import Backend, InstanceSpec, ModelCaller
from inferplex.backends.worker.arena import DEFAULT_SIZE, Arena
from inferplex.backends.worker.call_streams import (
    LinkEnd,
    StreamedCalls,
    call_deadline,
    call_request,
)
from inferplex.backends.worker.messages import (
    BatchDone,
    BatchFailed,
    Call,
    CallAnswer,
    CallAnswers,
    Calls,
    Failure,
    RequestInfo,
    Response,
    RunBatch,
    Sent,
    StreamCancel,
    StreamNext,
    StreamOpen,
)
from inferplex.backends.worker.worker_process import (
    WorkerFailed,
    WorkerGone,
    WorkerProcess,
    WorkerSilent,
    worker_env,
)
from inferplex.config.model_config import ModelConfig
from inferplex.errors import (
    ConfigError,
    ErrorCode,
    InferplexError,
    ModelExecutionError,
    UnsupportedError,
)
from inferplex.types import InferenceResponse

#: model parameters of every backend that runs in worker processes
TIMEOUT_PARAMETER = "execute_timeout_seconds"
LOAD_TIMEOUT_PARAMETER = "initialize_timeout_seconds"
ARENA_PARAMETER = "shm_arena_bytes"

DEFAULT_LOAD_TIMEOUT = 120.0

logger = logging.getLogger(__name__)


class WorkerError(InferplexError):
    """An error the worker process reported with a code other than ``internal`` (a bad
    input found by the backend, for example): the client gets that code."""

    def __init__(self, message: str, code: ErrorCode) -> None:
        super().__init__(message)
        self.code = code


class ProcessBackend(Backend):
    """One instance in one worker process. Subclasses call ``_launch`` from ``__init__``."""

    #: who runs in the worker, as error messages name it
    role = "the worker"

    def _launch(
        self,
        config: ModelConfig,
        init: dict[str, Any],
        instance: InstanceSpec,
        cancel_slots: int = 0,
        outbox: bool = False,
    ) -> None:
        """Start the worker with ``init`` (what ``backends/python/worker.py`` loads) and wait
        until it has loaded; ModelExecutionError with the reason if it cannot. With
        ``cancel_slots`` the worker gets a cancel board for batches of that many requests; with
        ``outbox`` an arena of its own to write into (``WorkerProcess``)."""
        self._name = config.name
        self._caller: ModelCaller | None = instance.caller
        self._timeout = number_parameter(config, TIMEOUT_PARAMETER, 0.0)
        self._load_timeout = number_parameter(config, LOAD_TIMEOUT_PARAMETER, DEFAULT_LOAD_TIMEOUT)
        arena_size = int(number_parameter(config, ARENA_PARAMETER, DEFAULT_SIZE))
        env = worker_env(instance.intra_op_threads)
        self._worker = WorkerProcess(init, env, arena_size, cancel_slots, outbox)
        #: the running batch's calls whose responses the handler reads as they come
        self._streams = StreamedCalls(instance.caller)
        self._deadline: float | None = None
        try:
            self._start()
        except BaseException:
            self._worker.stop()
            raise

    def _batch_deadline(self) -> float | None:
        """The running (or last) batch's deadline."""
        return self._deadline

    @property
    def pid(self) -> int | None:
        """The worker's process id (None between a crash and its replacement's start)."""
        return self._worker.pid

    def _start(self) -> None:
        try:
            self._worker.wait_ready(self._load_timeout)
        except WorkerFailed as exc:
            raise ModelExecutionError(f"model '{self._name}': initialize failed: {exc}") from None
        except WorkerGone as exc:
            raise ModelExecutionError(
                f"model '{self._name}': the worker process died while loading ({exc})"
            ) from None
        except WorkerSilent:
            self._worker.kill()
            raise ModelExecutionError(
                f"model '{self._name}': initialize did not finish within "
                f"{self._load_timeout:g} s (parameter {LOAD_TIMEOUT_PARAMETER})"
            ) from None

    def execute(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        done = self._exchange(inputs, outputs)
        return self._worker.arena.read(done.outputs, copy=True)

    def _exchange(
        self,
        inputs: dict[str, np.ndarray],
        outputs: list[str],
        requests: tuple[RequestInfo, ...] = (),
        number: int = 0,
    ) -> BatchDone:
        """Send a batch (``inputs`` into the arena, then a ``RunBatch``), answer the worker's
        requests until it is done, and return its ``BatchDone``; the error of the batch for
        every way the worker can fail."""
        worker = self._worker
        self._start()
        deadline = time.monotonic() + self._timeout if self._timeout else None
        self._deadline = deadline
        headers, base = worker.arena.write(inputs)
        try:
            worker.send(RunBatch(headers, outputs, requests, number))
            while True:
                match worker.receive(deadline):
                    case BatchDone() as done:
                        return done
                    case BatchFailed(failure):
                        raise self._failure(failure)
                    case Response() as response:
                        worker.send(Sent(self._deliver(response)))
                    case Calls(calls):  # the link shares the worker's pipe and arena
                        end = LinkEnd(worker.wire, worker.arena, base, deadline)
                        self._answer_calls(calls, end)
                    case StreamOpen() | StreamNext() | StreamCancel() as stream:
                        end = LinkEnd(worker.wire, worker.arena, base, deadline)
                        self._streams.handle(stream, end)
                    case other:
                        raise ModelExecutionError(
                            f"model '{self._name}': {self.role} sent an unknown message "
                            f"{type(other).__name__}"
                        )
        except WorkerSilent:
            reason = (
                f"{self.role} did not answer within {self._timeout:g} s "
                f"(parameter {TIMEOUT_PARAMETER})"
            )
            worker.restart()
            logger.warning("model '%s': %s; worker process restarted", self._name, reason)
            raise ModelExecutionError(
                f"model '{self._name}': {reason}; its worker process was restarted"
            ) from None
        except WorkerGone as exc:
            worker.restart()
            logger.warning("model '%s': worker process died (%s); restarted", self._name, exc)
            raise ModelExecutionError(
                f"model '{self._name}': {self.role}'s worker process died while running the "
                f"request ({exc}); it was restarted"
            ) from None
        finally:
            self._streams.end_batch()

    def _deliver(self, response: Response) -> bool:
        """A response a decoupled model sent while its batch runs (only a backend serving
        decoupled models takes them): whether its client is still there."""
        raise ModelExecutionError(f"model '{self._name}': {self.role} sent a response of its own")

    def _failure(self, failure: Failure) -> InferplexError:
        """The error of a batch the worker failed."""
        text = f"model '{self._name}': {self.role} failed: {failure.message}"
        return sent_error(Failure(failure.code, text))

    def _answer_calls(self, calls: tuple[Call, ...], end: LinkEnd) -> None:
        """Run the calls the worker makes to other served models and send back one answer
        each: the calls of one message run at once (an async handler's gathered
        ``async_exec``), their outputs written after all inputs."""
        started = [self._start_call(call, end) for call in calls]
        offset = max(Arena.end(call.inputs, end.base) for call in calls)
        answers: list[CallAnswer] = []
        for call, (future, until) in zip(calls, started, strict=True):
            answer, offset = self._finish_call(call.model, future, until, end.arena, offset)
            answers.append(answer)
        end.wire.send(CallAnswers(tuple(answers)))

    def _start_call(
        self, call: Call, end: LinkEnd
    ) -> tuple[Future[InferenceResponse] | InferplexError, float | None]:
        """Submit one call; its future (or why it could not start) and when it times out."""
        until = call_deadline(call.timeout, end.deadline)
        if self._caller is None:
            return UnsupportedError("this server gives handlers no access to other models"), until
        return self._caller.submit(call_request(end.arena, call)), until

    def _finish_call(
        self,
        model: str,
        future: Future[InferenceResponse] | InferplexError,
        until: float | None,
        arena: Arena,
        offset: int,
    ) -> tuple[CallAnswer, int]:
        """Wait for one call; its answer for the worker (outputs written into the arena from
        ``offset``) and the next free offset."""
        try:
            if isinstance(future, InferplexError):
                raise future
            timeout = None if until is None else max(0.0, until - time.monotonic())
            try:
                response = future.result(timeout)
            except TimeoutError:
                future.cancel()
                raise
            results = {t.name: t.data for t in response.outputs}
            headers, offset = arena.write(results, offset)
            return CallAnswer(headers), offset
        except InferplexError as exc:
            return CallAnswer(None, Failure.of(exc)), offset
        except TimeoutError:
            why = f"model '{model}' did not answer in time"
            return CallAnswer(None, Failure(ErrorCode.DEADLINE_EXCEEDED, why)), offset
        except Exception as exc:
            why = f"calling model '{model}' failed: {exc}"
            return CallAnswer(None, Failure(ErrorCode.INTERNAL, why)), offset

    def close(self) -> None:
        """Stop the worker process (it finalizes, then exits): its memory goes back to the
        system."""
        self._worker.stop()


def sent_error(failure: Failure) -> InferplexError:
    """The error of a failure the worker reported, with its code; its message as it stands
    (a model's own words for an error it put in a response, as Triton passes them on)."""
    if failure.code is ErrorCode.INTERNAL:
        return ModelExecutionError(failure.message)
    return WorkerError(failure.message, failure.code)


def number_parameter(config: ModelConfig, parameter: str, default: float) -> float:
    """A non-negative number from the model's parameters; ConfigError naming it if not."""
    value = config.parameters.get(parameter)
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if number < 0:
        raise ConfigError(
            f"model '{config.name}': parameter {parameter} must be a non-negative number, "
            f"got '{value}'"
        )
    return number
