"""The composition root: config -> engine -> frontends, on one uvloop event loop.

``Server`` runs in the caller's event loop (``await server.start()``) or, for embedding and
tests, in a background thread of its own (``with Server(config) as server: ...``).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import uvloop
from pydantic import SecretStr

from inferplex.backends.worker.worker_process import pass_to_workers
from inferplex.config.readers import use_config_name
from inferplex.config.server_config import ServerConfig
from inferplex.core.registry import ModelRegistry
from inferplex.core.streaming import StreamedResponse
from inferplex.dataplane import DataPlane
from inferplex.engine.inference import InferenceEngine
from inferplex.errors import InferplexError
from inferplex.frontends.grpc import GrpcFrontend
from inferplex.frontends.http import create_http_app
from inferplex.lifecycle.exit_deadline import ExitDeadline
from inferplex.lifecycle.manager import LifecycleManager
from inferplex.mesh.replica import Rebalancer, members
from inferplex.metrics.app import MetricsApp, create_metrics_app
from inferplex.repository.local import list_models
from inferplex.repository.s3 import S3Repository
from inferplex.resilience.guard import GuardDefaults, ModelGuards
from inferplex.routing.table import RouteTable
from inferplex.security.access import Access, Surface
from inferplex.security.encryption import load_key, use_key
from inferplex.security.restricted import Restrictions
from inferplex.security.tokens import TokenAuth
from inferplex.shm import SharedMemoryRegistry
from inferplex.transport.connections import ConnectionGate
from inferplex.transport.http_limits import ByteBudget
from inferplex.transport.interface import HttpServing, NativeApp
from inferplex.transport.listener import ListenerSpec
from inferplex.transport.servers import GRPC_SERVERS, HTTP_SERVERS
from inferplex.transport.sockets import address, bind
from inferplex.types import InferenceRequest, InferenceResponse

logger = logging.getLogger(__name__)


def _secret(value: SecretStr | None) -> str | None:
    return value.get_secret_value() if value is not None else None


def mesh_rebalancer(engine: InferenceEngine) -> Rebalancer:
    """A mesh replica's watch on ``--mesh-members``: loads what a ring change gives it."""
    loader = engine.lifecycle.loader

    def names() -> list[str]:
        return [path.name for path in list_models(loader.repository)]

    return Rebalancer(engine.config, names, loader.load)


def model_folders(engine: InferenceEngine) -> Callable[[str], Path | None]:
    """Where the files a model's configuration names are (an output's label_filename):
    the folder of a load request's file overrides while those serve, else the model's
    folder in the repository."""
    loader = engine.lifecycle.loader

    def folder(name: str) -> Path | None:
        try:
            return loader.overrides.source(name) or loader.model_dir(name)
        except InferplexError:  # a name no folder can have
            return None

    return folder


def build_engine(config: ServerConfig) -> InferenceEngine:
    """The engine of ``config`` with its collaborators: the registry and the lifecycle that
    loads into it, circuit breakers and timeouts, the route table, the shared-memory regions
    and, for an ``s3://`` repository, the bucket synced into the repository folder."""
    registry = ModelRegistry()
    use_config_name(config.model_config_name)  # every config read from here on
    remote = (
        S3Repository(config.model_repository_url, config.model_repository, config.s3_endpoint_url)
        if config.model_repository_url
        else None
    )
    return InferenceEngine(
        config,
        registry=registry,
        lifecycle=LifecycleManager(config, registry),
        guards=ModelGuards(
            GuardDefaults(
                config.breaker_failures, config.breaker_cooldown_s, config.request_timeout_ms
            )
        ),
        routes=RouteTable,
        shared_memory=SharedMemoryRegistry(
            config.allow_shared_memory,
            max_regions=config.max_shared_memory_regions,
            # a tensor read from a region is a copy, bounded as a request body is
            max_read_bytes=config.max_request_bytes,
        ),
        remote=remote,
    )


class Server:
    """An inferplex server: the engine plus HTTP, gRPC and metrics endpoints."""

    def __init__(self, config: ServerConfig, span_exporter: Any = None) -> None:
        """``span_exporter`` (an OpenTelemetry SpanExporter) replaces the configured trace
        exporter, for embedding; tracing still follows ``config.trace_rate``."""
        self.config = config
        self._span_exporter = span_exporter
        self._tracing: Any = None
        self.engine = build_engine(config)
        #: request bytes held by all HTTP and gRPC listeners together, and large requests'
        #: decoding (security/charges.py)
        #: every listener's addresses, TLS and limits, read from ``config`` once
        self.listener = ListenerSpec.from_config(config)
        self._http_budget = ByteBudget(self.listener.max_buffered_bytes)
        #: the one door to the engine for inference, over REST, gRPC and ``infer``
        self.plane = DataPlane.from_config(
            self.engine, config, model_folders(self.engine), self._http_budget
        )
        self.http_port = 0
        self.grpc_port = 0
        self.metrics_port = 0
        self.management_port = 0
        self._http_servers: list[HttpServing] = []
        #: connections of every listener, server-wide and per client address
        self._gate = ConnectionGate(
            self.listener.max_connections, self.listener.max_connections_per_peer
        )
        self._grpc: GrpcFrontend | None = None
        self._metrics: MetricsApp | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._mesh: Rebalancer | None = None
        self._thread: threading.Thread | None = None

    # -- async life cycle -------------------------------------------------------------------
    async def start(self) -> None:
        """Load the models, then open the endpoints. Returns once everything listens.
        Every address is bound first: one that is taken fails the start before any load."""
        self._loop = asyncio.get_running_loop()
        config = self.config
        sockets = self._bind()
        try:
            use_key(load_key(key_file=config.model_key_file))
            pass_to_workers(config.worker_env)
            # read before the start's own read: a change in between is then loaded again
            # (a no-op) rather than missed
            ring = await asyncio.to_thread(members, config) if config.mesh_members else ()
            await self.engine.start(ready=False)
            await self._serve(sockets)
        except BaseException:
            for sock in sockets.values():
                sock.close()
            raise
        if config.mesh_members:  # the ring follows the members (docs/mesh.md, "Scaling")
            self._mesh = mesh_rebalancer(self.engine)
            self._mesh.start(ring)
        self.engine.set_ready()
        logger.info(
            "inferplex listening on %s: HTTP %s, gRPC %s, metrics %s",
            config.host,
            self.http_port or "off",
            self.grpc_port or "off",
            self.metrics_port or "off",
        )

    def _bind(self) -> dict[str, socket.socket]:
        """The sockets of the enabled endpoints by name, bound, not yet listening."""
        wanted = self.listener.addresses.wanted()
        sockets: dict[str, socket.socket] = {}
        try:
            for what, where in wanted.items():
                if where is not None:
                    sockets[what] = bind(*where, what)
        except BaseException:
            for sock in sockets.values():
                sock.close()
            raise
        return sockets

    async def _serve(self, sockets: dict[str, socket.socket]) -> None:
        """Start serving the endpoints on their bound ``sockets``."""
        config = self.config
        self._start_tracing()
        auth = TokenAuth(_secret(config.inference_token), _secret(config.management_token))
        scheme = "https" if self.listener.tls is not None else "http"
        management = ""  # where the management API listens when it has its own port
        http_sock = sockets.get("HTTP")
        if http_sock is not None:
            management_sock = sockets.get("management")
            if management_sock is not None:
                management = f"{scheme}://{address(management_sock)}"
            surface: Surface = "inference" if management_sock else "all"
            restricted = Restrictions.of(config.http_restricted_api)
            self.http_port = await self._serve_http(
                Access(auth, surface=surface, elsewhere=management, restrictions=restricted),
                http_sock,
            )
            if management_sock is not None:
                elsewhere = f"{scheme}://{address(http_sock)}"
                self.management_port = await self._serve_http(
                    Access(
                        auth, surface="management", elsewhere=elsewhere, restrictions=restricted
                    ),
                    management_sock,
                )
        grpc_sock = sockets.get("gRPC")
        if grpc_sock is not None:
            access = Access(
                auth,
                surface="inference" if management else "all",
                elsewhere=f"the HTTP management listener {management}",
                restrictions=Restrictions.of(config.grpc_restricted_protocol, grpc=True),
            )
            self._grpc = GrpcFrontend(
                self.engine,
                config,
                guard=access.grpc_guard if access.enabled else None,
                spec=self.listener,
                server=GRPC_SERVERS[config.grpc_server],
                budget=self._http_budget,  # one bound on buffered request bytes for both
                plane=self.plane,
                gate=self._gate,
            )
            self.grpc_port = await self._grpc.start(grpc_sock)
        metrics_sock = sockets.get("metrics")
        if metrics_sock is not None:
            self._metrics = create_metrics_app(
                self.engine.snapshot,
                listeners=self._http_servers,
                http2=self._grpc.counters if self._grpc is not None else None,
                activity=self.engine.activity,
                interval=self.config.metrics_interval_s,
                gpu_metrics=self.config.gpu_metrics,
            )
            self._metrics.sampler.start(asyncio.get_running_loop())
            self.metrics_port = await self._serve_app(self._metrics, metrics_sock)

    def _start_tracing(self) -> None:
        """Switch OpenTelemetry tracing on when the config asks for it (the optional
        'tracing' extra is imported only then)."""
        config = self.config
        if config.trace_rate <= 0:
            return
        try:
            from inferplex.tracing.setup import configure_tracing
        except ImportError as exc:
            raise RuntimeError(
                f"trace_rate {config.trace_rate} needs OpenTelemetry: install the 'tracing' "
                f"extra (pip install 'inferplex[tracing]'): {exc}"
            ) from exc
        self._tracing = configure_tracing(
            config.trace_rate,
            config.trace_exporter,
            config.trace_endpoint,
            config.server_name,
            self._span_exporter,
        )
        self.plane.tracer = self._tracing.calls()  # every protocol's calls get their spans

    async def _serve_http(self, access: Access, sock: socket.socket) -> int:
        """Serve the V2 REST app on ``sock`` with the listener's ``access`` rules."""
        app = create_http_app(self.engine, self.config, access, self.plane, self._http_budget)
        return await self._serve_app(app, sock)

    async def _serve_app(self, app: NativeApp, sock: socket.socket, asgi: Any = None) -> int:
        """Serve ``app`` on ``sock`` with the ``--http-server`` chosen; ``asgi``, an ASGI
        middleware around it, answers instead (the app still admits requests before their
        body is read)."""
        build = HTTP_SERVERS[self.config.http_server]
        server = build(app, self.listener, asgi=asgi, budget=self._http_budget, gate=self._gate)
        await server.start(sock)
        self._http_servers.append(server)
        return int(sock.getsockname()[1])

    async def stop(self, grace: float = 30.0) -> None:
        """Graceful: readiness goes false, in-flight requests finish, then everything stops."""
        logger.info("inferplex shutting down")
        self.engine.begin_shutdown()
        if self.config.drain_delay_s > 0:
            # readiness is false but every listener still serves, so load balancers move
            # traffic away before connections are refused
            await asyncio.sleep(self.config.drain_delay_s)
        pending: list[Any] = [server.stop(grace) for server in self._http_servers]
        if self._grpc is not None:
            pending.append(self._grpc.stop(grace))
        await asyncio.gather(*pending, return_exceptions=True)
        self._http_servers.clear()
        if self._mesh is not None:
            await self._mesh.stop()
        if self._metrics is not None:
            self._metrics.close()
        await self.engine.stop(grace)
        if self._tracing is not None:
            self._tracing.shutdown()

    async def serve_forever(self) -> None:
        """Start, run until SIGINT/SIGTERM, then stop gracefully (the CLI's entry)."""
        stop = asyncio.Event()
        config = self.config
        # from the signal on, nothing may hold the exit past its deadline: a load in
        # progress (at start too) runs in threads and processes that cannot be interrupted
        deadline = ExitDeadline(config.drain_delay_s + config.exit_timeout_secs)

        def on_signal() -> None:
            deadline.arm()
            stop.set()

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal)
        await self.start()
        await stop.wait()
        await self.stop(config.exit_timeout_secs)

    # -- embedding: a server on a background thread ------------------------------------------
    def start_in_thread(self, timeout: float = 120.0) -> Server:
        """Run the server on a uvloop loop in a daemon thread; return once it is serving."""
        loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="inferplex", daemon=True)
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self.start(), loop).result(timeout)
        except BaseException:
            self.stop_thread()
            raise
        return self

    def stop_thread(self, timeout: float = 60.0) -> None:
        """Stop a server started with ``start_in_thread`` and end its thread."""
        loop = self._loop_for_thread()
        try:
            asyncio.run_coroutine_threadsafe(self.stop(), loop).result(timeout)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(timeout)
            loop.close()

    def infer(self, request: InferenceRequest, timeout: float | None = None) -> InferenceResponse:
        """Run one inference without sockets (blocking; for a server started in a thread),
        through the data plane as a request over HTTP or gRPC."""
        future: Future[InferenceResponse] = asyncio.run_coroutine_threadsafe(
            self.plane.infer_local(request), self._loop_for_thread()
        )
        return future.result(timeout)

    def stream(
        self, request: InferenceRequest, timeout: float | None = None
    ) -> Iterator[StreamedResponse]:
        """The responses to one request as its model sends them (a decoupled model's 0..N,
        an ordinary model's one), without sockets (blocking; for a server started in a
        thread). Each is taken from the model when asked for, so a slow reader holds the
        model back; leaving the loop early cancels the request in the model. ``timeout``
        bounds the wait for each response."""
        loop = self._loop_for_thread()
        responses = asyncio.run_coroutine_threadsafe(self.plane.stream_local(request), loop)
        stream = responses.result(timeout)
        try:
            while True:
                step = asyncio.run_coroutine_threadsafe(anext(stream, None), loop)
                item = step.result(timeout)
                if item is None:
                    return
                yield item
        finally:
            loop.call_soon_threadsafe(stream.close)

    def _loop_for_thread(self) -> asyncio.AbstractEventLoop:
        if self._loop is None or self._thread is None:
            raise RuntimeError("the server was not started with start_in_thread()")
        return self._loop

    def __enter__(self) -> Server:
        return self.start_in_thread()

    def __exit__(self, *exc_info: object) -> None:
        self.stop_thread()
