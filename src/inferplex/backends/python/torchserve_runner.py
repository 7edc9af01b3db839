"""Running a TorchServe-style handler: ``initialize(context)``, then per batch
``handle(data, context)`` (``BaseHandler``'s runs preprocess, inference, postprocess), or the
steps the handler has; see ``inferplex.handler.base`` for ``data`` and what it may return.
A decoupled model's handler may yield: each result is one response to each request."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from inferplex.backends.python.outputs import HandlerError, stack
from inferplex.backends.python.runner import BatchResult, HandlerRunner
from inferplex.backends.python.senders import Respond
from inferplex.backends.worker.messages import RequestInfo
from inferplex.handler.base import BaseHandler, Context, never


class TorchServeRunner(HandlerRunner):
    """A TorchServe-style handler: it sees the batch's rows, not its requests."""

    def __init__(self, handler: Any, context: Context) -> None:
        super().__init__(handler, context)
        if not callable(getattr(handler, "handle", None)) and not callable(
            getattr(handler, "inference", None)
        ):
            raise HandlerError(
                f"class {type(handler).__name__} has neither execute(requests) (Triton "
                "style) nor handle(data, context) / inference(data) (TorchServe style)"
            )
        cls = type(handler)
        #: BaseHandler's own handle and preprocess would split the batch into rows and stack
        #: them again: such a handler's inference gets the batch arrays as they came
        self._vectorised = (
            isinstance(handler, BaseHandler)
            and cls.handle is BaseHandler.handle
            and cls.preprocess is BaseHandler.preprocess
        )
        if hasattr(handler, "initialize"):
            handler.initialize(context)
        if not self.decoupled and any(
            inspect.isgeneratorfunction(getattr(handler, m, None)) for m in ("handle", "inference")
        ):
            raise HandlerError(
                f"{type(handler).__name__} yields its results (a generator): each is a "
                "response, so the model needs model_transaction_policy { decoupled: true }"
            )

    def run(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        return self.outputs.all(outputs, self._collect(*self._call(inputs)))

    def run_requests(
        self,
        inputs: dict[str, np.ndarray],
        outputs: list[str],
        requests: Sequence[RequestInfo],
        cancelled: Callable[[int], bool] = never,
        respond: Respond | None = None,
    ) -> BatchResult:
        self.context.begin_batch([(request.id, request.rows) for request in requests], cancelled)
        if self.decoupled and respond is not None:
            self._stream(inputs, outputs, requests, respond)
            return BatchResult()
        return BatchResult(self.run(inputs, outputs))

    def _stream(
        self,
        inputs: dict[str, np.ndarray],
        outputs: list[str],
        requests: Sequence[RequestInfo],
        respond: Respond,
    ) -> None:
        """Each result the handler yields (or the one it returns) is a response to each
        request of the batch (its rows), then a final flag. It stops early when every
        request's client went away."""
        result, count = self._call(inputs)
        items: Iterator[Any] = result if inspect.isgenerator(result) else iter([result])
        try:
            for item in items:
                batch = self.outputs.present(outputs, self._collect(item, count))
                alive, offset = False, 0
                for request in requests:
                    part = batch
                    if self.batched:
                        part = {k: v[offset : offset + request.rows] for k, v in batch.items()}
                    alive = respond(request.number, part, False, None) or alive
                    offset += request.rows
                if not alive:
                    break
        finally:
            if inspect.isgenerator(items):
                items.close()
        for request in requests:
            respond(request.number, None, True, None)

    def _call(self, inputs: dict[str, np.ndarray]) -> tuple[Any, int]:
        """The handler's result for a batch, and the batch's rows."""
        handler = self.handler
        if self._vectorised:
            return handler.postprocess(handler.inference(dict(inputs))), self.rows(inputs)
        data = _rows(inputs) if self.batched else [_with_aliases(dict(inputs))]
        if callable(getattr(handler, "handle", None)):
            return handler.handle(data, self.context), len(data)
        result: Any = data
        for step in ("preprocess", "inference", "postprocess"):
            if callable(getattr(handler, step, None)):
                result = getattr(handler, step)(result)
        return result, len(data)

    def _collect(self, result: Any, rows: int) -> dict[str, Any]:
        """A handler's result for a batch of ``rows`` as output name -> batch value."""
        if not isinstance(result, list | tuple):
            return self._item(result)
        if len(result) != rows:
            raise HandlerError(
                f"the handler returned a list of {len(result)} items for {rows} "
                "requests/rows; return one item per row (or a dict of batch arrays)"
            )
        items = [self._item(value) for value in result]
        if not self.batched:
            return items[0]
        names = items[0].keys() if items else self.outputs.specs.keys()
        numeric = self.outputs.numeric
        return {
            name: stack(name, [item.get(name) for item in items], numeric(name)) for name in names
        }

    def _item(self, value: Any) -> dict[str, Any]:
        """A handler result as output name -> value: a dict keyed by output names, or the
        value of the model's only output."""
        specs = self.outputs.specs
        if isinstance(value, Mapping) and value and all(k in specs for k in value):
            return dict(value)
        if len(specs) != 1:
            raise HandlerError(
                f"the handler returned a {type(value).__name__}; a model with outputs "
                f"{list(specs)} needs a dict keyed by output name"
            )
        return {next(iter(specs)): value}


def _with_aliases(row: dict[str, Any]) -> dict[str, Any]:
    """TorchServe handlers read a request's body as ``row.get("data") or row.get("body")``:
    for a model with one input, both name it too (the bytes themselves for one BYTES
    element)."""
    if len(row) == 1:
        (value,) = row.values()
        if isinstance(value, np.ndarray) and value.dtype == np.object_ and value.size == 1:
            value = value.reshape(-1)[0]
        row["data"] = row["body"] = value
    return row


def _rows(inputs: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    count = len(next(iter(inputs.values()))) if inputs else 0
    return [_with_aliases({name: array[i] for name, array in inputs.items()}) for i in range(count)]
