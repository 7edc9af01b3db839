"""The data plane: the one door between the V2 codecs and the engine (MLServer's
``DataPlane``), for REST, gRPC and the in-process API.

A codec only translates: wire bytes to an :class:`InferenceRequest`, an
:class:`InferenceResponse` to wire bytes. What a request goes through on its way to the
engine is decided here, once, so the protocols cannot disagree:

- the checks of a decoded tensor: a known datatype, no negative dimension, raw data of the
  size its shape needs (:func:`input_dtype`, :func:`check_dims`, :func:`raw_size_error`);
- shared memory: an input read from the region it names, an output checked against and
  written to its region (:func:`shared_input`, :func:`requested_output`, :func:`shared_output`);
- the output parameters the server acts on (:func:`requested_output`), the classification
  extension among them: an output asked for as its top N classes is answered so, as Triton
  does (:meth:`DataPlane.classify`, ``protocol/classification.py``);
- the request limits (:class:`RequestLimits`) and the model's checks of what each input
  declares, before a large tensor is decoded (:attr:`DataPlane.checks`);
- the routing key: the configured HTTP header, or the gRPC metadata key of the same name,
  becomes the request parameter ``routing_key`` (:meth:`DataPlane.route`);
- the memory a large request's decoding allocates, charged to the server-wide byte budget
  before it is allocated and held until the request ends (:meth:`DataPlane.charge`,
  ``security/charges.py``).

The per-tensor checks are functions a codec calls in its one loop over the tensors, where it
meets each tensor's name, datatype and shape before decoding its data: the hot path makes no
second pass and builds nothing more. What concerns the decoded request as a whole runs in
:meth:`DataPlane.admit`, on the thread that decoded it (a large body's: a worker thread).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from math import prod
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from inferplex.core.streaming import Responses
from inferplex.datatypes import V2_TO_NUMPY
from inferplex.errors import ConfigError, InvalidInputError, UnsupportedError
from inferplex.protocol.checks import CheckFactory, declared_checks
from inferplex.protocol.classification import (
    CLASSIFICATION,
    ClassifiedOutputs,
    class_count,
    classify,
    read_labels,
)
from inferplex.routing.config import DEFAULT_STICKY_PARAMETER as ROUTING_KEY
from inferplex.security.charges import Budget, Charge
from inferplex.security.limits import RequestLimits
from inferplex.shm.registry import REGION, Regions, SharedMemoryRegistry, require
from inferplex.types import InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from inferplex.config.model_config import ModelConfig
    from inferplex.config.server_config import ServerConfig
    from inferplex.core.validation import RequestValidator

__all__ = [
    "CLASSIFICATION",
    "ROUTING_KEY",
    "ClassifiedOutputs",
    "DataPlane",
    "Engine",
    "check_dims",
    "element_count_error",
    "input_dtype",
    "negative_dims",
    "out_of_range_error",
    "raw_size_error",
    "requested_output",
    "shared_input",
    "shared_output",
    "unknown_datatype",
]

logger = logging.getLogger(__name__)

#: model name -> the folder its configuration's files are in (label_filename), if known
Folders = Callable[[str], Path | None]
#: label files kept read, by configuration; the oldest goes first
_LABELS_KEPT = 64
#: outputs of up to this many elements are classified on the event loop; larger ones (the
#: sort and one string per class taken) in a worker thread, so one client's request for all
#: the classes of a large output never stalls the others
INLINE_CLASSIFY_ELEMENTS = 4096


class Engine(Protocol):
    """What the data plane needs of the engine."""

    @property
    def shared_memory(self) -> SharedMemoryRegistry | None: ...

    def input_checks(self, name: str, version: str = "") -> RequestValidator | None: ...

    def infer(self, request: InferenceRequest) -> Awaitable[InferenceResponse]: ...

    def stream(self, request: InferenceRequest) -> Awaitable[Responses]: ...

    def model_config(self, name: str, version: str = "") -> ModelConfig: ...


class DataPlane:
    """The requests of every protocol on their way to the engine: ``admit`` a decoded
    request, ``route`` it by the routing header's value if it came with one, then ``infer``
    it. Built once by the composition root and shared by the frontends (a frontend built
    alone makes its own)."""

    __slots__ = (
        "_folders",
        "_labels",
        "admit",
        "budget",
        "checks",
        "engine",
        "infer",
        "limits",
        "routing_header",
        "routing_metadata",
        "stream",
    )

    def __init__(
        self,
        engine: Engine,
        limits: RequestLimits,
        routing_header: str = "",
        folders: Folders | None = None,
        budget: Budget | None = None,
    ) -> None:
        """``routing_header``: the HTTP header (and gRPC metadata key) whose value becomes
        the request parameter ``routing_key``; empty for none. ``folders``: where a model's
        label files are (without it, classes come without labels). ``budget``: the
        server-wide byte budget large requests' decoding is charged to (None: not charged)."""
        self.engine = engine
        self.budget = budget
        self._folders = folders
        self._labels: dict[tuple[int, str], tuple[ModelConfig, Sequence[str] | None]] = {}
        self.limits = limits
        #: the checks of a decoded request as a whole, run where it was decoded; raise an
        #: InferplexError to refuse it. Today the limits alone: bound, no call of its own
        self.admit = limits.check
        #: the engine's answer to an admitted request: the engine's own method, bound here
        #: (no call or coroutine of the plane's on the hot path)
        self.infer = engine.infer
        #: the responses to an admitted request as its model sends them (docs/streaming.md)
        self.stream = engine.stream
        #: per input, what runs on its declared name, datatype and shape before a large
        #: tensor is decoded: the limits, then the model's checks
        self.checks: CheckFactory = declared_checks(limits, engine)
        key = routing_header.strip().lower()
        self.routing_header = key.encode("latin-1")  # HTTP header names arrive lower-case
        self.routing_metadata = key  # so do gRPC metadata keys

    @classmethod
    def from_config(
        cls,
        engine: Engine,
        config: ServerConfig,
        folders: Folders | None = None,
        budget: Budget | None = None,
    ) -> DataPlane:
        limits = RequestLimits(config.max_tensor_elements, config.max_string_bytes)
        return cls(engine, limits, config.routing_header, folders, budget)

    def charge(self) -> Charge | None:
        """A new charge for a large request's decoding (None when nothing is charged);
        its owner releases it when the request ends."""
        return None if self.budget is None else Charge(self.budget)

    def folder(self, model: str) -> Path | None:
        """The folder of a model's files (its tokenizer and chat template, for the OpenAI
        API), if known."""
        return self._folders(model) if self._folders is not None else None

    def route(self, request: InferenceRequest, routing_key: str) -> None:
        """``routing_key``, the value of the routing header (or gRPC metadata key), becomes
        the request parameter ``routing_key`` unless the request has one: a parameter the
        client wrote in the body wins. A new parameter dict: the decoded one may be shared
        with a codec's layout cache."""
        if ROUTING_KEY not in request.parameters:
            request.parameters = {**request.parameters, ROUTING_KEY: routing_key}

    async def infer_local(self, request: InferenceRequest) -> InferenceResponse:
        """The in-process API's way in (``Server.infer``): the request was built in Python,
        not decoded, so each tensor gets the checks a codec runs on a decoded one, then
        the request those of a decoded request."""
        classified = self._check_local(request)
        response = await self.engine.infer(request)
        return await self.classify(request, response) if classified else response

    async def stream_local(self, request: InferenceRequest) -> Responses:
        """``infer_local`` for the responses as the model sends them (``Server.stream``)."""
        if self._check_local(request):
            raise UnsupportedError("classification is not available on streamed requests")
        return await self.engine.stream(request)

    def _check_local(self, request: InferenceRequest) -> bool:
        """The checks of a request built in Python; whether it asks for classes."""
        # a request built in Python comes with no token: the anonymous principal's regions
        registry = self.engine.shared_memory
        shm = None if registry is None else registry.owned_by(None)
        for tensor in request.inputs:
            input_dtype(tensor.name, tensor.datatype)
            check_dims(tensor.name, tuple(tensor.shape))
        classified = False
        for output in request.outputs:
            if output.parameters and requested_output(output.name, output.parameters, shm):
                classified = True
        self.admit(request)
        return classified

    async def classify(
        self, request: InferenceRequest, response: InferenceResponse
    ) -> InferenceResponse:
        """The answer to a request that asked for the top classes of some of its outputs
        (its outputs are ClassifiedOutputs when it came through a codec): those outputs
        as their classes, the others as they are."""
        counts = {out.name: class_count(out.name, out.parameters) for out in request.outputs}
        config = self.engine.model_config(response.model_name, response.model_version)
        outputs = []
        for tensor in response.outputs:
            count = counts.get(tensor.name, 0)
            if count:
                labels = await self._labels_of(config, tensor.name)
                batched = config.max_batch_size > 0
                if np.size(tensor.data) <= INLINE_CLASSIFY_ELEMENTS:
                    tensor = classify(tensor, count, batched, labels)
                else:
                    tensor = await asyncio.to_thread(classify, tensor, count, batched, labels)
            outputs.append(tensor)
        return InferenceResponse(
            response.model_name, response.model_version, outputs, response.id, response.parameters
        )

    async def _labels_of(self, config: ModelConfig, output: str) -> Sequence[str] | None:
        """The labels of an output of a model with ``config``: its label file, read once
        per configuration (a reload brings a new one), in a worker thread."""
        key = (id(config), output)
        known = self._labels.get(key)
        if known is not None and known[0] is config:
            return known[1]
        labels = None
        spec = next((t for t in config.output if t.name == output), None)
        folder = self._folders(config.name) if self._folders is not None else None
        if spec is not None and spec.label_filename and folder is not None:
            try:
                labels = await asyncio.to_thread(read_labels, folder, spec.label_filename)
            except (OSError, UnicodeDecodeError, ConfigError) as exc:
                logger.warning("model '%s': labels of '%s' not read: %s", config.name, output, exc)
        if len(self._labels) >= _LABELS_KEPT:
            del self._labels[next(iter(self._labels))]
        self._labels[key] = (config, labels)
        return labels

    def routing_value(self, metadata: list[tuple[str, str | bytes]]) -> str | None:
        """The routing key in a gRPC call's metadata, if the call has one."""
        key = self.routing_metadata
        for name, value in metadata:
            if name == key:
                return value if isinstance(value, str) else value.decode("utf-8", "replace")
        return None


# ---- the checks of a decoded tensor ---------------------------------------------------------


def unknown_datatype(name: str, datatype: Any) -> InvalidInputError:
    return InvalidInputError(
        f"input '{name}': unknown datatype {datatype!r}, expected one of {', '.join(V2_TO_NUMPY)}"
    )


def input_dtype(name: str, datatype: Any) -> np.dtype:
    """The numpy dtype of an input's datatype; InvalidInputError for one that is unknown."""
    try:
        return V2_TO_NUMPY[datatype]
    except (KeyError, TypeError):  # TypeError: a JSON list or object is not a datatype name
        raise unknown_datatype(name, datatype) from None


def negative_dims(name: str, shape: Any) -> InvalidInputError:
    return InvalidInputError(
        f"input '{name}': 'shape' {list(shape)} has a negative dimension; dimensions are "
        "non-negative integers"
    )


def check_dims(name: str, shape: tuple[int, ...]) -> None:
    """InvalidInputError when a dimension of ``shape`` is negative."""
    if shape and min(shape) < 0:
        raise negative_dims(name, shape)


def raw_size_error(
    name: str, where: str, nbytes: int, datatype: str, shape: tuple[int, ...]
) -> InvalidInputError:
    """The error for raw data of a fixed-size datatype whose ``nbytes`` are not what its
    shape needs; ``where`` names the data in the protocol's terms."""
    itemsize = V2_TO_NUMPY[datatype].itemsize
    count = prod(shape)
    expected = count * itemsize
    return InvalidInputError(
        f"input '{name}': {where} holds {nbytes} bytes, expected {expected}: shape "
        f"{list(shape)} of {datatype} needs {expected} bytes ({count} elements of {itemsize})"
    )


def element_count_error(
    name: str, where: str, got: int, shape: tuple[int, ...]
) -> InvalidInputError:
    """The error for an input whose data (``where``, in the protocol's terms) holds ``got``
    elements where its shape needs another number."""
    return InvalidInputError(
        f"input '{name}': shape {list(shape)} needs {prod(shape)} elements but {where} has {got}"
    )


def out_of_range_error(
    name: str, where: str, datatype: str, low: float, high: float
) -> InvalidInputError:
    """The error for an input whose data has values its datatype cannot hold."""
    return InvalidInputError(
        f"input '{name}': {where} has values outside the range of {datatype} [{low}, {high}]"
    )


# ---- shared memory and output parameters -----------------------------------------------------


def shared_input(
    shm: Regions | None,
    name: str,
    parameters: Mapping[str, Any],
    datatype: str,
    shape: tuple[int, ...],
) -> np.ndarray:
    """The data of an input whose parameters name a shared-memory region."""
    return require(shm).read_input(name, parameters, datatype, shape)


def requested_output(name: str, parameters: Mapping[str, Any], shm: Regions | None) -> int:
    """The checks of a requested output's parameters the server acts on, as the request
    arrives; returns how many classes the output is asked for (0: its tensor). A codec
    that meets one above 0 makes the request's outputs ClassifiedOutputs. A shared-memory
    region must be registered and large enough, and takes a tensor, not classes."""
    count = class_count(name, parameters) if CLASSIFICATION in parameters else 0
    if REGION in parameters:
        if count:
            raise InvalidInputError(
                f"output '{name}': parameters '{CLASSIFICATION}' and '{REGION}' together: "
                "classes are answered in the response, not in shared memory; give one"
            )
        require(shm).check_output(name, parameters)
    return count


def shared_output(
    shm: Regions | None,
    name: str,
    parameters: Mapping[str, Any],
    datatype: str,
    data: np.ndarray,
) -> dict[str, Any]:
    """Write an output to the region its request named; returns the parameters that tell
    the client where it is."""
    return require(shm).write_output(name, parameters, datatype, data)
