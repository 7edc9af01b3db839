"""gRPC's standard services on the V2 gRPC port, beside ``inference.GRPCInferenceService``:
health checking (``grpc.health.v1.Health``) for Kubernetes ``grpc:`` probes,
``grpc_health_probe`` and load balancers, and server reflection (``grpc.reflection.v1`` and
``v1alpha``) for grpcurl and other clients that read the API from the server.

Health, by the request's ``service``:

- ``""`` or ``inference.GRPCInferenceService``: the server is ready (``/v2/health/ready``:
  started, models loaded at start, not draining);
- a model's name (an extension of the standard, which leaves names to the server): that
  model is ready (``/v2/models/{m}/ready``) and the server too;
- any other name: Check answers NOT_FOUND, Watch ``SERVICE_UNKNOWN`` (as the standard says).

Watch sends the status at once, then each change, until the client cancels: the streams
are bounded in number and woken by the registry's status signal, not by a timer each
(frontends/health_watch.py). Reflection answers from the descriptor
pool the V2 messages come from (proto/: grpc_service.proto, model_config.proto and these
services' own files), one response per request; proto3 has no extensions, so the extension
requests find none.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import FileDescriptor
from google.protobuf.descriptor_pb2 import FileDescriptorProto

from inferplex.errors import ModelNotFoundError
from inferplex.frontends.health_watch import WatchHub
from inferplex.protocol.v2 import generated as pb
from inferplex.transport.grpc_server import Method

if TYPE_CHECKING:
    from inferplex.engine.inference import InferenceEngine

HEALTH = "grpc.health.v1.Health"
REFLECTION = ("grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection")

_NOT_FOUND: int = grpc.StatusCode.NOT_FOUND.value[0]
_INVALID_ARGUMENT: int = grpc.StatusCode.INVALID_ARGUMENT.value[0]


def _message(name: str) -> Any:
    return message_factory.GetMessageClass(pb.POOL.FindMessageTypeByName(name))


_CheckRequest = _message("grpc.health.v1.HealthCheckRequest")
_CheckResponse = _message("grpc.health.v1.HealthCheckResponse")
_ListRequest = _message("grpc.health.v1.HealthListRequest")
_ListResponse = _message("grpc.health.v1.HealthListResponse")
SERVING, NOT_SERVING, SERVICE_UNKNOWN = (
    _CheckResponse.SERVING,
    _CheckResponse.NOT_SERVING,
    _CheckResponse.SERVICE_UNKNOWN,
)


def health_methods(
    engine: InferenceEngine, max_watches: int = 1000, max_watches_per_connection: int = 16
) -> dict[str, Method]:
    """``grpc.health.v1.Health``'s Check, List and Watch on ``engine``; at most
    ``max_watches`` Watch streams open, ``max_watches_per_connection`` on one connection."""
    health = _Health(engine, max_watches, max_watches_per_connection)
    path = f"/{HEALTH}/"
    return {
        path + "Check": Method(health.check, _CheckRequest.FromString, _serialize),
        path + "List": Method(health.list, _ListRequest.FromString, _serialize),
        path + "Watch": Method(health.watch, _CheckRequest.FromString, _serialize, streaming=True),
    }


def reflection_methods(services: Callable[[], Iterable[str]]) -> dict[str, Method]:
    """``ServerReflectionInfo`` of both reflection packages; ``services`` names the
    services served (for ``list_services``)."""
    methods: dict[str, Method] = {}
    for service in REFLECTION:
        package = service.rsplit(".", 1)[0]
        reflection = _Reflection(package, services)
        methods[f"/{service}/ServerReflectionInfo"] = Method(
            reflection.answer_each,
            _message(f"{package}.ServerReflectionRequest").FromString,
            _serialize,
            streaming=True,
        )
    return methods


def _serialize(message: Any) -> bytes:
    return bytes(message.SerializeToString())


class _Health:
    def __init__(self, engine: InferenceEngine, max_watches: int, per_connection: int) -> None:
        self.engine = engine
        self.hub = WatchHub(self.watched, engine.registry.status, max_watches, per_connection)

    def status(self, service: str) -> int:
        """SERVING or NOT_SERVING; ModelNotFoundError for a name that is neither the server
        nor a model."""
        ready = self.engine.ready()
        if service in ("", pb.SERVICE_NAME):
            return SERVING if ready else NOT_SERVING
        model_ready = self.engine.model_ready(service)  # raises for an unknown model
        return SERVING if ready and model_ready else NOT_SERVING

    async def check(self, request: Any, _call: object) -> Any:
        try:
            return _CheckResponse(status=self.status(request.service))
        except ModelNotFoundError:
            raise ModelNotFoundError(
                f"unknown service '{request.service}': expected '' (the server), "
                f"'{pb.SERVICE_NAME}' or a model's name"
            ) from None

    async def list(self, _request: Any, _call: object) -> Any:
        names = ["", *sorted({row["name"] for row in self.engine.repository_index()})]
        statuses = {}
        for name in names:
            try:
                statuses[name] = _CheckResponse(status=self.status(name))
            except ModelNotFoundError:  # left the repository meanwhile
                continue
        return _ListResponse(statuses=statuses)

    def watched(self, service: str) -> int:
        """What Watch reports of ``service``: its status, or SERVICE_UNKNOWN."""
        try:
            return self.status(service)
        except ModelNotFoundError:
            return SERVICE_UNKNOWN

    async def watch(self, requests: AsyncIterator[Any], call: Any) -> AsyncIterator[Any]:
        place = self.hub.open(call.connection)  # counted before its request is read
        try:
            request = await anext(requests, None)
            if request is None:
                return
            self.hub.watch(place, request.service)
            while True:
                yield _CheckResponse(status=await place.next())
        finally:
            self.hub.close(place)


class _Reflection:
    """One package's ServerReflectionInfo: the answer to each request, in order."""

    def __init__(self, package: str, services: Callable[[], Iterable[str]]) -> None:
        self._response = _message(f"{package}.ServerReflectionResponse")
        self._services = services

    async def answer_each(self, requests: AsyncIterator[Any], _call: object) -> AsyncIterator[Any]:
        async for request in requests:
            yield self.answer(request)

    def answer(self, request: Any) -> Any:
        response = self._response(valid_host=request.host, original_request=request)
        kind = request.WhichOneof("message_request")
        try:
            if kind == "list_services":
                listing = response.list_services_response
                listing.SetInParent()
                for name in sorted(set(self._services())):
                    listing.service.add(name=name)
            elif kind == "file_by_filename":
                files = _with_imports(pb.POOL.FindFileByName(request.file_by_filename))
                response.file_descriptor_response.file_descriptor_proto.extend(files)
            elif kind == "file_containing_symbol":
                file = _file_of_symbol(request.file_containing_symbol)
                response.file_descriptor_response.file_descriptor_proto.extend(_with_imports(file))
            elif kind == "all_extension_numbers_of_type":
                pb.POOL.FindMessageTypeByName(request.all_extension_numbers_of_type)
                numbers = response.all_extension_numbers_response
                numbers.base_type_name = request.all_extension_numbers_of_type  # none: proto3
            elif kind == "file_containing_extension":
                raise KeyError("no extensions are declared (proto3)")
            else:
                response.error_response.error_code = _INVALID_ARGUMENT
                response.error_response.error_message = "the request asks for nothing"
        except KeyError as exc:
            response.ClearField("message_response")
            response.error_response.error_code = _NOT_FOUND
            response.error_response.error_message = str(exc).strip("'\"")
        return response


def _file_of_symbol(symbol: str) -> FileDescriptor:
    """The file declaring ``symbol``; a method's (``pkg.Service.Method``) is its service's."""
    try:
        return pb.POOL.FindFileContainingSymbol(symbol)
    except KeyError:
        service = symbol.rpartition(".")[0]
        try:
            return pb.POOL.FindServiceByName(service).file
        except KeyError:
            raise KeyError(f"unknown symbol '{symbol}'") from None


def _with_imports(file: FileDescriptor) -> list[bytes]:
    """``file`` and every file it imports, directly or not, serialized; ``file`` first."""
    out: list[bytes] = []
    seen: set[str] = set()
    todo = [file]
    while todo:
        current = todo.pop(0)
        if current.name in seen:
            continue
        seen.add(current.name)
        proto = FileDescriptorProto()
        current.CopyToProto(proto)
        out.append(proto.SerializeToString())
        todo.extend(current.dependencies)
    return out
