"""The backend interface: a backend loads one model version and runs batches of numpy arrays."""

from __future__ import annotations

import abc
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from inferplex.config.model_config import ModelConfig, TensorConfig
from inferplex.errors import InferplexError

if TYPE_CHECKING:
    from inferplex.core.types import InferenceRequest, InferenceResponse


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


@dataclass(frozen=True, slots=True)
class BatchRequest:
    """One client request of a batch, for backends that see requests (``per_request``)."""

    id: str
    parameters: dict[str, Any]
    rows: int  # its rows of the batch, in order


#: what ``execute_requests`` answers for one request: its outputs, or why it failed
RequestOutcome = dict[str, np.ndarray] | InferplexError


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
    #: ``inline_execution_us``): it computes in this process and never blocks on anything else
    runs_inline: bool = False
    #: batches go to ``execute_requests`` with the requests they hold (ids, parameters, rows),
    #: and each request may fail on its own (Triton's python backend: one response each)
    per_request: bool = False

    @abc.abstractmethod
    def __init__(self, model_path: Path, config: ModelConfig, instance: InstanceSpec) -> None:
        """Load the model file; raise an exception with a clear reason if it cannot be loaded."""

    @abc.abstractmethod
    def execute(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        """Run one batch: input name -> array, returns the requested output name -> array."""

    def execute_requests(
        self, inputs: dict[str, np.ndarray], outputs: list[str], requests: list[BatchRequest]
    ) -> list[RequestOutcome]:
        """For a ``per_request`` backend: run one batch (``inputs`` hold the requests' rows in
        order) and return each request's outputs, or the error that failed it alone."""
        raise NotImplementedError(f"{type(self).__name__} does not take per-request batches")

    def close(self) -> None:  # noqa: B027 - optional hook, most backends free on collection
        """Release the model's resources."""

    @classmethod
    def gpu_available(cls) -> bool:
        """Whether this backend can place instances on a GPU on this machine."""
        return False

    @classmethod
    def signature(cls, model_path: Path) -> tuple[list[TensorConfig], list[TensorConfig]] | None:
        """The inputs and outputs the model file itself declares, with the batch dimension
        included as the first dim; None if the format cannot tell."""
        return None
