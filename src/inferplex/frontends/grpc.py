"""The V2 gRPC frontend: ``inference.GRPCInferenceService`` on grpc.aio.

Generic method handlers (no generated servicer) with each message class's own
``FromString`` / ``SerializeToString`` (ModelInfer: the codec's own wire functions), on the
event loop the HTTP server runs on: the cheapest Python gRPC stack measured (DESIGN.md).
``python -m bench.grpc_floor`` sets it beside a bare grpc.aio server; HTTP/2 window and frame
options, ``grpc.optimization_target``, GRPC_POLL_STRATEGY=poll and the sync ``grpc.server``
handing calls to the loop were measured side by side as well: none was cheaper (issue 2).
Every RPC is translate -> engine -> translate; errors go through THE table in
protocol/v2/errors.py.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import message_factory

from inferplex.errors import InferplexError, UnsupportedError
from inferplex.protocol.v2 import generated as pb
from inferplex.protocol.v2 import grpc_codec as codec
from inferplex.protocol.v2.errors import GRPC_STATUS
from inferplex.security.limits import RequestLimits
from inferplex.shm import CUDA_UNSUPPORTED, cuda_status

if TYPE_CHECKING:
    from inferplex.config.server_config import ServerConfig
    from inferplex.core.engine import InferenceEngine

logger = logging.getLogger(__name__)

Unary = Callable[[Any], Awaitable[Any]]


class GrpcFrontend:
    """Serves the engine over gRPC. ``await start()`` binds and returns the port."""

    def __init__(
        self,
        engine: InferenceEngine,
        config: ServerConfig,
        *,
        interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
        credentials: grpc.ServerCredentials | None = None,
    ) -> None:
        """``interceptors`` see every call first (security); ``credentials`` turn on TLS."""
        self.engine = engine
        self.config = config
        self._interceptors = list(interceptors)
        self._credentials = credentials
        self._limits = RequestLimits(config.max_tensor_elements, config.max_string_bytes)
        self._server: grpc.aio.Server | None = None

    async def start(self) -> int:
        """Bind ``config.host:config.grpc_port`` (0 picks a free port) and start serving."""
        limit = self.config.max_grpc_message_bytes
        headers = self.config.max_header_bytes
        server = grpc.aio.server(
            options=[
                ("grpc.max_send_message_length", limit),
                ("grpc.max_receive_message_length", limit),
                # gRPC sets SO_REUSEPORT by default, which lets a second server bind a port
                # that is in use without an error; a clash must fail loudly instead.
                ("grpc.so_reuseport", 0),
                # request metadata (headers) above the limit are refused by gRPC's core
                *([("grpc.max_metadata_size", headers)] if headers else []),
            ],
            interceptors=self._interceptors or None,
        )
        server.add_generic_rpc_handlers((self._service_handler(),))
        host = self.config.host
        address = f"[{host}]" if ":" in host else host
        target = f"{address}:{self.config.grpc_port}"
        if self._credentials is not None:
            port = server.add_secure_port(target, self._credentials)
        else:
            port = server.add_insecure_port(target)
        if port == 0:
            raise OSError(f"gRPC could not bind {address}:{self.config.grpc_port}")
        await server.start()
        self._server = server
        logger.info("gRPC listening on %s:%d", address, port)
        return port

    async def stop(self, grace: float) -> None:
        """Stop taking calls; in-flight calls get ``grace`` seconds to finish."""
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None

    # -- wiring -------------------------------------------------------------------------
    def _service_handler(self) -> grpc.GenericRpcHandler:
        unary: dict[str, Unary] = {
            "ServerLive": self._server_live,
            "ServerReady": self._server_ready,
            "ModelReady": self._model_ready,
            "ServerMetadata": self._server_metadata,
            "ModelMetadata": self._model_metadata,
            "ModelInfer": self._model_infer,
            "ModelConfig": self._model_config,
            "ModelStatistics": self._model_statistics,
            "RepositoryIndex": self._repository_index,
            "RepositoryModelLoad": self._model_load,
            "RepositoryModelUnload": self._model_unload,
            "SystemSharedMemoryStatus": self._shm_status,
            "SystemSharedMemoryRegister": self._shm_register,
            "SystemSharedMemoryUnregister": self._shm_unregister,
            "CudaSharedMemoryStatus": self._cuda_shm_status,
            "CudaSharedMemoryRegister": self._cuda_shm_register,
            "CudaSharedMemoryUnregister": self._cuda_shm_unregister,
        }
        handlers: dict[str, grpc.RpcMethodHandler] = {}
        # Message classes come from the service descriptor, so they cannot drift from it.
        for method in pb.SERVICE.methods:
            request_class = message_factory.GetMessageClass(method.input_type)
            response_class = message_factory.GetMessageClass(method.output_type)
            codecs = {
                "request_deserializer": request_class.FromString,
                "response_serializer": response_class.SerializeToString,
            }
            if method.name == "ModelInfer":  # the codec reads and writes its wire format
                codecs = {"request_deserializer": None, "response_serializer": None}
            if method.name == "ModelStreamInfer":
                handlers[method.name] = grpc.stream_stream_rpc_method_handler(
                    self._model_stream_infer, **codecs
                )
            else:
                handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                    _guarded(method.name, unary[method.name]), **codecs
                )
        return grpc.method_handlers_generic_handler(pb.SERVICE_NAME, handlers)

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

    async def _model_infer(self, request: bytes) -> bytes:
        shm = self.engine.shared_memory
        decoded = codec.decode_infer_request_bytes(request, shm)
        self._limits.check(decoded)
        response = await self.engine.infer(decoded)
        return codec.encode_infer_response_bytes(response, decoded, shm)

    # -- system shared memory (docs/shared_memory.md) ----------------------------------------
    async def _shm_status(self, request: Any) -> Any:
        return codec.encode_shm_status(self.engine.shared_memory.status(request.name))

    async def _shm_register(self, request: Any) -> Any:
        self.engine.shared_memory.register(
            request.name, request.key, request.offset, request.byte_size
        )
        return pb.SystemSharedMemoryRegisterResponse()

    async def _shm_unregister(self, request: Any) -> Any:
        self.engine.shared_memory.unregister(request.name)
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

    async def _model_stream_infer(
        self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> None:
        error = UnsupportedError(
            "ModelStreamInfer: streaming inference is not available yet; use ModelInfer"
        )
        await context.abort(GRPC_STATUS[error.code], error.message)


def _repository_parameters(parameters: Any) -> dict[str, Any]:
    """A load/unload request's ``map<string, ModelRepositoryParameter>`` as plain values."""
    values: dict[str, Any] = {}
    for key, parameter in parameters.items():
        choice = parameter.WhichOneof("parameter_choice")
        values[key] = None if choice is None else getattr(parameter, choice)
    return values


def _guarded(name: str, rpc: Unary) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]:
    """Wrap an RPC so that errors become gRPC statuses: InferplexError through THE table,
    anything else INTERNAL (logged with its traceback, since it is a bug)."""

    async def handler(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await rpc(request)
        except InferplexError as exc:
            code, message = GRPC_STATUS[exc.code], exc.message
        except Exception as exc:
            logger.exception("gRPC %s failed", name)
            code, message = grpc.StatusCode.INTERNAL, f"{name} failed: {exc}"
        # Outside the try: abort() raises to end the call, which must not be caught above.
        await context.abort(code, message)

    return handler
