"""The server's control API (everything but inference) over HTTP or gRPC, blocking calls.

Used before and between measurements, never on the hot path. Every call is recorded in the
:class:`~inferplex_tools.benchtool.compat.CompatLog` under its protocol and route, and every answer
is normalised to the JSON shape of the V2 REST API, so the rest of the bench does not care
which protocol asked.
"""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from typing import Any

from inferplex_tools.benchtool import BenchError
from inferplex_tools.benchtool.compat import CompatLog

#: the statistics phases the server-side breakdown reads
PHASES = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")


class Unsupported(BenchError):
    """The server does not implement this endpoint (HTTP 404/405/501, gRPC UNIMPLEMENTED)."""


class ServerApi(ABC):
    """Metadata, configuration, statistics and repository calls of one server."""

    protocol: str

    def __init__(self, address: str, compat: CompatLog, timeout: float = 10.0) -> None:
        self.address = address
        self.compat = compat
        self.timeout = timeout

    @abstractmethod
    def server_metadata(self) -> dict[str, Any]:
        """``{"name", "version", "extensions"}``."""

    @abstractmethod
    def model_metadata(self, model: str, version: str = "") -> dict[str, Any]:
        """``{"name", "versions", "inputs": [{"name", "datatype", "shape"}], "outputs"}``."""

    @abstractmethod
    def max_batch_size(self, model: str, version: str = "") -> int:
        """The model configuration's ``max_batch_size`` (0: the model does not batch)."""

    @abstractmethod
    def model_statistics(self, model: str, version: str = "") -> list[dict[str, Any]]:
        """Per version: ``name``, ``version``, ``inference_count``, ``execution_count`` and
        ``inference_stats`` ``{phase: {"count", "ns"}}`` for every phase in :data:`PHASES`."""

    @abstractmethod
    def load_model(self, model: str, config: dict[str, Any] | None = None) -> None:
        """Triton's repository load, with an optional configuration override."""

    @abstractmethod
    def model_config(self, model: str, version: str = "") -> dict[str, Any]:
        """The configuration in Triton's JSON field names (as ``/v2/models/{m}/config``)."""

    @abstractmethod
    def health(self, models: list[str]) -> None:
        """Call the liveness, readiness and model readiness endpoints, for the compatibility
        report only: their outcomes are recorded, never raised."""

    def close(self) -> None:  # noqa: B027 -- only the gRPC channel needs closing
        """Release the connection (nothing to do for HTTP)."""

    def has_statistics(self) -> bool:
        """Whether the server advertises the statistics extension (polled only then)."""
        try:
            return "statistics" in self.server_metadata().get("extensions", [])
        except BenchError:
            return False


def _model_path(model: str, version: str) -> str:
    return f"/v2/models/{model}" + (f"/versions/{version}" if version else "")


class HttpApi(ServerApi):
    """The V2 REST control endpoints, with urllib (plain blocking HTTP/1.1)."""

    protocol = "http"

    def _call(self, route: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://{self.address}{path}",
            data=data,
            method="GET" if body is None else "POST",
            headers={"Content-Type": "application/json"} if data else {},
        )
        name = f"http {request.method} {route}"
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                payload = response.read()
        except urllib.error.HTTPError as exc:
            message = _error_message(exc.read())
            self.compat.endpoint(name, False, f"HTTP {exc.code}: {message}")
            if exc.code in (404, 405, 501):
                raise Unsupported(f"{path}: HTTP {exc.code}: {message}") from None
            raise BenchError(f"{path}: HTTP {exc.code}: {message}") from None
        except (urllib.error.URLError, OSError) as exc:
            self.compat.endpoint(name, False, str(exc))
            raise BenchError(f"cannot reach http://{self.address}{path}: {exc}") from None
        self.compat.endpoint(name, True)
        return json.loads(payload) if payload else {}

    def server_metadata(self) -> dict[str, Any]:
        return dict(self._call("/v2", "/v2"))

    def model_metadata(self, model: str, version: str = "") -> dict[str, Any]:
        return dict(self._call("/v2/models/{m}", _model_path(model, version)))

    def model_config(self, model: str, version: str = "") -> dict[str, Any]:
        return dict(self._call("/v2/models/{m}/config", _model_path(model, version) + "/config"))

    def max_batch_size(self, model: str, version: str = "") -> int:
        return int(self.model_config(model, version).get("max_batch_size", 0))

    def model_statistics(self, model: str, version: str = "") -> list[dict[str, Any]]:
        answer = self._call("/v2/models/{m}/stats", _model_path(model, version) + "/stats")
        return [_normalise_stats(s) for s in answer.get("model_stats", [])]

    def load_model(self, model: str, config: dict[str, Any] | None = None) -> None:
        body: dict[str, Any] = {}
        if config is not None:
            body["parameters"] = {"config": json.dumps(config)}
        self._call("/v2/repository/models/{m}/load", f"/v2/repository/models/{model}/load", body)

    def health(self, models: list[str]) -> None:
        routes = [("/v2/health/live", "/v2/health/live"), ("/v2/health/ready", "/v2/health/ready")]
        routes += [("/v2/models/{m}/ready", f"/v2/models/{m}/ready") for m in models]
        for route, path in routes:
            with contextlib.suppress(BenchError):  # the outcome is recorded by _call
                self._call(route, path)


def _error_message(body: bytes) -> str:
    try:
        return str(json.loads(body).get("error", body[:300].decode(errors="replace")))
    except (ValueError, AttributeError):
        return body[:300].decode(errors="replace")


def _normalise_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """Counters as ints (Triton's REST API may send them as strings), missing phases as 0."""
    phases = stats.get("inference_stats", {})
    return {
        "name": stats.get("name", ""),
        "version": str(stats.get("version", "")),
        "inference_count": int(stats.get("inference_count", 0)),
        "execution_count": int(stats.get("execution_count", 0)),
        "inference_stats": {
            phase: {
                "count": int(phases.get(phase, {}).get("count", 0)),
                "ns": int(phases.get(phase, {}).get("ns", 0)),
            }
            for phase in PHASES
        },
    }


class GrpcApi(ServerApi):
    """The V2 gRPC control RPCs, on a blocking channel with the project's own messages."""

    protocol = "grpc"

    def __init__(self, address: str, compat: CompatLog, timeout: float = 10.0) -> None:
        import grpc

        super().__init__(address, compat, timeout)
        self._channel = grpc.insecure_channel(address)

    def close(self) -> None:
        self._channel.close()

    def _call(self, rpc: str, request: Any, response_class: Any) -> Any:
        import grpc

        method = self._channel.unary_unary(
            f"/inference.GRPCInferenceService/{rpc}",
            request_serializer=lambda message: message.SerializeToString(),
            response_deserializer=response_class.FromString,
        )
        name = f"grpc {rpc}"
        try:
            answer = method(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            details = exc.details() if hasattr(exc, "details") else str(exc)
            self.compat.endpoint(name, False, f"{code}: {details}")
            if code == grpc.StatusCode.UNIMPLEMENTED:
                raise Unsupported(f"{rpc}: {details}") from None
            if code == grpc.StatusCode.UNAVAILABLE and rpc == "ServerMetadata":
                raise BenchError(f"cannot reach grpc {self.address}: {details}") from None
            raise BenchError(f"{rpc}: {code}: {details}") from None
        self.compat.endpoint(name, True)
        return answer

    def server_metadata(self) -> dict[str, Any]:
        from inferplex.protocol.v2 import generated as pb

        answer = self._call("ServerMetadata", pb.ServerMetadataRequest(), pb.ServerMetadataResponse)
        return {
            "name": answer.name,
            "version": answer.version,
            "extensions": list(answer.extensions),
        }

    def model_metadata(self, model: str, version: str = "") -> dict[str, Any]:
        from inferplex.protocol.v2 import generated as pb

        answer = self._call(
            "ModelMetadata",
            pb.ModelMetadataRequest(name=model, version=version),
            pb.ModelMetadataResponse,
        )

        def tensors(items: Any) -> list[dict[str, Any]]:
            return [
                {"name": t.name, "datatype": t.datatype, "shape": [int(d) for d in t.shape]}
                for t in items
            ]

        return {
            "name": answer.name,
            "versions": list(answer.versions),
            "platform": answer.platform,
            "inputs": tensors(answer.inputs),
            "outputs": tensors(answer.outputs),
        }

    def model_config(self, model: str, version: str = "") -> dict[str, Any]:
        from google.protobuf import json_format

        from inferplex.protocol.v2 import generated as pb

        answer = self._call(
            "ModelConfig",
            pb.ModelConfigRequest(name=model, version=version),
            pb.ModelConfigResponse,
        )
        return dict(json_format.MessageToDict(answer.config, preserving_proto_field_name=True))

    def max_batch_size(self, model: str, version: str = "") -> int:
        return int(self.model_config(model, version).get("max_batch_size", 0))

    def model_statistics(self, model: str, version: str = "") -> list[dict[str, Any]]:
        from inferplex.protocol.v2 import generated as pb

        answer = self._call(
            "ModelStatistics",
            pb.ModelStatisticsRequest(name=model, version=version),
            pb.ModelStatisticsResponse,
        )
        return [
            {
                "name": s.name,
                "version": s.version,
                "inference_count": s.inference_count,
                "execution_count": s.execution_count,
                "inference_stats": {
                    phase: {
                        "count": getattr(s.inference_stats, phase).count,
                        "ns": getattr(s.inference_stats, phase).ns,
                    }
                    for phase in PHASES
                },
            }
            for s in answer.model_stats
        ]

    def load_model(self, model: str, config: dict[str, Any] | None = None) -> None:
        from inferplex.protocol.v2 import generated as pb

        request = pb.RepositoryModelLoadRequest(model_name=model)
        if config is not None:
            request.parameters["config"].string_param = json.dumps(config)
        self._call("RepositoryModelLoad", request, pb.RepositoryModelLoadResponse)

    def health(self, models: list[str]) -> None:
        from inferplex.protocol.v2 import generated as pb

        calls = [
            ("ServerLive", pb.ServerLiveRequest(), pb.ServerLiveResponse, "live"),
            ("ServerReady", pb.ServerReadyRequest(), pb.ServerReadyResponse, "ready"),
        ]
        calls += [
            ("ModelReady", pb.ModelReadyRequest(name=m), pb.ModelReadyResponse, "ready")
            for m in models
        ]
        for rpc, request, response, field in calls:
            try:
                answer = self._call(rpc, request, response)
            except BenchError:
                continue  # recorded by _call
            if not getattr(answer, field):
                self.compat.endpoint(f"grpc {rpc}", False, f"answered {field}: false")


def server_api(protocol: str, address: str, compat: CompatLog) -> ServerApi:
    """The control API of ``protocol`` (``http`` or ``grpc``) at ``host:port``."""
    if protocol == "http":
        return HttpApi(address, compat)
    if protocol == "grpc":
        return GrpcApi(address, compat)
    raise BenchError(f"--protocol: expected http or grpc, got {protocol!r}")
