"""A model served by another V2 server (edge/cloud split), with a timeout and a local fallback.

``backend: "remote"``; the model's ``parameters``:

- ``url`` (required): the remote server's HTTP address, ``http://host:port`` (a path prefix
  is kept: ``http://gateway/inference``).
- ``remote_model`` (default: this model's name) and ``remote_version`` (default: the latest).
- ``timeout_s`` (default 10): the longest wait for the remote, per socket operation.
- ``fallback_model`` / ``fallback_version`` (optional): a model served here that answers when
  the remote is down, times out or is not ready; ``retry_after_s`` (default 1) is how long
  requests go straight to the fallback after the remote failed, before it is tried again.

Each instance keeps one persistent HTTP/1.1 connection and speaks the binary tensor extension
(raw tensor bytes after a JSON header), so nothing is converted to JSON numbers. The config
declares the inputs and outputs (the remote is not asked at load: it may be down then).
"""

from __future__ import annotations

import http.client
import logging
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import orjson

from inferplex.backends.base import Backend, InstanceSpec, ModelCaller
from inferplex.backends.ensemble import failure
from inferplex.config.model_config import ModelConfig
from inferplex.datatypes import deserialize_bytes, numpy_dtype, serialize_bytes
from inferplex.errors import (
    ConfigError,
    DeadlineExceededError,
    InferplexError,
    InvalidInputError,
    ModelExecutionError,
    ModelNotReadyError,
    PayloadTooLargeError,
)
from inferplex.types import InferenceRequest, RequestedOutput, Tensor

logger = logging.getLogger(__name__)

Arrays = dict[str, np.ndarray]
HEADER_LENGTH = "Inference-Header-Content-Length"
#: remote answers that say "your request is wrong": passed on, the fallback would not help
_CLIENT_ERRORS = {400: InvalidInputError, 413: PayloadTooLargeError}


class RemoteUnavailableError(ModelNotReadyError):
    """The remote could not answer (down, refusing, not ready, failing)."""


class RemoteBackend(Backend):
    """Forwards each batch to a model of another V2 server."""

    names = ("remote",)
    composite = True  # it waits on the network, not on a core

    def __init__(self, model_path: Path, config: ModelConfig, instance: InstanceSpec) -> None:
        params = config.parameters
        self._name = config.name
        url = params.get("url", "")
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if not url or parts.scheme != "http" or not parts.hostname:
            raise ConfigError(
                f"model '{config.name}': parameter url must be the remote server's address, "
                f"http://host:port, got {url!r}"
            )
        self._url = f"http://{parts.netloc}{parts.path.rstrip('/')}"
        self._host, self._port = parts.hostname, parts.port or 80
        model = params.get("remote_model", config.name)
        version = params.get("remote_version", "")
        self._path = f"{parts.path.rstrip('/')}/v2/models/{model}"
        self._path += f"/versions/{version}/infer" if version else "/infer"
        self._remote = f"remote model '{model}' at {self._url}"
        self._timeout = _positive(config, params, "timeout_s", 10.0)
        self._retry_after = _positive(config, params, "retry_after_s", 1.0)
        self._fallback = params.get("fallback_model", "")
        self._fallback_version = params.get("fallback_version", "")
        if self._fallback and instance.caller is None:
            raise ConfigError(f"model '{config.name}': a fallback_model needs the engine's caller")
        self._caller: ModelCaller | None = instance.caller
        if not config.input or not config.output:
            raise ConfigError(
                f"model '{config.name}': a remote model's config must declare its inputs and "
                "outputs (the remote is not asked when the model loads)"
            )
        self._datatypes = {t.name: t.data_type for t in config.input}
        self._connection: http.client.HTTPConnection | None = None
        self._down_until = 0.0
        self._on_fallback = False  # the last answer came from the fallback

    def execute(self, inputs: Arrays, outputs: list[str]) -> Arrays:
        if not self._fallback:
            return self._forward(inputs, outputs)
        if time.monotonic() >= self._down_until:
            try:
                answer = self._forward(inputs, outputs)
            except (RemoteUnavailableError, DeadlineExceededError) as exc:
                logger.warning(
                    "model '%s': %s; answering from fallback model '%s' for the next %.1f s",
                    self._name,
                    exc.message,
                    self._fallback,
                    self._retry_after,
                )
                self._down_until = time.monotonic() + self._retry_after
                self._on_fallback = True
            else:
                if self._on_fallback:
                    self._on_fallback = False
                    logger.warning(
                        "model '%s': %s answers again; fallback model '%s' no longer used",
                        self._name,
                        self._remote,
                        self._fallback,
                    )
                return answer
        return self._call_fallback(inputs, outputs)

    def close(self) -> None:
        self._disconnect()

    # -- the remote ---------------------------------------------------------------------
    def _forward(self, inputs: Arrays, outputs: list[str]) -> Arrays:
        body, header_length = self._encode(inputs, outputs)
        headers = {
            "Content-Type": "application/octet-stream",
            HEADER_LENGTH: str(header_length),
        }
        for attempt in (1, 2):
            reused = self._connection is not None
            try:
                connection = self._connect()
                connection.request("POST", self._path, body, headers)
                response = connection.getresponse()
                data = response.read()
            except TimeoutError:
                self._disconnect()
                raise DeadlineExceededError(
                    f"{self._remote} did not answer within {self._timeout:g} s (timeout_s)"
                ) from None
            except (OSError, http.client.HTTPException) as exc:
                self._disconnect()
                if reused and attempt == 1:  # the server closed an idle keep-alive connection
                    continue
                raise RemoteUnavailableError(f"{self._remote} is unreachable: {exc}") from None
            if response.will_close:
                self._disconnect()
            return self._decode(response.status, response.getheader(HEADER_LENGTH), data)
        raise AssertionError("the second attempt returns or raises")

    def _connect(self) -> http.client.HTTPConnection:
        if self._connection is None:
            connection = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
            connection.connect()
            # one write per request already; no Nagle delay on the small ones either
            connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._connection = connection
        return self._connection

    def _disconnect(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _encode(self, inputs: Arrays, outputs: list[str]) -> tuple[bytes, int]:
        """The binary-extension body: JSON header, then each input's raw bytes in order."""
        described: list[dict[str, Any]] = []
        buffers: list[bytes | memoryview] = []
        for name, array in inputs.items():
            datatype = self._datatypes[name]
            if datatype == "BYTES":
                raw: bytes | memoryview = serialize_bytes(array)
            else:
                raw = np.ascontiguousarray(array).data.cast("B")
            described.append(
                {
                    "name": name,
                    "shape": list(array.shape),
                    "datatype": datatype,
                    "parameters": {"binary_data_size": len(raw)},
                }
            )
            buffers.append(raw)
        header = orjson.dumps(
            {
                "inputs": described,
                "outputs": [{"name": o, "parameters": {"binary_data": True}} for o in outputs],
            }
        )
        return b"".join([header, *buffers]), len(header)

    def _decode(self, status: int, header_length: str | None, body: bytes) -> Arrays:
        size = int(header_length) if header_length else len(body)
        try:
            header = orjson.loads(body[:size])
        except orjson.JSONDecodeError:
            header = None
        if status != 200:
            message = header.get("error") if isinstance(header, dict) else None
            detail = f"{self._remote} answered {status}: {message or repr(body[:200])}"
            error = _CLIENT_ERRORS.get(status)
            if error is not None:
                raise error(detail)
            raise RemoteUnavailableError(detail)
        if not isinstance(header, dict) or not isinstance(header.get("outputs"), list):
            raise ModelExecutionError(f"{self._remote} answered 200 without outputs")
        result: Arrays = {}
        offset = size
        for output in header["outputs"]:
            name, datatype, shape = output["name"], output["datatype"], output["shape"]
            binary = (output.get("parameters") or {}).get("binary_data_size")
            if binary is None:  # a JSON answer: the values are in "data"
                values = output["data"]
                if datatype == "BYTES":
                    values = [str(x).encode() for x in values]
                result[name] = np.array(values, dtype=numpy_dtype(datatype)).reshape(shape)
                continue
            chunk = body[offset : offset + binary]
            offset += binary
            count = int(np.prod(shape))
            if datatype == "BYTES":
                result[name] = deserialize_bytes(chunk, count, name).reshape(shape)
            else:
                result[name] = np.frombuffer(chunk, dtype=numpy_dtype(datatype)).reshape(shape)
        return result

    # -- the fallback -------------------------------------------------------------------
    def _call_fallback(self, inputs: Arrays, outputs: list[str]) -> Arrays:
        assert self._caller is not None
        request = InferenceRequest(
            self._fallback,
            [Tensor(n, self._datatypes[n], a.shape, a) for n, a in inputs.items()],
            self._fallback_version,
            outputs=[RequestedOutput(o) for o in outputs],
        )
        try:
            response = self._caller.infer(request)
        except InferplexError as exc:
            raise failure(f"model '{self._name}': fallback model '{self._fallback}'", exc) from exc
        return {t.name: t.data for t in response.outputs}


def _positive(config: ModelConfig, params: dict[str, str], key: str, default: float) -> float:
    text = params.get(key)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ConfigError(
            f"model '{config.name}': parameter {key} must be a positive number of seconds, "
            f"got {text!r}"
        )
    return value
