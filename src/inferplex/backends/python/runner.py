"""Loading a user's model.py in the worker and running batches through it, in either style:

* Triton python-backend style — the class has ``execute(requests)``: it gets a list of
  ``triton.InferenceRequest``, one per client request of the batch (its rows, id and
  parameters), and returns one ``triton.InferenceResponse`` per request; an error response
  fails its request alone. ``initialize(args)`` gets Triton's ``args`` dict.
* TorchServe style — the class has ``handle(data, context)`` (``BaseHandler`` provides it) or
  at least ``inference``; see ``inferplex.handler.base`` for ``data`` and the results.

Either way the outputs are cast to the datatypes the model's config declares.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import inspect
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import numpy as np

from inferplex.backends.python.senders import BatchSenders, Respond
from inferplex.datatypes import TRITON_TO_V2, V2_TO_NUMPY
from inferplex.errors import ErrorCode, InferplexError
from inferplex.handler import triton
from inferplex.handler.base import BaseHandler, Context, never

#: the classes looked for when the config names none (Triton's name first)
DEFAULT_CLASSES = ("TritonPythonModel", "Handler")


class HandlerError(Exception):
    """The handler broke the contract (bad class, wrong result shape); the message says how."""


class Runner:
    """A loaded handler: ``run`` one batch, ``finalize`` at the end."""

    def __init__(self, handler: Any, context: Context) -> None:
        self.handler = handler
        self.context = context
        config = context.config
        self._batched = context.max_batch_size > 0
        #: output name -> (numpy dtype, None for BYTES; dims without the batch dimension)
        self._outputs = {
            t["name"]: (_numpy_dtype(t["data_type"]), tuple(t.get("dims", ())))
            for t in config.get("output", [])
        }
        self._triton = callable(getattr(handler, "execute", None))
        #: runs an ``async def execute`` (made on first use)
        self._loop: asyncio.AbstractEventLoop | None = None
        #: sends 0..N responses per request (model_transaction_policy { decoupled: true })
        self._decoupled = bool(config.get("model_transaction_policy", {}).get("decoupled"))
        cls = type(handler)
        self._vectorised = (
            isinstance(handler, BaseHandler)
            and cls.handle is BaseHandler.handle
            and cls.preprocess is BaseHandler.preprocess
        )
        if self._triton:
            if hasattr(handler, "initialize"):
                handler.initialize(_triton_args(context))
        else:
            if not callable(getattr(handler, "handle", None)) and not callable(
                getattr(handler, "inference", None)
            ):
                raise HandlerError(
                    f"class {type(handler).__name__} has neither execute(requests) (Triton "
                    "style) nor handle(data, context) / inference(data) (TorchServe style)"
                )
            if hasattr(handler, "initialize"):
                handler.initialize(context)
            if not self._decoupled and any(
                inspect.isgeneratorfunction(getattr(handler, m, None))
                for m in ("handle", "inference")
            ):
                raise HandlerError(
                    f"{type(handler).__name__} yields its results (a generator): each is a "
                    "response, so the model needs model_transaction_policy { decoupled: true }"
                )

    def run(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        """One batch: input name -> array in, the requested outputs out (a Triton-style model
        gets it as one request; its error response fails the batch with its code)."""
        if self._triton:
            rows = len(next(iter(inputs.values()))) if self._batched and inputs else 1
            results, failed = self.run_requests(inputs, outputs, [("", {}, rows)])
            if failed:
                _, why, code = failed[0]
                error = InferplexError(why)
                error.code = ErrorCode(code)
                raise error
            return results
        results = self._run_torchserve(inputs)
        return {name: self._finish(name, results) for name in outputs}

    def run_requests(
        self,
        inputs: dict[str, np.ndarray],
        outputs: list[str],
        requests: list[tuple[str, dict[str, Any], int]],
        cancelled: Callable[[int], bool] = never,
        respond: Respond | None = None,
    ) -> tuple[dict[str, np.ndarray], list[tuple[int, str, str]]]:
        """One batch with who asked for its rows ((id, parameters, rows) per request): the
        outputs of the requests that did not fail, rows in order, and (index, message, code)
        of each that did. A Triton-style model gets one InferenceRequest per client request
        and answers each; a TorchServe-style handler gets the batch's rows as before.
        ``cancelled(index)`` tells whether a request's caller went away (the handler's
        ``request.is_cancelled()``, ``context.is_cancelled(row)``). A decoupled model sends
        its responses with ``respond`` as they come and answers nothing here."""
        if not self._triton:
            ids = [request_id for request_id, _, rows in requests for _ in range(rows)]
            self.context.request_ids = dict(enumerate(ids))
            self.context._begin_batch([rows for _, _, rows in requests], cancelled)
            if self._decoupled and respond is not None:
                self._stream_torchserve(inputs, outputs, [r for *_, r in requests], respond)
                return {}, []
            return self.run(inputs, outputs), []
        senders = BatchSenders(
            len(requests), respond if self._decoupled else None, self._converter(outputs)
        )
        results, failed = self._run_triton_requests(inputs, outputs, requests, cancelled, senders)
        if len(failed) == len(requests) or self._decoupled:  # a decoupled model sent its own
            return {}, failed
        return {name: self._finish(name, results) for name in outputs}, failed

    def finalize(self) -> None:
        if callable(getattr(self.handler, "finalize", None)):
            self.handler.finalize()
        if self._loop is not None:
            self._loop.close()

    def _execute(self, requests: list[triton.InferenceRequest]) -> Any:
        """``execute(requests)``; an ``async def execute`` runs to its end on the worker's
        event loop (its ``async_exec`` calls started together run at once in the server)."""
        returned = self.handler.execute(requests)
        if inspect.iscoroutine(returned):
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
            returned = self._loop.run_until_complete(returned)
        return returned

    # -- Triton style --------------------------------------------------------------------
    def _run_triton_requests(
        self,
        inputs: dict[str, np.ndarray],
        outputs: list[str],
        requests: list[tuple[str, dict[str, Any], int]],
        cancelled: Callable[[int], bool],
        senders: BatchSenders,
    ) -> tuple[dict[str, Any], list[tuple[int, str, str]]]:
        split: list[triton.InferenceRequest] = []
        offset = 0
        for index, (request_id, parameters, rows) in enumerate(requests):
            end = offset + rows
            tensors = [
                triton.Tensor(name, array[offset:end] if self._batched else array)
                for name, array in inputs.items()
            ]
            request = triton.InferenceRequest(
                self.context.model_name, tensors, outputs, request_id=request_id,
                parameters=parameters,
            )  # fmt: skip
            check = functools.partial(cancelled, index)
            if cancelled is not never:
                request._cancelled = check
            request._sender = senders.sender(index, check)
            split.append(request)
            offset = end
        responses = self._responses(self._execute(split), senders, len(split))
        if responses is None:  # a decoupled model: it sent them all
            return {}, []
        failed: list[tuple[int, str, str]] = []
        answered: list[dict[str, np.ndarray]] = []
        for index, response in enumerate(responses):
            error = response.error()
            if error is not None:
                failed.append((index, error.message(), error.server_code().value))
            else:
                answered.append({t.name(): t.as_numpy() for t in response.output_tensors()})
        if len(answered) == 1 or not self._batched:
            return (answered[0] if answered else {}), failed
        results = {}
        for name in {n for answer in answered for n in answer}:
            parts = [answer.get(name) for answer in answered]
            if any(part is None for part in parts):
                raise HandlerError(f"some responses of execute(requests) have no output '{name}'")
            results[name] = np.concatenate([np.asarray(_plain(p)) for p in parts])
        return results, failed

    def _responses(
        self, returned: Any, senders: BatchSenders, count: int
    ) -> list[triton.InferenceResponse] | None:
        """What ``execute`` answered: the list it returned, or (it returned None) the
        responses its senders kept, once each request had its final one; None for a
        decoupled model, which sent them."""
        if returned is None:
            senders.wait()
            if self._decoupled:
                return None
            missing = [i for i, response in enumerate(senders.kept) if response is None]
            if missing:
                raise HandlerError(
                    f"execute(requests) returned None and sent no response to request(s) "
                    f"{missing}: return one InferenceResponse per request, or send one with "
                    "request.get_response_sender()"
                )
            return cast(list[triton.InferenceResponse], senders.kept)
        if self._decoupled:
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

    def _converter(self, outputs: list[str]) -> Callable[[dict[str, Any]], dict[str, np.ndarray]]:
        """What casts a sent response's outputs (those asked for) to the declared types."""

        def convert(results: dict[str, Any]) -> dict[str, np.ndarray]:
            return {name: self._finish(name, results) for name in outputs if name in results}

        return convert

    # -- TorchServe style ----------------------------------------------------------------
    def _stream_torchserve(
        self,
        inputs: dict[str, np.ndarray],
        outputs: list[str],
        rows: list[int],
        respond: Respond,
    ) -> None:
        """A decoupled TorchServe-style handler: each result it yields (or the one it
        returns) is a response to each request of the batch (its rows), then a final flag.
        It stops early when every request's client went away."""
        result, count = self._call_torchserve(inputs)
        convert = self._converter(outputs)
        items = result if inspect.isgenerator(result) else iter([result])
        try:
            for item in items:
                batch = convert(self._collect(item, count))
                alive, offset = False, 0
                for index, n in enumerate(rows):
                    part = {k: v[offset : offset + n] for k, v in batch.items()}
                    if not self._batched:
                        part = batch
                    alive = respond(index, part, False, None) or alive
                    offset += n
                if not alive:
                    break
        finally:
            if inspect.isgenerator(items):
                items.close()
        for index in range(len(rows)):
            respond(index, None, True, None)

    def _run_torchserve(self, inputs: dict[str, np.ndarray]) -> dict[str, Any]:
        return self._collect(*self._call_torchserve(inputs))

    def _call_torchserve(self, inputs: dict[str, np.ndarray]) -> tuple[Any, int]:
        """The handler's result for a batch, and the batch's rows."""
        handler = self.handler
        if self._vectorised:
            # BaseHandler's own handle and preprocess would split the batch into rows and
            # stack them again: hand the batch arrays over as they came
            rows = len(next(iter(inputs.values()))) if self._batched and inputs else 1
            result = handler.postprocess(handler.inference(dict(inputs)))
        else:
            data = _rows(inputs) if self._batched else [_with_aliases(dict(inputs))]
            rows = len(data)
            if callable(getattr(handler, "handle", None)):
                result = handler.handle(data, self.context)
            else:
                result = data
                for step in ("preprocess", "inference", "postprocess"):
                    if callable(getattr(handler, step, None)):
                        result = getattr(handler, step)(result)
        return result, rows

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
        if not self._batched:
            return items[0]
        names = items[0].keys() if items else self._outputs.keys()
        return {
            name: _stack(name, [item.get(name) for item in items], self._numeric(name))
            for name in names
        }

    def _numeric(self, name: str) -> bool:
        """Whether the output holds numbers (not BYTES)."""
        return self._outputs.get(name, (None, ()))[0] is not None

    def _item(self, value: Any) -> dict[str, Any]:
        """A handler result as output name -> value: a dict keyed by output names, or the
        value of the model's only output."""
        if isinstance(value, Mapping) and value and all(k in self._outputs for k in value):
            return dict(value)
        if len(self._outputs) != 1:
            raise HandlerError(
                f"the handler returned a {type(value).__name__}; a model with outputs "
                f"{list(self._outputs)} needs a dict keyed by output name"
            )
        return {next(iter(self._outputs)): value}

    # -- outputs -------------------------------------------------------------------------
    def _finish(self, name: str, results: dict[str, Any]) -> np.ndarray:
        if name not in results or results[name] is None:
            raise HandlerError(
                f"the handler returned no output '{name}' (it returned {sorted(results)})"
            )
        value = results[name]
        dtype, dims = self._outputs.get(name, (None, ()))
        array = _to_bytes_array(value) if dtype is None else _to_array(value, dtype)
        wanted = (array.shape[0], *dims) if self._batched and array.ndim else dims
        if array.shape != wanted and -1 not in wanted and array.size == np.prod(wanted):
            # e.g. one value per row, declared with Triton's dims [1]
            array = array.reshape(wanted)
        return array


class ModuleHandler:
    """A TorchServe module-level entry point, ``handle(data, context)`` in model.py, as a
    handler: called once with ``data`` None to initialize (as TorchServe does), then once
    per batch."""

    def __init__(self, entry: Callable[[Any, Context], Any]) -> None:
        self._entry = entry

    def initialize(self, context: Context) -> None:
        self._entry(None, context)

    def handle(self, data: list[dict[str, Any]], context: Context) -> Any:
        return self._entry(data, context)


def _numpy_dtype(data_type: str) -> np.dtype | None:
    v2 = TRITON_TO_V2.get(data_type, data_type)
    return None if v2 == "BYTES" else V2_TO_NUMPY[v2]


def _plain(value: Any) -> Any:
    """torch tensors (CPU) become numpy arrays; everything else is left as it is."""
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        return value.detach().cpu().numpy()
    return value


def _to_array(value: Any, dtype: np.dtype) -> np.ndarray:
    return np.asarray(_plain(value), dtype=dtype)


def _element(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytearray | memoryview | np.bytes_):
        return bytes(value)
    # TorchServe handlers often return JSON-able results for a text output
    return json.dumps(value, default=_json_default).encode()


def _json_default(value: Any) -> Any:
    """numpy values inside a handler's JSON-able result."""
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    raise TypeError(f"a {type(value).__name__} cannot be sent as JSON in a BYTES output")


def _to_bytes_array(value: Any) -> np.ndarray:
    value = _plain(value)
    if isinstance(value, np.ndarray) and value.size == 0:
        # no elements, whatever their type (Triton's mock_llm sends np.array([]), float64,
        # for an empty text output): the output is empty, not the text "[]"
        return np.empty(value.shape, dtype=np.object_)
    if isinstance(value, np.ndarray) and value.dtype.kind in ("O", "S", "U"):
        out = np.empty(value.shape, dtype=np.object_)
        for index, item in np.ndenumerate(value):
            out[index] = _element(item)
        return out
    out = np.empty((), dtype=np.object_)
    out[()] = _element(value)
    return out


def _stack(name: str, values: list[Any], numeric: bool) -> np.ndarray:
    """Per-row values of one output as one array: numbers of a numeric output stacked
    (arrays, tensors, scalars or nested lists such as ``tensor.tolist()``)."""
    if any(v is None for v in values):
        raise HandlerError(f"some rows of the handler's result have no output '{name}'")
    plain = [_plain(v) for v in values]
    if numeric or all(isinstance(v, np.ndarray | int | float | bool | np.generic) for v in plain):
        return np.stack([np.asarray(v) for v in plain])
    # per-row text or JSON-able values for a BYTES output
    out = np.empty(len(plain), dtype=np.object_)
    for i, value in enumerate(plain):
        out[i] = value if isinstance(value, bytes | str) else _element(value)
    return out


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


def load_module(path: Path) -> ModuleType:
    """Import the user's model.py; its folder goes on ``sys.path`` for its own imports."""
    # no __pycache__ written into the model repository (a change a watcher would notice)
    sys.dont_write_bytecode = True
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"inferplex_model_{path.parent.name}", path)
    if spec is None or spec.loader is None:
        raise HandlerError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def find_class(module: ModuleType, name: str) -> Callable[[], Any]:
    """The handler class: ``name`` if given, else TritonPythonModel or Handler, else the one
    class the module itself defines that has execute, handle or inference (TorchServe's
    rule)."""
    if name:
        found = getattr(module, name, None)
        if not inspect.isclass(found):
            raise HandlerError(
                f"model.py defines no class '{name}' (config parameter handler_class)"
            )
        return found
    for default in DEFAULT_CLASSES:
        found = getattr(module, default, None)
        if inspect.isclass(found):
            return found
    candidates = [
        cls
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if cls.__module__ == module.__name__
        and any(callable(getattr(cls, m, None)) for m in ("execute", "handle", "inference"))
    ]
    entry = getattr(module, "handle", None)
    if not candidates and inspect.isfunction(entry) and entry.__module__ == module.__name__:
        return lambda: ModuleHandler(entry)
    if len(candidates) != 1:
        found_names = ", ".join(c.__name__ for c in candidates) or "none"
        raise HandlerError(
            f"model.py must define a class {' or '.join(DEFAULT_CLASSES)}, or exactly one class "
            f"with execute, handle or inference (found: {found_names}), or a function "
            "handle(data, context); or name a class in the config parameter handler_class"
        )
    return candidates[0]
