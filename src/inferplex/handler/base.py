"""TorchServe-style handlers: ``BaseHandler`` and the ``Context`` it is initialised with.

A handler's ``handle(data, context)`` gets ``data``, a list with one dict per batch row (one
dict for the whole request when the model's ``max_batch_size`` is 0), each mapping input name
-> numpy array of that row. ``BaseHandler.handle`` runs ``postprocess(inference(
preprocess(data)))``. The defaults make a vectorised numpy handler short: ``preprocess``
stacks the rows into one array per input, ``postprocess`` passes the result through, so
``inference`` gets ``{input name: batch array}`` and may return ``{output name: batch
array}``. (When a handler keeps BaseHandler's ``handle`` and ``preprocess``, the worker skips
the split into rows and hands ``inference`` the batch arrays as they arrived.) A TorchServe
handler that overrides these methods runs as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


def never(index: int) -> bool:
    """The check of a batch nobody can cancel (no cancel board, or a request built by the
    model): request index -> False."""
    return False


@dataclass
class Context:
    """What a handler learns about its model at ``initialize`` (TorchServe's ``context``)."""

    model_name: str
    model_version: str
    #: the version folder that holds model.py (TorchServe's ``model_dir``)
    model_dir: str
    #: the model's configuration as Triton renders it in JSON (``max_batch_size``, ``input``,
    #: ``output``, ``parameters``, ...)
    config: dict[str, Any]
    instance_name: str
    #: "CPU" or "GPU"; with "GPU" the handler places its work on ``device_id``
    instance_kind: str = "CPU"
    device_id: int = 0
    manifest: dict[str, Any] = field(default_factory=dict)
    system_properties: dict[str, Any] = field(default_factory=dict)
    model_yaml_config: dict[str, Any] = field(default_factory=dict)
    #: the current batch's rows -> the id of the client request each belongs to (TorchServe's)
    request_ids: dict[int, str] = field(default_factory=dict)
    # the current batch, for is_cancelled: rows of each request in order, the check of a
    # request (by its index) and, worked out on first use, the request of each row
    _request_rows: Sequence[int] = field(default=(), init=False, repr=False)
    _cancelled: Callable[[int], bool] = field(default_factory=lambda: never, init=False, repr=False)
    _row_requests: list[int] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        # the names TorchServe handlers read
        self.manifest = self.manifest or {"model": {"modelName": self.model_name}}
        self.system_properties = self.system_properties or {
            "model_dir": self.model_dir,
            "gpu_id": self.device_id if self.instance_kind == "GPU" else None,
            "batch_size": max(1, self.max_batch_size),
        }

    @property
    def max_batch_size(self) -> int:
        return int(self.config.get("max_batch_size", 0))

    @property
    def input_names(self) -> list[str]:
        return [t["name"] for t in self.config.get("input", [])]

    @property
    def output_names(self) -> list[str]:
        return [t["name"] for t in self.config.get("output", [])]

    def get_request_id(self, index: int = 0) -> str | None:
        """The id of the client request that row ``index`` of the current batch came in."""
        return self.request_ids.get(index)

    def is_cancelled(self, index: int | None = None) -> bool:
        """Whether the client of the request that row ``index`` of the current batch came in
        went away (a closed connection, a reset stream, its timeout): that row's result will
        be dropped. Without ``index``: whether every request of the batch went away, so
        nothing the handler still computes will be used; a long handler may check now and
        then and stop (return anything, or raise: no error is logged for such a batch). Once
        true it stays true for the batch. Reads flags in shared memory: cheap in a loop."""
        if index is None:
            count = len(self._request_rows)
            return count > 0 and all(self._cancelled(i) for i in range(count))
        rows = self._row_requests
        if rows is None:
            rows = self._row_requests = [
                request for request, n in enumerate(self._request_rows) for _ in range(n)
            ]
        return 0 <= index < len(rows) and self._cancelled(rows[index])

    def begin_batch(
        self, requests: Sequence[tuple[str, int]], cancelled: Callable[[int], bool] = never
    ) -> None:
        """The worker starts a batch: the (id, rows) of each of its requests in order, and
        the check of whether a request (by its index) was cancelled."""
        self.request_ids = dict(enumerate(i for i, rows in requests for _ in range(rows)))
        self._request_rows = [rows for _, rows in requests]
        self._cancelled = cancelled
        self._row_requests = None

    def get_request_header(self, index: int, key: str) -> str | None:
        """TorchServe's per-request HTTP headers; the V2 protocol carries none to models."""
        return None


class BaseHandler:
    """A TorchServe-compatible handler base class (``initialize``, ``preprocess``,
    ``inference``, ``postprocess``, ``handle``)."""

    def __init__(self) -> None:
        self.initialized = False
        self.context: Context | None = None
        self.manifest: dict[str, Any] = {}
        self.model_dir = ""
        #: a callable the default ``inference`` applies to the preprocessed batch
        self.model: Any = None

    def initialize(self, context: Context) -> None:
        """Load what the handler needs; called once per worker process."""
        self.context = context
        self.manifest = context.manifest
        self.model_dir = context.model_dir
        self.initialized = True

    def preprocess(self, data: list[dict[str, Any]]) -> Any:
        """Default: one array per input, the rows stacked on a new first axis (the whole
        request's arrays for a model without batching)."""
        names = self._context().input_names
        if self._context().max_batch_size == 0:
            return {name: data[0][name] for name in names}
        return {name: np.stack([row[name] for row in data]) for name in names}

    def inference(self, data: Any) -> Any:
        """Default: ``self.model(data)``; override it (or set ``self.model``)."""
        if self.model is None:
            raise NotImplementedError(
                f"{type(self).__name__} must override inference(data) or set self.model"
            )
        return self.model(data)

    def postprocess(self, data: Any) -> Any:
        """Default: the inference result as it is (see the module docstring for what a
        handler may return)."""
        return data

    def handle(self, data: list[dict[str, Any]], context: Context) -> Any:
        """One batch: ``postprocess(inference(preprocess(data)))``."""
        self.context = context
        return self.postprocess(self.inference(self.preprocess(data)))

    def _context(self) -> Context:
        if self.context is None:
            raise RuntimeError(
                f"{type(self).__name__}.initialize(context) was overridden without calling "
                "super().initialize(context)"
            )
        return self.context
