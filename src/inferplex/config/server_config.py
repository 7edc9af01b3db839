"""ServerConfig: the server-wide settings, from flags or INFERPLEX_* environment variables.

Each field is one setting, in one place: its type, default and description are also its
``inferplex serve`` flag (``--field-name``; cli/options.py builds the flags from the fields),
its environment variable (``INFERPLEX_FIELD_NAME``) and its documentation. Markers say what
the type alone does not: :class:`NoFlag` (set through the environment only),
:class:`FlagChoices` (the values a ``str`` flag offers) and :class:`OneValue` (a flag that
must not be repeated).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    ByteSize,
    DirectoryPath,
    Field,
    FilePath,
    NonNegativeInt,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from inferplex.config.restricted_apis import parse_groups
from inferplex.config.s3_url import S3Location, default_cache_dir, is_s3_url
from inferplex.config.token_files import read_token_files
from inferplex.errors import ConfigError

#: instances of one model version at most (ServerConfig.max_model_instances)
DEFAULT_MAX_MODEL_INSTANCES = 64


class NoFlag:
    """Marks a field without an ``inferplex serve`` flag: set through its INFERPLEX_*
    variable only (or, for derived fields, by ServerConfig itself)."""


@dataclass(frozen=True)
class FlagChoices:
    """The values a ``str`` field's flag offers, where the field's type does not list them
    (another part checks the value, with its own message)."""

    values: tuple[str, ...]


@dataclass(frozen=True)
class OneValue:
    """A flag that may be given once: twice with different values is an error saying
    ``why``, not the last value silently (tritonserver repeats some of them)."""

    why: str


class ServerConfig(BaseSettings):
    """Validated once at start-up, then frozen. Every field can be set as INFERPLEX_<NAME>."""

    model_config = SettingsConfigDict(env_prefix="INFERPLEX_", extra="forbid", frozen=True)

    model_repository: Annotated[
        DirectoryPath,
        OneValue("inferplex serves one model repository (tritonserver serves several)"),
    ] = Field(
        description="folder holding one sub-folder per model (must exist); or s3://bucket/prefix, "
        "served from a local copy in model_repository_cache (then this is that folder)"
    )
    host: str = Field(default="127.0.0.1", description="address the HTTP and gRPC servers bind")
    http_port: int = Field(default=8000, ge=0, le=65535, description="0 picks a free port")
    grpc_port: int = Field(default=8001, ge=0, le=65535, description="0 picks a free port")
    metrics_port: int = Field(default=8002, ge=0, le=65535, description="0 picks a free port")
    enable_http: Annotated[bool, NoFlag] = Field(default=True, description="serve HTTP")
    enable_grpc: Annotated[bool, NoFlag] = Field(default=True, description="serve gRPC")
    enable_metrics: Annotated[bool, NoFlag] = Field(
        default=True, description="serve Prometheus metrics"
    )
    http_server: Literal["builtin", "uvicorn"] = Field(
        default="builtin",
        description="the HTTP/1.1 server: the built-in one, or uvicorn (the reference twin: "
        "same app, its own limits; docs/security.md)",
    )
    grpc_server: Literal["builtin", "grpcio"] = Field(
        default="builtin",
        description="the gRPC server: the built-in one, or grpc.aio (the reference twin: same "
        "methods and guard, grpc-core's HTTP/2)",
    )
    max_request_bytes: int = Field(
        default=256 * 1024 * 1024, ge=1, description="requests with a larger body get 413"
    )
    max_json_request_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=1,
        description="the JSON of an HTTP request (the whole body, or the JSON header of a "
        "binary one, once decompressed) above this gets 413: parsed, JSON takes 10-20x its "
        "size in Python objects; large tensors go in binary (Inference-Header-Content-Length)",
    )
    max_grpc_message_bytes: int = Field(
        default=256 * 1024 * 1024, ge=1, description="gRPC receive/send message size limit"
    )
    max_model_instances: int = Field(
        default=DEFAULT_MAX_MODEL_INSTANCES,
        ge=1,
        description="instances of one model version at most, however the count is set "
        "(config file, a load's config, auto-completion, the instances endpoint): above it the "
        "load or call gets 400 naming this limit (each instance is a backend session and a "
        "thread or process)",
    )
    max_load_config_bytes: int = Field(
        default=1024 * 1024,
        ge=1,
        description="a load's 'config' parameter (a JSON model configuration) above this gets "
        "413, and so does a load body holding more JSON values than half of it (its model "
        "files are base64 strings: one value each)",
    )
    max_load_request_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=1,
        description="HTTP load requests (with their 'file:' overrides, base64 model files) "
        "above this get 413; at most --max-request-bytes",
    )
    max_small_request_bytes: int = Field(
        default=16 * 1024,
        ge=1,
        description="request body (HTTP) or message (gRPC), inflated if compressed, of the "
        "calls that take none or a tiny one: health, metadata, ready, config, statistics, "
        "index, unload, instances, default version, shared memory, reflection (HTTP GET "
        "endpoints take no body at all); inference and loads get max_request_bytes / "
        "max_grpc_message_bytes. Past it: 413 / RESOURCE_EXHAUSTED, checked on the compressed "
        "size before any inflation and on the inflated size as it inflates",
    )
    inline_execution_us: float = Field(
        default=40.0,
        ge=0,
        description="a batch whose measured execution time is at most this many microseconds "
        "runs on the event loop instead of handing it to the instance's thread (a hand-over "
        "and back costs more than such a batch; CPU ONNX Runtime models with fixed shapes "
        "only); 0 = always hand over",
    )
    queue_delay: Literal["learned", "fixed"] = Field(
        default="learned",
        description="max_queue_delay_microseconds is waited for only while it gathers requests: "
        "'learned' closes batches without it once nearly no batch held more than one request "
        "(one in 16 still waits, to notice traffic growing); 'fixed' always waits it, as Triton",
    )
    intra_op_threads: int = Field(
        default=0,
        ge=0,
        description="intra-op threads per model instance (ONNX Runtime, torch); 0 divides "
        "the cores",
    )
    scheduling_policy: Literal["round_robin", "priority", "adaptive"] = Field(
        default="priority",
        description="which ready batch runs next when models compete: round_robin, priority "
        "(weighted fair shares by each model's scheduling.weight), adaptive (shares follow each "
        "model's p99 against its scheduling.slo_p99_ms)",
    )
    max_concurrent_batches: int = Field(
        default=0, ge=0, description="batch executions running at once server-wide; 0 = cores"
    )
    rate_limit_resources: dict[str, int] = Field(
        default_factory=dict,
        description='total tokens per rate-limiter resource, a JSON object such as {"R1": 4}; '
        "a resource not listed gets the largest count any model asks for",
    )
    drain_delay_s: float = Field(
        default=0.0,
        ge=0,
        description="on SIGTERM, seconds to keep serving with readiness false before the "
        "listeners close (lets load balancers stop sending first)",
    )
    exit_timeout_secs: float = Field(
        default=30.0,
        ge=0,
        description="on SIGTERM/SIGINT, seconds (after --drain-delay-s) to wait for in-flight "
        "work, requests and model loads, before exiting anyway with status 3 "
        "(tritonserver's --exit-timeout-secs)",
    )
    cache_size: int = Field(
        default=0,
        ge=0,
        description="bytes of the response cache shared by models with response_cache enabled; "
        "0 = no cache",
    )
    auto_complete_config: Annotated[bool, NoFlag] = Field(
        default=True,
        description="complete model configs from the model (an ONNX file's inputs, outputs and "
        "batching; a Python model's auto_complete_config); off: every model needs a config "
        "file that declares them (tritonserver's --disable-auto-complete-config and "
        "--strict-model-config=true set it off)",
    )
    exit_on_error: Annotated[bool, NoFlag] = Field(
        default=False,
        description="exit (status 2, naming them) when a model fails to load at start, instead "
        "of serving the others (tritonserver's --exit-on-error, whose default is on)",
    )
    # -- security (docs/security.md) ---------------------------------------------------------
    inference_token: SecretStr | None = Field(
        default=None,
        description="API token for inference endpoints (none = open); prefer the environment "
        "variable to the flag, which other users of the machine see in ps",
    )
    management_token: SecretStr | None = Field(
        default=None,
        description="API token for the management API (load/unload, shared memory); once any "
        "token is set, management needs this one; prefer the environment variable to the flag",
    )
    inference_token_file: Path | None = Field(
        default=None,
        description="file holding the inference token, read at start (one trailing newline "
        "dropped; mode 600): unlike the environment and flags, out of reach of model code "
        "once the file is gone or was a pipe (docs/security.md)",
    )
    management_token_file: Path | None = Field(
        default=None,
        description="file holding the management token, as --inference-token-file",
    )
    management_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="serve the HTTP management API on this port only (0 = any free port); "
        "unset = on the HTTP port",
    )
    management_host: str | None = Field(
        default=None, description="address of the management listener (default: --host)"
    )
    http_restricted_api: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="tritonserver's restricted APIs on HTTP: <apis>:<key>=<value> (apis "
        "comma-separated: health, metadata, inference, shared-memory, model-config, "
        "model-repository, statistics, trace, logging) answer only calls with the header "
        "<key>: <value>, besides the tokens; in the environment a JSON list",
    )
    grpc_restricted_protocol: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="as --http-restricted-api, on gRPC: the metadata key is "
        "triton-grpc-protocol-<key>, as tritonserver's",
    )
    tls_cert_file: FilePath | None = Field(
        default=None, description="PEM certificate: HTTPS + gRPC TLS"
    )
    tls_key_file: FilePath | None = Field(
        default=None, description="PEM private key of the certificate"
    )
    tls_client_ca: FilePath | None = Field(
        default=None,
        description="PEM CA bundle: clients must present a certificate it signed (mTLS)",
    )
    model_key_file: FilePath | None = Field(
        default=None,
        description="file with the AES-256 key of encrypted models (or INFERPLEX_MODEL_KEY)",
    )
    max_header_bytes: int = Field(
        default=64 * 1024,
        ge=0,
        description="largest total size of request headers / gRPC metadata; 0 = no limit",
    )
    # -- HTTP/1.1 bounds on what one client holds (docs/security.md) ------------------------
    http_header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="seconds from a request's first byte (or the TLS handshake's start) to the "
        "end of its header block; slower: 408 and the connection closed",
    )
    http_body_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="window over which a request body's rate is measured: a body bringing less "
        "than http_body_min_rate in one gets 408 and the connection closed",
    )
    http_body_min_rate: int = Field(
        default=16 * 1024,
        ge=0,
        description="bytes per second a request body must keep up (0: only a body that stops "
        "for a whole http_body_timeout_s is cut)",
    )
    http_keep_alive_s: float = Field(
        default=5.0,
        gt=0,
        description="seconds an HTTP connection may wait between requests, or before its "
        "first byte; then it is closed",
    )
    http_send_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="seconds an HTTP answer may wait on a client that does not read it; then "
        "the connection is dropped",
    )
    http_connection_buffer_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=0,
        description="request bytes one HTTP connection may buffer while its previous request "
        "runs (pipelining); past it the connection is not read until that answer is sent",
    )
    max_buffered_bytes: int = Field(
        default=1024 * 1024 * 1024,
        ge=0,
        description="request bytes held server-wide, from arrival until the answer is sent: "
        "bodies (being read, queued, or with a model), what decoding a large one allocates, "
        "and answers waiting for a client; a body that would pass it gets 503 with "
        "Retry-After (its decoding 429 / RESOURCE_EXHAUSTED); 0 = no limit",
    )
    # -- connections and long-lived streams (docs/security.md, "Connections") -----------------
    max_connections: int = Field(
        default=0,
        ge=0,
        description="connections open at once on all listeners together (HTTP, management, "
        "metrics, gRPC; TLS handshakes included); one more is closed at once (HTTP: 503 first). "
        "0 = from the file-descriptor limit: RLIMIT_NOFILE less a reserve of a quarter (at "
        "least 256) for model files, worker pipes and outbound connections, at most 65536",
    )
    max_connections_per_peer: int = Field(
        default=0,
        ge=-1,
        description="connections one client address (an IPv6 /64) may hold open on all "
        "listeners together; one more is closed at once (HTTP: 503 first). 0 = half of "
        "max_connections; -1 = no per-client cap (behind a proxy whose address every "
        "connection has)",
    )
    health_watch_max_streams: int = Field(
        default=1000,
        ge=0,
        description="gRPC grpc.health.v1.Health/Watch streams open at once, server-wide; one "
        "more is answered RESOURCE_EXHAUSTED; 0 = none allowed",
    )
    health_watch_max_per_connection: int = Field(
        default=16,
        ge=0,
        description="grpc.health.v1.Health/Watch streams open at once on one gRPC connection; "
        "one more is answered RESOURCE_EXHAUSTED",
    )
    # -- streams of responses (docs/streaming.md, docs/security.md) ----------------------------
    stream_queue_responses: int = Field(
        default=16,
        ge=1,
        description="responses of one streamed request (a decoupled model's) waiting for a "
        "slow reader; past it the model waits to send more, so a reader that does not read "
        "holds the model back instead of the server's memory",
    )
    stream_max_requests: int = Field(
        default=128,
        ge=1,
        description="requests one gRPC ModelStreamInfer stream may have in flight (sent, "
        "their final response not yet written); past it the stream's messages are not read "
        "until one ends, so HTTP/2 flow control holds the client back",
    )
    max_sequence_backlog: int = Field(
        default=1024,
        ge=0,
        description="sequences of one stateful model (sequence_batching) that may wait for a "
        "slot; a start past it is answered 503 / UNAVAILABLE (each waiting sequence holds its "
        "requests and its state until it runs or idles out)",
    )
    # -- the OpenAI-compatible API (docs/openai.md, docs/security.md) ----------------------------
    openai_max_choices: int = Field(
        default=16,
        ge=1,
        description="choices one OpenAI chat or completion request may ask for ('n'); each is "
        "one request to the model. Above it: 400 naming 'n'",
    )
    openai_max_embedding_inputs: int = Field(
        default=2048,
        ge=1,
        description="inputs one /v1/embeddings request may hold (OpenAI's own cap); above it: "
        "400 naming 'input'",
    )
    # -- HTTP/2 (the gRPC port) bounds on what one client holds (docs/security.md) ----------
    http2_max_concurrent_streams: int = Field(
        default=1024,
        ge=1,
        description="streams one gRPC connection may have open at once; more are refused with "
        "RST_STREAM REFUSED_STREAM (SETTINGS_MAX_CONCURRENT_STREAMS)",
    )
    http2_max_header_frames: int = Field(
        default=32,
        ge=1,
        description="HEADERS + CONTINUATION frames one header block may take; more: GOAWAY "
        "ENHANCE_YOUR_CALM (the CONTINUATION flood)",
    )
    http2_max_resets: int = Field(
        default=1000,
        ge=1,
        description="streams a gRPC connection may reset before they are answered, have "
        "refused or reset for its errors, in a burst (then http2_resets_per_s; each stream "
        "answered gives one back); past it: GOAWAY ENHANCE_YOUR_CALM (rapid reset)",
    )
    http2_resets_per_s: float = Field(
        default=33.0, ge=0, description="the rate at which the reset budget refills"
    )
    http2_max_control_frames: int = Field(
        default=1000,
        ge=1,
        description="frames that do no work (PING, SETTINGS, PRIORITY, WINDOW_UPDATE, empty "
        "DATA/CONTINUATION, unknown types) a gRPC connection may send in a burst (then "
        "http2_control_frames_per_s; each stream answered gives back 8, each DATA frame sent "
        "one); past it: GOAWAY ENHANCE_YOUR_CALM",
    )
    http2_control_frames_per_s: float = Field(
        default=100.0, ge=0, description="the rate at which the control-frame budget refills"
    )
    http2_preface_timeout_s: float = Field(
        default=10.0,
        ge=0,
        description="seconds a new gRPC connection has to send the HTTP/2 preface and its "
        "SETTINGS; then GOAWAY and close; 0 = no limit",
    )
    http2_idle_timeout_s: float = Field(
        default=300.0,
        ge=0,
        description="seconds a gRPC connection may sit with no call in progress and nothing "
        "received (calls whose request stopped arriving do not count); then GOAWAY (NO_ERROR) "
        "and close; 0 = no limit",
    )
    http2_keepalive_s: float = Field(
        default=0.0,
        ge=0,
        description="send a PING after this many seconds in which the client sent nothing; "
        "0 = no keepalive",
    )
    http2_keepalive_timeout_s: float = Field(
        default=20.0,
        gt=0,
        description="seconds a keepalive PING may wait for any answer; then GOAWAY and close",
    )
    http2_max_connection_age_s: float = Field(
        default=0.0,
        ge=0,
        description="seconds after which a gRPC connection is asked to go (GOAWAY NO_ERROR: "
        "clients reconnect, e.g. to a new replica); 0 = no limit",
    )
    http2_max_connection_age_grace_s: float = Field(
        default=30.0,
        ge=0,
        description="seconds calls open at that point may still take; then they are cancelled "
        "and the connection closed; 0 = as long as they take",
    )
    http2_send_timeout_s: float = Field(
        default=30.0,
        ge=0,
        description="seconds a gRPC response may wait on a closed flow-control window (or a "
        "client not reading at all) without progress; then the stream is reset (CANCEL) and "
        "its memory freed (a client not reading at all loses the connection); 0 = no limit",
    )
    http2_connection_buffer_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=0,
        description="request bytes one gRPC connection may buffer in messages not received "
        "whole (one message alone may take more, up to max_grpc_message_bytes); past it: "
        "RESOURCE_EXHAUSTED; also the answers of one connection waiting for its windows, past "
        "which its new calls get RESOURCE_EXHAUSTED. Server-wide, max_buffered_bytes bounds "
        "HTTP and gRPC together",
    )
    max_tensor_elements: int = Field(
        default=256 * 1024 * 1024, ge=1, description="most elements one input tensor may have"
    )
    max_string_bytes: int = Field(
        default=64 * 1024 * 1024, ge=1, description="longest BYTES element accepted"
    )
    allow_shared_memory: bool = Field(
        default=False,
        description="let clients register system shared-memory regions and pass tensors "
        "through them (docs/shared_memory.md); off by default: a region lets a client make the "
        "server read and write that memory",
    )
    max_shared_memory_regions: int = Field(
        default=128,
        ge=1,
        description="most system shared-memory regions one principal (token, or anonymous) may "
        "have registered at once; each holds a file descriptor. One more gets 429 / "
        "RESOURCE_EXHAUSTED",
    )
    worker_env: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="environment variables passed on to the worker processes of Python models "
        "and isolated models, beside the documented list (PATH, HOME, LANG, LC_*, TMPDIR, "
        "PYTHONPATH, CUDA_*, ...; docs/security.md); every other variable, the server's own "
        "INFERPLEX_* settings first, stays out of reach of a model's code. In the environment "
        "comma-separated (or a JSON list)",
    )
    # -- model lifecycle (docs/lifecycle.md) ------------------------------------------------
    model_control_mode: Literal["none", "poll", "explicit"] = Field(
        default="none",
        description="none: load every model at start, no load/unload API; poll: also rescan the "
        "repository every repository_poll_secs and (re)load what changed; explicit: load only "
        "load_model at start, then what the API asks",
    )
    repository_poll_secs: float = Field(
        default=15.0, gt=0, description="seconds between repository scans in poll mode"
    )
    load_model: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="models loaded at start in explicit mode ('*' = all); in the environment "
        "comma-separated (or a JSON list)",
    )
    memory_limit: ByteSize = Field(
        default=ByteSize(0),
        ge=0,
        description="bytes of host memory the loaded models may take (e.g. 2GiB); loading past "
        "it evicts idle models, least recently used first; 0 = no limit",
    )
    process_memory_limit: ByteSize = Field(
        default=ByteSize(0),
        ge=0,
        description="bytes of resident memory the whole server (its process and worker "
        "processes) keeps under when it loads a model (e.g. a container's limit less some "
        "headroom): before and after each load idle models are evicted, least recently used "
        "first, until the RSS plus the load's estimate fits; unlike --memory-limit it counts "
        "the server's own memory too; 0 = no limit",
    )
    gpu_memory_limit: Annotated[dict[NonNegativeInt, ByteSize], NoDecode] = Field(
        default_factory=dict,
        description="bytes of GPU memory the models on each GPU may take, as GPU=SIZE pairs "
        "(e.g. 0=8GiB,1=4GiB); loading past one evicts idle models on that GPU, least recently "
        "used first; no effect without a GPU",
    )
    load_nice: int = Field(
        default=19,
        ge=0,
        le=19,
        description="how many nice steps below the server the threads that read, plan and "
        "free models during a load run (Linux), so a load beside serving yields the cores to "
        "it; 0 = the server's priority",
    )
    load_share: float = Field(
        default=0.05,
        gt=0,
        le=1,
        description="while requests are in flight, the share of the time a load's steps "
        "(reading, instance creation, warm-up, freeing the replaced version) may take: each "
        "step first waits for the earlier ones' share, so a reload beside busy serving slows "
        "it less and takes longer; 1 = no waits (a load that requests wait for is never paced)",
    )
    load_on_demand: bool = Field(
        default=False, description="a request to a known but unloaded model loads it"
    )
    load_on_demand_timeout_secs: float = Field(
        default=60.0, gt=0, description="how long a request waits for its model's on-demand load"
    )
    idle_unload_secs: float = Field(
        default=0.0,
        ge=0,
        description="unload models without requests for this long (scale to zero); 0 = never",
    )
    # -- model mesh (docs/mesh.md) ------------------------------------------------------------
    mesh_replicas: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="the names of every replica of a model mesh, this one included (e.g. the "
        "StatefulSet's pod names): a consistent-hash ring over them says which models each "
        "replica owns; at start a replica loads only the models it owns and loads others on "
        "demand (needs load_on_demand); empty = no mesh. Comma-separated (or a JSON list in "
        "the environment)",
    )
    mesh_members: str = Field(
        default="",
        description="where the mesh's replica names are read while it runs, in place of "
        "mesh_replicas: file:PATH (one name a line, read again when it changes; a mounted "
        "ConfigMap) or dns:TEMPLATE:max=N (a StatefulSet's pods, e.g. "
        "dns:inferplex-mesh-{i}.inferplex-mesh:max=16: indices 0 to the highest that "
        "resolves). On a change the replica loads the models it newly owns; empty = the "
        "fixed mesh_replicas",
    )
    mesh_refresh_secs: float = Field(
        default=5.0,
        gt=0,
        description="how often mesh_members is read again (a file: its mtime and size)",
    )
    mesh_self: str = Field(
        default="",
        description="this replica's name among mesh_replicas (on Kubernetes the pod's name)",
    )
    mesh_copies: int = Field(
        default=1,
        ge=1,
        description="how many replicas own each model (a model's config parameter mesh_copies "
        "overrides); nginx spreads a model's requests over its owners",
    )
    # -- remote repositories, resilience (docs/routing.md) ---------------------------------
    model_repository_url: Annotated[str, NoFlag] = Field(
        default="",
        description="s3://bucket/prefix the repository is synced from (set from "
        "model_repository when that is an s3:// URL)",
    )
    model_repository_cache: Path | None = Field(
        default=None,
        description="local copy of an s3:// repository (default ~/.cache/inferplex/s3/...)",
    )
    s3_endpoint_url: str = Field(
        default="", description="S3-compatible endpoint (MinIO, Ceph, ...); empty = AWS"
    )
    routing_header: str = Field(
        default="",
        description="HTTP header (over gRPC: metadata key) whose value becomes the request "
        "parameter routing_key (sticky routes), e.g. x-user-id; empty = none",
    )
    breaker_failures: int = Field(
        default=0,
        ge=0,
        description="consecutive execution failures that open a model's circuit breaker (model "
        "parameter breaker_failures overrides); 0 = no breaker",
    )
    breaker_cooldown_s: float = Field(
        default=10.0, ge=0, description="seconds an open breaker fast-fails before a probe"
    )
    request_timeout_ms: float = Field(
        default=0.0,
        ge=0,
        description="answer 504 to requests not answered in time (model parameter "
        "request_timeout_ms overrides); 0 = no timeout",
    )
    # a str checked by configure_logging, so that INFERPLEX_LOG_LEVEL gets its message too
    log_level: Annotated[str, FlagChoices(("debug", "info", "warning", "error"))] = Field(
        default="info", description="debug, info, warning or error"
    )
    log_format: Annotated[
        Literal["plain", "json", "iso8601"],
        FlagChoices(("plain", "json", "iso8601", "default")),
    ] = Field(
        default="plain",
        description="log lines as plain text, one JSON object per line, or plain text whose "
        "time is ISO 8601 in UTC (tritonserver's spellings: default = plain, ISO8601)",
    )
    log_file: Path | None = Field(
        default=None,
        description="append the log to this file (worker processes' lines too) instead of "
        "writing it to stderr",
    )
    trace_rate: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="share of requests traced with OpenTelemetry (0 = tracing off; when on, a "
        "client's W3C traceparent sampling decision is followed); needs the 'tracing' extra",
    )
    trace_exporter: Literal["otlp", "console"] = Field(
        default="otlp", description="where spans go: OTLP over HTTP, or the console"
    )
    trace_endpoint: str = Field(
        default="",
        description="OTLP/HTTP traces URL (empty: the exporter's default, "
        "http://localhost:4318/v1/traces, or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)",
    )
    metrics_interval_s: float = Field(
        default=1.0,
        gt=0,
        description="seconds between the sampler's readings: the window of the CPU "
        "utilisation and busy-ratio gauges of /metrics and of the dashboard's points "
        "(tritonserver's --metrics-interval-ms)",
    )
    gpu_metrics: Annotated[bool, NoFlag] = Field(
        default=True,
        description="export the nv_gpu_* metrics (and show the GPUs on the dashboard) when NVML "
        "sees a GPU; off: NVML is never opened (tritonserver's --allow-gpu-metrics=false)",
    )
    server_name: Annotated[str, NoFlag] = Field(
        default="inferplex",
        description="the name server metadata answers with (tritonserver's --id)",
    )
    strict_readiness: Annotated[bool, NoFlag] = Field(
        default=False,
        description="readiness (/v2/health/ready, ServerReady) also needs every model the "
        "server was asked to load to be READY: one loading or whose load failed makes the "
        "server not ready (tritonserver's --strict-readiness, whose default is on); off: ready "
        "once started, models answer their own readiness",
    )
    model_config_name: str = Field(
        default="",
        description="read each model's configs/NAME.pbtxt instead of its config file where "
        "it has one (as tritonserver's --model-config-name); empty = the config file",
    )

    @field_validator("log_format", mode="before")
    @classmethod
    def _triton_log_format(cls, value: Any) -> Any:
        """tritonserver's --log-format values: ``default`` (plain) and ``ISO8601``."""
        return {"default": "plain", "ISO8601": "iso8601"}.get(value, value)

    @field_validator("model_config_name")
    @classmethod
    def _config_name(cls, value: str) -> str:
        """A file name under configs/, as tritonserver takes it: no path, no space."""
        if value and (not re.fullmatch(r"[^\s/\\]+", value) or value in (".", "..")):
            raise ValueError(f"{value!r} is not a config name such as h100 (configs/h100.pbtxt)")
        return value

    @field_validator("load_model", mode="before")
    @classmethod
    def _model_names(cls, value: Any) -> Any:
        """``a,b`` (environment; a JSON list too) -> ("a", "b")."""
        if not isinstance(value, str):
            return value
        if value.lstrip().startswith("["):
            return json.loads(value)
        return tuple(filter(None, (name.strip() for name in value.split(","))))

    @field_validator("http_restricted_api", "grpc_restricted_protocol", mode="before")
    @classmethod
    def _restricted_groups(cls, value: Any, info: ValidationInfo) -> Any:
        """One string (environment: a JSON list) or several; each a well-formed group."""
        if isinstance(value, str):
            value = json.loads(value) if value.lstrip().startswith("[") else [value]
        parse_groups("--" + (info.field_name or "").replace("_", "-"), value)
        return tuple(value)

    @field_validator("mesh_replicas", mode="before")
    @classmethod
    def _replica_names(cls, value: Any) -> Any:
        """``a,b`` (flag, repeated flags or environment; a JSON list too) -> ("a", "b")."""
        if isinstance(value, str):
            value = json.loads(value) if value.lstrip().startswith("[") else [value]
        if isinstance(value, (list, tuple)):
            return tuple(n.strip() for item in value for n in str(item).split(",") if n.strip())
        return value

    @field_validator("worker_env", mode="before")
    @classmethod
    def _variable_names(cls, value: Any) -> Any:
        """``A,B`` (environment; a JSON list too) -> ("A", "B"); each a variable's name, and
        none of the server's own (INFERPLEX_*: tokens, the model key)."""
        if isinstance(value, str):
            value = (
                json.loads(value)
                if value.lstrip().startswith("[")
                else tuple(filter(None, (name.strip() for name in value.split(","))))
            )
        for name in value if isinstance(value, (list, tuple)) else ():
            if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"{name!r} is not an environment variable name such as HF_HOME")
            if name.upper().startswith("INFERPLEX_"):
                raise ValueError(
                    f"{name}: the server's own settings (INFERPLEX_*) are never passed to workers"
                )
        return value

    @field_validator("gpu_memory_limit", mode="before")
    @classmethod
    def _device_sizes(cls, value: Any) -> Any:
        """``0=8GiB,1=4GiB`` (flag or environment; a JSON object too) -> {"0": "8GiB",
        "1": "4GiB"}; pydantic then checks each GPU number and size."""
        if not isinstance(value, str):
            return value
        if value.lstrip().startswith("{"):
            return json.loads(value)
        sizes: dict[str, str] = {}
        for pair in filter(None, (p.strip() for p in value.split(","))):
            device, equals, size = (part.strip() for part in pair.partition("="))
            if not equals or not device or not size:
                raise ValueError(f"'{pair}' is not GPU=SIZE (expected e.g. 0=8GiB,1=4GiB)")
            if device in sizes:
                raise ValueError(f"GPU {device} is given twice")
            sizes[device] = size
        return sizes

    @model_validator(mode="before")
    @classmethod
    def _token_files(cls, data: Any) -> Any:
        """Tokens given as files are read now (config/token_files.py)."""
        return read_token_files(data) if isinstance(data, dict) else data

    @model_validator(mode="before")
    @classmethod
    def _remote_repository(cls, data: Any) -> Any:
        """An s3:// model_repository is served from its local copy: model_repository becomes
        that folder (created here so it validates) and model_repository_url keeps the URL."""
        if not isinstance(data, dict) or not is_s3_url(data.get("model_repository")):
            return data
        url = data["model_repository"]
        try:
            S3Location.parse(url)
        except ConfigError as exc:
            raise ValueError(exc.message) from None
        cache = Path(data.get("model_repository_cache") or default_cache_dir(url))
        cache.mkdir(parents=True, exist_ok=True)
        return {**data, "model_repository": cache, "model_repository_url": url}
