"""The Python backend: a user's model.py, each instance in its own worker process.

A crash, an exception or a hang in user code fails only the batch that instance was running,
with a ModelExecutionError that names the model and what happened; after a crash or a hang
the worker is replaced (the next batch waits for the new one to load). Tensors cross the
process boundary through the worker's shared-memory arena; calls the handler makes to other
served models (``inferplex.handler.infer``) come back over the worker's pipe and run through
``InstanceSpec.caller``, in-process. The worker machinery is ``backends/worker/process_backend.py``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from inferplex import logging_setup
from inferplex.backends.base import (
    STILL_SENDING,
    BatchOutcome,
    BatchRequest,
    Cancellation,
    InstanceSpec,
    RequestOutcome,
)
from inferplex.backends.python.completion import auto_complete
from inferplex.backends.worker.call_streams import LinkEnd
from inferplex.backends.worker.inbox import Inbox
from inferplex.backends.worker.messages import (
    BatchDone,
    Calls,
    RequestInfo,
    Response,
    StreamCancel,
    StreamNext,
    StreamOpen,
)
from inferplex.backends.worker.process_backend import ProcessBackend, sent_error
from inferplex.config.model_config import ModelConfig
from inferplex.errors import ConfigError, InferplexError, ModelExecutionError

#: model parameters of the python backend (process_backend.py has those of every backend
#: that runs in worker processes: timeouts, arena size)
CLASS_PARAMETER = "handler_class"
SLOT_PARAMETER = "compute_slot"
#: Triton's model parameter for a custom Python environment, which workers do not honour
ENV_PARAMETER = "EXECUTION_ENV_PATH"

_instance_numbers = itertools.count()


class PythonBackend(ProcessBackend):
    names = ("python",)
    default_model_filename = "model.py"
    role = "the handler"
    per_request = True
    cancellable = True
    decoupled = True

    def __init__(self, model_path: Path, config: ModelConfig, instance: InstanceSpec) -> None:
        # A handler that waits on the models it calls while holding one of the scheduler's
        # compute slots could starve them of slots (a deadlock with as many instances as
        # slots). So by default its batches take none, like a pipeline's; its own work runs
        # in its worker process, bounded by the instance count. A compute-heavy handler that
        # calls no models can ask for a slot.
        if ENV_PARAMETER in config.parameters:
            raise ConfigError(
                f"model '{config.name}': parameter {ENV_PARAMETER} (a custom execution "
                "environment) is not supported: the worker runs the server's Python; remove "
                "the parameter to run the model there (--worker-env passes variables)"
            )
        self.composite = not _flag(config, SLOT_PARAMETER)
        gpu = instance.kind == "KIND_GPU"
        init = {
            "model_file": str(model_path.resolve()),
            "model_name": config.name,
            "model_version": model_path.parent.name,
            "config": config.to_triton_dict(),
            "instance_name": f"{config.name}_{next(_instance_numbers)}",
            "instance_kind": "GPU" if gpu else "CPU",
            "device_id": instance.device_id,
            "handler_class": config.parameters.get(CLASS_PARAMETER, ""),
            "log": logging_setup.current,
        }
        # batches are numbered for the cancel board (backends/worker/cancel.py); a batch holds
        # at most max_batch_size requests (one row each at least), an unbatched model's one
        self._batch_numbers = itertools.count(1)
        #: the worker's numbers of requests, which their responses carry
        self._request_numbers = itertools.count()
        # A decoupled model's threads may send responses after its execute returned, while
        # the next batch runs (as in Triton): its worker's link has a pipe and an arena of
        # its own, and a thread (its Inbox) reads that pipe, batch or no batch.
        self._overlaps = config.model_transaction_policy.decoupled
        self._inbox: Inbox | None = None
        slots = max(1, config.max_batch_size)
        self._launch(config, init, instance, cancel_slots=slots, outbox=self._overlaps)

    def execute_requests(
        self,
        inputs: dict[str, np.ndarray],
        outputs: list[str],
        requests: list[BatchRequest],
        cancellation: Cancellation | None = None,
    ) -> list[BatchOutcome]:
        """The batch with who asked for its rows: a Triton-style model gets one request each
        (with its id and parameters) and may fail one alone. Requests whose callers go away
        while it runs are marked on the worker's cancel board, where the handler's
        ``is_cancelled()`` finds them. A decoupled model's request whose responses go on
        after the batch (threads the model started) is answered ``STILL_SENDING``."""
        infos = tuple(
            RequestInfo(next(self._request_numbers), r.id, r.parameters, r.rows) for r in requests
        )
        number = next(self._batch_numbers)
        board = self._worker.board
        if cancellation is not None and board is not None:
            batch = self._streams.batch

            def forward(indexes: Iterable[int]) -> None:
                board.cancel(number, indexes)
                if len(cancellation.indexes) == len(requests):  # nobody waits for the batch
                    self._streams.stop_all(batch)  # so the models it calls stop too

            cancellation.forward_to(forward)
        if not self._overlaps:
            return self._answers(self._exchange(inputs, outputs, infos, number), requests)
        sinks = {i.number: r.sink for i, r in zip(infos, requests, strict=True) if r.sink}
        self._start()
        inbox = self._current_inbox()
        inbox.expect(sinks)
        try:
            done = self._exchange(inputs, outputs, infos, number)
        except BaseException:
            inbox.forget(sinks)  # what its threads send now is dropped
            raise
        answers = self._answers(done, requests)
        still_open = set(done.open)
        for index, info in enumerate(infos):
            if info.number in still_open and not isinstance(answers[index], InferplexError):
                answers[index] = STILL_SENDING
        return answers

    def _answers(self, done: BatchDone, requests: list[BatchRequest]) -> list[BatchOutcome]:
        """Each request's outputs (its rows of the batch's) or the error it failed with."""
        results = self._worker.arena.read(done.outputs, copy=True)
        # errors the model put in its responses
        failed = {f.position: sent_error(f.failure) for f in done.failed}
        if len(requests) - len(failed) == 1:  # the one answered gets all (unbatched models too)
            return [failed.get(index, results) for index in range(len(requests))]
        answers: list[BatchOutcome] = []
        offset = 0  # the results hold the rows of the requests that did not fail, in order
        for index, request in enumerate(requests):
            if index in failed:
                answers.append(failed[index])
                continue
            end = offset + request.rows
            answers.append({name: array[offset:end] for name, array in results.items()})
            offset = end
        return answers

    def _current_inbox(self) -> Inbox:
        """The link reader of the worker running now (a new one after a restart)."""
        inbox = self._inbox
        if inbox is None or inbox.pid != self._worker.pid:
            inbox = Inbox(
                self._worker, self._outcome, self._answer, self._batch_deadline, self._ended
            )
            self._inbox = inbox
        return inbox

    def _answer(self, message: object, end: LinkEnd) -> None:
        """A call the handler makes while its batch runs (over the link's pipe)."""
        match message:
            case Calls(calls):
                self._answer_calls(calls, end)
            case StreamOpen() | StreamNext() | StreamCancel() as stream:
                self._streams.handle(stream, end)
            case other:
                raise RuntimeError(f"a worker's link sent an unknown {type(other).__name__}")

    def _outcome(self, response: Response) -> RequestOutcome | None:
        """A response's outputs (copied out of the link's arena) or its error."""
        if response.error is not None:
            return sent_error(response.error)
        if response.outputs:
            return self._worker.outbox.read(response.outputs, copy=True)
        return None

    def _ended(self, why: str) -> InferplexError:
        return ModelExecutionError(
            f"model '{self._name}': the handler's worker process ended ({why}) before the "
            "request's final response"
        )

    @classmethod
    def auto_complete(
        cls, config: ModelConfig | None, name: str, model_path: Path
    ) -> ModelConfig | None:
        """The model's own ``auto_complete_config`` completes its config (completion.py)."""
        handler_class = config.parameters.get(CLASS_PARAMETER, "") if config else ""
        return auto_complete(model_path.resolve(), config, name, handler_class)

    @classmethod
    def gpu_available(cls) -> bool:
        # The handler places its own work (context.device_id); the NVIDIA driver's device
        # node tells there is a GPU to place it on without loading CUDA in the server.
        return Path("/dev/nvidiactl").exists()


def _flag(config: ModelConfig, parameter: str) -> bool:
    value = config.parameters.get(parameter, "false").lower()
    if value not in ("true", "false"):
        raise ConfigError(
            f"model '{config.name}': parameter {parameter} must be true or false, got '{value}'"
        )
    return value == "true"
