"""The V2 gRPC frontend: ``inference.GRPCInferenceService`` on the built-in gRPC server
(transport/grpc_server.py), on the event loop the HTTP server runs on.

Each method's message classes come from the service descriptor (ModelInfer: the codec reads
and writes its wire format itself). ModelInfer and ModelStreamInfer are codecs on the data plane
(``protocol/v2/codecs.py``); every other RPC is translate -> engine -> translate; errors go
through THE table in protocol/v2/errors.py.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from google.protobuf import message_factory

from inferplex.dataplane import CallMeta, DataPlane
from inferplex.errors import UnsupportedError
from inferplex.frontends.grpc_services import health_methods, reflection_methods
from inferplex.frontends.grpc_stream import StreamInfer, call_trace
from inferplex.protocol.v2 import generated as pb
from inferplex.protocol.v2 import grpc_messages as codec
from inferplex.protocol.v2.codecs import GRPC
from inferplex.shm import CUDA_UNSUPPORTED, cuda_status
from inferplex.tracing.context import TRACING
from inferplex.transport.connections import ConnectionGate
from inferplex.transport.grpc_server import Call, GrpcServer, Guard, Handler, Method
from inferplex.transport.http2_limits import Http2Counters
from inferplex.transport.http_limits import ByteBudget
from inferplex.transport.interface import GrpcServerFactory, GrpcServing
from inferplex.transport.listener import ListenerSpec
from inferplex.transport.sockets import address, bind

if TYPE_CHECKING:
    from inferplex.config.server_config import ServerConfig
    from inferplex.engine.inference import InferenceEngine

logger = logging.getLogger(__name__)

Unary = Callable[[Any], Awaitable[Any]]


class GrpcFrontend:
    """Serves the engine over gRPC. ``await start()`` binds and returns the port."""

    def __init__(
        self,
        engine: InferenceEngine,
        config: ServerConfig,
        *,
        guard: Guard | None = None,
        spec: ListenerSpec | None = None,
        budget: ByteBudget | None = None,
        server: GrpcServerFactory = GrpcServer,
        plane: DataPlane | None = None,
        gate: ConnectionGate | None = None,
    ) -> None:
        """``guard`` sees every call first (security); ``spec``: the listener's TLS and
        limits (default: ``config``'s); ``budget`` bounds request bytes buffered server-wide
        (the one the HTTP listeners share; default: one of max_buffered_bytes); ``server``
        builds the server of the method table (default: the built-in one;
        ``--grpc-server``: transport/servers.py); inference goes through ``plane`` (default:
        one of its own for ``engine`` and ``config``); ``gate`` counts the connections of
        every listener (default: none of its own)."""
        self.engine = engine
        self.config = config
        # the one door to the engine for inference (limits, shared memory, routing key)
        self._plane = plane if plane is not None else DataPlane.from_config(engine, config)
        self._stream = StreamInfer(self._plane, engine.shared_memory, config.stream_max_requests)
        self._server: GrpcServing = server(
            self._methods(),
            spec if spec is not None else ListenerSpec.from_config(config),
            guard=guard,
            budget=budget if budget is not None else ByteBudget(config.max_buffered_bytes),
            gate=gate,
        )

    async def start(self, sock: socket.socket | None = None) -> int:
        """Serve on ``sock`` (bound; ``transport.sockets.bind``), by default on
        ``config.host:config.grpc_port`` (0 picks a free port); returns the port."""
        if sock is None:
            sock = bind(self.config.host, self.config.grpc_port, "gRPC")
        where = address(sock)  # a server that binds its own socket closes this one
        port = await self._server.start(sock)
        logger.info("gRPC listening on %s", where)
        return port

    async def stop(self, grace: float) -> None:
        """Stop taking calls; in-flight calls get ``grace`` seconds to finish."""
        await self._server.stop(grace)

    @property
    def counters(self) -> Http2Counters:
        """The transport's counters: connections, buffered bytes, limits exceeded."""
        return self._server.counters

    # -- wiring -------------------------------------------------------------------------
    def _methods(self) -> dict[str, Method]:
        unary: dict[str, Unary] = {
            "ServerLive": self._server_live,
            "ServerReady": self._server_ready,
            "ModelReady": self._model_ready,
            "ServerMetadata": self._server_metadata,
            "ModelMetadata": self._model_metadata,
            "ModelConfig": self._model_config,
            "ModelStatistics": self._model_statistics,
            "RepositoryIndex": self._repository_index,
            "RepositoryModelLoad": self._model_load,
            "RepositoryModelUnload": self._model_unload,
            "CudaSharedMemoryStatus": self._cuda_shm_status,
            "CudaSharedMemoryRegister": self._cuda_shm_register,
            "CudaSharedMemoryUnregister": self._cuda_shm_unregister,
        }
        # the RPCs that act on the caller's own regions: they need the call (its identity)
        with_call: dict[str, Handler] = {
            "SystemSharedMemoryStatus": self._shm_status,
            "SystemSharedMemoryRegister": self._shm_register,
            "SystemSharedMemoryUnregister": self._shm_unregister,
        }
        methods: dict[str, Method] = {}
        for method in pb.SERVICE.methods:
            path = f"/{pb.SERVICE_NAME}/{method.name}"
            if method.name == "ModelInfer":  # the codec reads and writes its wire format
                methods[path] = Method(self._model_infer, _raw, _raw, large=True)
            elif method.name == "ModelStreamInfer":  # the same codec, once per message
                methods[path] = Method(self._stream.serve, _raw, _raw, streaming=True, large=True)
            else:
                request_class = message_factory.GetMessageClass(method.input_type)
                response_class = message_factory.GetMessageClass(method.output_type)
                named = with_call.get(method.name)
                methods[path] = Method(
                    named if named is not None else _without_call(unary[method.name]),
                    request_class.FromString,
                    response_class.SerializeToString,
                    # a load may carry a config and model files; every other call, a few
                    # names: --max-small-request-bytes
                    large=method.name in _LARGE_MESSAGES,
                )
        # gRPC's health and reflection services on the same port (frontends/grpc_services.py)
        methods.update(
            health_methods(
                self.engine,
                self.config.health_watch_max_streams,
                self.config.health_watch_max_per_connection,
            )
        )
        methods.update(reflection_methods(lambda: {path.split("/")[1] for path in methods}))
        return methods

    # -- RPCs -----------------------------------------------------------------------------
    async def _server_live(self, request: Any) -> Any:
        return pb.ServerLiveResponse(live=self.engine.live())

    async def _server_ready(self, request: Any) -> Any:
        return pb.ServerReadyResponse(ready=self.engine.ready())

    async def _model_ready(self, request: Any) -> Any:
        return pb.ModelReadyResponse(ready=self.engine.model_ready(request.name, request.version))

    async def _server_metadata(self, request: Any) -> Any:
        return codec.encode_server_metadata(self.engine.server_metadata())

    async def _model_metadata(self, request: Any) -> Any:
        return codec.encode_model_metadata(
            self.engine.model_metadata(request.name, request.version)
        )

    def _model_infer(self, request: bytes, call: Call) -> Awaitable[bytes]:
        """ModelInfer: the data plane's coroutine itself (no frame of the frontend's around
        it). Its deadline (``grpc-timeout``) is the server's: it cancels the call, and the
        data plane's cancellation tells the model."""
        plane = self._plane
        meta = CallMeta(  # positional: the hot path
            "",
            "",
            self.engine.shared_memory.owned_by(call.identity),  # the caller's regions
            plane.routing_value(call.metadata()) if plane.routing_metadata else None,
            None,  # the server enforces the call's deadline
            None,
            call_trace(call) if TRACING.enabled else None,
        )
        return plane.infer(GRPC, request, meta)

    # -- system shared memory (docs/shared_memory.md): the caller's own regions ---------------
    async def _shm_status(self, request: Any, call: Call) -> Any:
        regions = self.engine.shared_memory.owned_by(call.identity)
        return codec.encode_shm_status(regions.status(request.name))

    async def _shm_register(self, request: Any, call: Call) -> Any:
        regions = self.engine.shared_memory.owned_by(call.identity)
        regions.register(request.name, request.key, request.offset, request.byte_size)
        return pb.SystemSharedMemoryRegisterResponse()

    async def _shm_unregister(self, request: Any, call: Call) -> Any:
        self.engine.shared_memory.owned_by(call.identity).unregister(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    async def _cuda_shm_register(self, request: Any) -> Any:
        raise UnsupportedError(CUDA_UNSUPPORTED)

    async def _cuda_shm_status(self, request: Any) -> Any:
        cuda_status(request.name)  # none registered: all is empty, one is not found
        return pb.CudaSharedMemoryStatusResponse()

    async def _cuda_shm_unregister(self, request: Any) -> Any:
        return pb.CudaSharedMemoryUnregisterResponse()  # nothing can have been registered

    async def _model_config(self, request: Any) -> Any:
        config = self.engine.model_config(request.name, request.version)
        return codec.encode_model_config(config.to_triton_dict())

    async def _model_statistics(self, request: Any) -> Any:
        stats = self.engine.model_statistics(request.name, request.version)
        return codec.encode_model_statistics(stats)

    async def _repository_index(self, request: Any) -> Any:
        index = self.engine.repository_index(ready_only=request.ready)
        return codec.encode_repository_index(index)

    async def _model_load(self, request: Any) -> Any:
        parameters = _repository_parameters(request.parameters)
        await self.engine.load_model(request.model_name, parameters)
        return pb.RepositoryModelLoadResponse()

    async def _model_unload(self, request: Any) -> Any:
        parameters = _repository_parameters(request.parameters)
        await self.engine.unload_model(request.model_name, parameters)
        return pb.RepositoryModelUnloadResponse()


#: the unary RPCs besides ModelInfer whose requests may be large
_LARGE_MESSAGES = frozenset({"RepositoryModelLoad"})


def _repository_parameters(parameters: Any) -> dict[str, Any]:
    """A load/unload request's ``map<string, ModelRepositoryParameter>`` as plain values."""
    values: dict[str, Any] = {}
    for key, parameter in parameters.items():
        choice = parameter.WhichOneof("parameter_choice")
        values[key] = None if choice is None else getattr(parameter, choice)
    return values


def _raw(message: bytes) -> bytes:
    return message


def _without_call(rpc: Unary) -> Handler:
    """An RPC that needs only its request message, as a server method handler."""

    async def handler(request: Any, call: Call) -> Any:
        return await rpc(request)

    return handler
