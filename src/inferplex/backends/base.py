"""The backend interface: a backend loads one model version and runs batches of numpy arrays."""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from inferplex.config.model_config import ModelConfig, TensorConfig
from inferplex.errors import InferplexError

if TYPE_CHECKING:
    from inferplex.backends.engine_stats import EngineStats
    from inferplex.types import InferenceRequest, InferenceResponse


class ModelCaller(Protocol):
    """Runs a request on another served model, in-process (no network hop). Blocking: for
    backends, which run in worker threads, never on the event loop."""

    def infer(self, request: InferenceRequest, timeout: float | None = None) -> InferenceResponse:
        """The response, or the InferplexError the served model raised."""
        ...

    def submit(self, request: InferenceRequest, precedence: int = 0) -> Future[InferenceResponse]:
        """Start the request and return at once; the future holds what ``infer`` returns.
        ``precedence`` > 0 marks a pipeline step: among ready steps, a larger one starts first
        when compute slots are scarce (docs/pipelines.md)."""
        ...

    def stream(self, request: InferenceRequest) -> CallStream:
        """Start the request and read its responses as the model sends them (a decoupled
        model's 0..N and a final one; an ordinary model's one)."""
        ...


@dataclass(frozen=True, slots=True)
class CalledResponse:
    """One response of a streamed call: its outputs (None: a response without any, as a
    decoupled model's final flag alone), or the error it carries; ``final`` for the last."""

    outputs: dict[str, np.ndarray] | None
    error: InferplexError | None = None
    final: bool = True


class CallStopped(InferplexError):
    """What a streamed call stopped by its caller (``CallStream.close``) ends with."""


class CallStream(Protocol):
    """The responses of one call to a served model, read from a backend's thread."""

    def next(self, timeout: float | None) -> CalledResponse:
        """The next response, waiting at most ``timeout`` seconds (then the call is
        stopped and its final response is a deadline error). Call again only while the last
        was not final."""
        ...

    def close(self) -> None:
        """Stop the call (from any thread, without blocking): the model sees its request
        cancelled; a ``next`` waiting or to come gets the final response at once."""
        ...


#: what ``execute_requests`` answers for one request: its outputs, or why it failed
RequestOutcome = dict[str, np.ndarray] | InferplexError


class StillSending:
    """What ``execute_requests`` answers for a decoupled model's request whose responses go
    on after its batch ended (threads the model started still send them, as Triton's
    decoupled models may): the request ends with the final response its sink gets, which
    the backend sends whatever happens (an error if its worker dies)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "STILL_SENDING"


STILL_SENDING = StillSending()
#: what ``execute_requests`` answers for one request
BatchOutcome = RequestOutcome | StillSending


class ResponseSink(Protocol):
    """Where a decoupled model's backend sends one request's responses as they come, from
    the instance's thread (or a thread it waits for)."""

    def send(self, outcome: RequestOutcome | None, final: bool) -> bool:
        """One response (outputs, an error, or None: no outputs), ``final`` for the last.
        Waits while the reader is that many responses behind (``--stream-queue-responses``);
        False once the reader went away (the response is dropped, the model may stop)."""
        ...


@dataclass(frozen=True, slots=True)
class BatchRequest:
    """One client request of a batch, for backends that see requests (``per_request``)."""

    id: str
    parameters: dict[str, Any]
    rows: int  # its rows of the batch, in order
    #: a decoupled model's request: where its responses go (its ``execute_requests`` answer
    #: is then only whether it failed)
    sink: ResponseSink | None = None


class Cancellation:
    """Which requests of one running batch lost their callers (a closed connection, a reset
    stream, a deadline), for a ``cancellable`` backend.

    The server makes one per batch of such a backend when it launches it and calls ``cancel``
    on the event loop as callers go away; the backend, in the instance's thread, says how to
    pass the news on with ``forward_to`` before the batch starts running. Whichever comes
    first, every cancelled index reaches the forwarder (some may reach it twice: forwarding
    must be idempotent). The forwarder runs on the event loop (or, for the indexes known
    before, in the instance's thread) and must not block.
    """

    __slots__ = ("_forward", "_lock", "indexes")

    def __init__(self) -> None:
        #: the indexes (in the batch's request order) cancelled so far
        self.indexes: set[int] = set()
        self._forward: Callable[[Iterable[int]], None] | None = None
        # uncontended but once per batch (forward_to); it makes the hand-over race-free
        # without counting on the GIL
        self._lock = threading.Lock()

    def cancel(self, indexes: Iterable[int]) -> None:
        """Event loop: the callers of these requests went away."""
        with self._lock:
            new = [index for index in indexes if index not in self.indexes]
            self.indexes.update(new)
            forward = self._forward
        if new and forward is not None:
            forward(new)

    def forward_to(self, forward: Callable[[Iterable[int]], None]) -> None:
        """Instance thread: pass cancellations on with ``forward``, those already known now."""
        with self._lock:
            self._forward = forward
            known = list(self.indexes)
        if known:
            forward(known)


@dataclass(frozen=True)
class InstanceSpec:
    """Where and how one instance of a model runs."""

    kind: str = "KIND_CPU"
    device_id: int = 0
    intra_op_threads: int = 1
    #: how a backend reaches the other served models (pipelines, cascades, handlers' BLS)
    caller: ModelCaller | None = field(default=None, compare=False)


class Backend(abc.ABC):
    """One loaded instance of one model version.

    ``execute`` is called from the instance's dedicated worker thread, never concurrently on
    the same object; on the event loop only where ``runs_inline`` says it may be.
    """

    #: names accepted in config ``backend`` (first is canonical) and ``platform``
    names: tuple[str, ...] = ()
    platforms: tuple[str, ...] = ()
    #: file name looked for in a version folder when the config names none
    default_model_filename: str = ""
    #: a backend that only waits on other served models (through ``InstanceSpec.caller``)
    #: takes no compute slot of the scheduler: holding one while waiting could deadlock
    composite: bool = False
    #: ``execute`` may run on the event loop when its measured time is tiny (the server's
    #: ``inline_execution_us``), and on any thread: it computes in this process and never
    #: blocks on anything else, so its instances share the server's worker threads
    #: (``core.workers``) unless the model sets ``scheduling.nice``
    runs_inline: bool = False
    #: batches go to ``execute_requests`` with the requests they hold (ids, parameters, rows),
    #: and each request may fail on its own (Triton's python backend: one response each)
    per_request: bool = False
    #: a ``per_request`` backend that can tell a running batch which of its requests lost
    #: their callers: ``execute_requests`` gets the batch's ``Cancellation``
    cancellable: bool = False
    #: can serve a decoupled model (``model_transaction_policy { decoupled: true }``): a
    #: ``per_request`` backend that sends each request's 0..N responses to its
    #: ``BatchRequest.sink`` while ``execute_requests`` runs
    decoupled: bool = False

    @abc.abstractmethod
    def __init__(self, model_path: Path, config: ModelConfig, instance: InstanceSpec) -> None:
        """Load the model file; raise an exception with a clear reason if it cannot be loaded."""

    @abc.abstractmethod
    def execute(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        """Run one batch: input name -> array, returns the requested output name -> array."""

    def execute_requests(
        self,
        inputs: dict[str, np.ndarray],
        outputs: list[str],
        requests: list[BatchRequest],
        cancellation: Cancellation | None = None,
    ) -> list[BatchOutcome]:
        """For a ``per_request`` backend: run one batch (``inputs`` hold the requests' rows in
        order) and return each request's outputs, or the error that failed it alone, or (a
        decoupled model's) ``STILL_SENDING``. A ``cancellable`` backend gets the batch's
        ``cancellation`` (others are called without it)."""
        raise NotImplementedError(f"{type(self).__name__} does not take per-request batches")

    def close(self) -> None:  # noqa: B027 - optional hook, most backends free on collection
        """Release the model's resources."""

    def engine_stats(self) -> EngineStats | None:
        """A generative engine's state and totals (the LLM metrics, docs/llm.md); None for a
        backend without one. Read on the event loop at a scrape, never per request."""
        return None

    @classmethod
    def gpu_available(cls) -> bool:
        """Whether this backend can place instances on a GPU on this machine."""
        return False

    @classmethod
    def signature(cls, model_path: Path) -> tuple[list[TensorConfig], list[TensorConfig]] | None:
        """The inputs and outputs the model file itself declares, with the batch dimension
        included as the first dim; None if the format cannot tell."""
        return None

    @classmethod
    def auto_complete(
        cls, config: ModelConfig | None, name: str, model_path: Path
    ) -> ModelConfig | None:
        """For a backend without a ``signature``: the config (None: no config file) as the
        model completes it itself (a Python model's ``auto_complete_config``); by default
        unchanged. Blocking (may run the model's code in a process of its own)."""
        return config
