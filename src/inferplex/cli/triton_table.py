"""Every flag of ``tritonserver --help`` that is not one of inferplex's own, and what it does
here (docs/triton.md has the table; the flags inferplex shares are listed there too).

A flag that sets a ``_`` key is read together with others (cli/triton_combined.py).
"""

from __future__ import annotations

from typing import Literal

import click

from inferplex.cli import triton_values
from inferplex.cli.triton_spec import Effect, TritonFlag, no_effect, setting

_THREADS = "requests are served by the event loop and each model's instances; there is no "
_SECONDS = 1000.0  # Triton's gRPC times are in milliseconds


#: Triton's older trace flags beside --trace-level, and what they take
_OLD_TRACE_FLAGS: tuple[tuple[str, Literal["int", "text"]], ...] = (
    ("count", "int"),
    ("file", "text"),
    ("log-frequency", "int"),
)


def _joined(values: tuple[str, ...]) -> str:
    return ",".join(values)


FLAGS = (
    # -- server and model repository ------------------------------------------------------
    TritonFlag("--id", "text", setting("server_name"), "the name ServerMetadata answers with"),
    TritonFlag(
        "--model-store",
        "text",
        setting("model_repository"),
        "Triton's older name of --model-repository",
    ),
    TritonFlag(
        "--strict-model-config",
        "bool",
        lambda strict: {"auto_complete_config": not strict},
        "true: every model needs a config file declaring its inputs and outputs (sets "
        "auto_complete_config off); false: configs are completed from the model, the default",
    ),
    TritonFlag(
        "--disable-auto-complete-config",
        "switch",
        lambda _: {"auto_complete_config": False},
        "configs are not completed from the model (ONNX signature, a Python model's "
        "auto_complete_config): every model needs a config file that declares them",
    ),
    TritonFlag(
        "--exit-on-error",
        "bool",
        setting("exit_on_error"),
        "true: a model that fails to load at start stops the start (exit status 2); "
        "inferplex's default, unlike Triton's, serves the models that load",
    ),
    TritonFlag(
        "--strict-readiness",
        "bool",
        setting("strict_readiness"),
        "true: ready only while every model asked for is READY (inferplex's default, unlike "
        "Triton's, is false: ready once started)",
    ),
    no_effect(
        "--model-load-thread-count",
        "int",
        "models load one after another at start, the files of the next ones read ahead "
        "meanwhile, paced beside serving (--load-share)",
    ),
    no_effect(
        "--model-load-retry-count",
        "int",
        "a failed load is not retried; it is reported with its reason (load it again, or "
        "poll mode retries when its files change)",
    ),
    no_effect(
        "--model-namespacing",
        "bool",
        "inferplex serves one repository, in which a model's name is its folder's: unique",
    ),
    no_effect("--enable-peer-access", "bool", "GPU peer access is left to CUDA's defaults"),
    # -- logging ----------------------------------------------------------------------------
    TritonFlag(
        "--log-verbose",
        "text",
        lambda level: {"log_level": "debug"} if _verbose_level(level) > 0 else {},
        "a level above 0 (or true) is --log-level debug",
    ),
    *(
        TritonFlag(
            f"--log-{level}",
            "bool",
            setting(f"_log_{level}"),
            f"false: {level} lines are left out (--log-level above {level}; Python's levels "
            "are a ladder, so the levels above stay on)",
        )
        for level in ("info", "warning", "error")
    ),
    # -- listeners --------------------------------------------------------------------------
    TritonFlag(
        "--allow-http",
        "bool",
        setting("enable_http"),
        "false: no HTTP listener (INFERPLEX_ENABLE_HTTP)",
    ),
    TritonFlag(
        "--allow-grpc",
        "bool",
        setting("enable_grpc"),
        "false: no gRPC listener (INFERPLEX_ENABLE_GRPC)",
    ),
    TritonFlag(
        "--allow-metrics",
        "bool",
        setting("enable_metrics"),
        "false: no metrics listener (INFERPLEX_ENABLE_METRICS)",
    ),
    *(
        TritonFlag(
            f"--{listener}-address",
            "text",
            setting("host"),
            f"the address the {listener} listener binds: inferplex binds HTTP, gRPC and "
            "metrics on one address (--host; Triton's default 0.0.0.0 is 127.0.0.1 here), so "
            "two different addresses are an error",
            one_of_several=True,
        )
        for listener in ("http", "grpc", "metrics")
    ),
    *(
        no_effect(
            f"--reuse-{listener}-port",
            "bool",
            "ports are bound without SO_REUSEPORT: a second server on the port fails to start",
        )
        for listener in ("http", "grpc")
    ),
    *(
        no_effect(
            f"--{listener}-header-forward-pattern",
            "text",
            "headers are not copied into request parameters (--routing-header copies one "
            "header into the routing_key parameter)",
        )
        for listener in ("http", "grpc")
    ),
    no_effect("--http-thread-count", "int", _THREADS + "HTTP thread pool"),
    TritonFlag(
        "--http-max-input-size",
        "int",
        setting("max_json_request_bytes"),
        "--max-json-request-bytes: an inference request's JSON (/infer, /generate) above it "
        "gets 413 in Triton's words; Triton's default is 64 MiB, inferplex's 16 MiB",
    ),
    # -- gRPC -------------------------------------------------------------------------------
    no_effect("--grpc-infer-thread-count", "int", _THREADS + "gRPC thread pool"),
    no_effect(
        "--grpc-infer-allocation-pool-size",
        "int",
        "inferplex keeps no pool of request objects",
    ),
    no_effect(
        "--grpc-max-response-pool-size",
        "int",
        "a stream's waiting responses are bounded by --stream-queue-responses",
    ),
    TritonFlag(
        "--grpc-use-ssl",
        "bool",
        lambda on: {"_grpc_ssl": on},
        "true: TLS with --grpc-server-cert/--grpc-server-key, as --tls-cert-file/"
        "--tls-key-file, which serve HTTPS on the HTTP port too",
    ),
    TritonFlag(
        "--grpc-use-ssl-mutual",
        "bool",
        lambda on: {"_grpc_ssl_mutual": on},
        "true: TLS with client certificates signed by --grpc-root-cert (--tls-client-ca)",
    ),
    *(
        TritonFlag(
            f"--grpc-{name}",
            "text",
            setting(f"_grpc_{name.replace('-', '_')}"),
            f"with --grpc-use-ssl: {what}",
        )
        for name, what in (
            ("server-cert", "--tls-cert-file"),
            ("server-key", "--tls-key-file"),
            ("root-cert", "--tls-client-ca (with --grpc-use-ssl-mutual)"),
        )
    ),
    TritonFlag(
        "--grpc-infer-response-compression-level",
        "text",
        lambda level: Effect(
            notes=()
            if level.lower() == "none"
            else (f"{level}: no effect: responses are sent uncompressed",)
        ),
        "none (the default) is honoured; low, medium and high have no effect: responses are "
        "sent uncompressed",
    ),
    TritonFlag(
        "--grpc-keepalive-time",
        "int",
        lambda ms: {"http2_keepalive_s": max(ms, 0) / _SECONDS},
        "milliseconds: --http2-keepalive-s (inferplex's default sends no keepalive PING)",
    ),
    TritonFlag(
        "--grpc-keepalive-timeout",
        "int",
        lambda ms: {"http2_keepalive_timeout_s": ms / _SECONDS},
        "milliseconds: --http2-keepalive-timeout-s",
    ),
    no_effect(
        "--grpc-keepalive-permit-without-calls",
        "bool",
        "keepalive PINGs (--http2-keepalive-s) go out with or without calls in flight",
    ),
    *(
        no_effect(
            f"--grpc-http2-{name}",
            "int",
            "a client's PINGs count against --http2-max-control-frames, which ends a "
            "flooding connection with GOAWAY ENHANCE_YOUR_CALM",
        )
        for name in (
            "max-pings-without-data",
            "min-recv-ping-interval-without-data",
            "max-ping-strikes",
        )
    ),
    TritonFlag(
        "--grpc-max-connection-age",
        "int",
        lambda ms: {"http2_max_connection_age_s": max(ms, 0) / _SECONDS},
        "milliseconds: --http2-max-connection-age-s",
    ),
    TritonFlag(
        "--grpc-max-connection-age-grace",
        "int",
        lambda ms: {"http2_max_connection_age_grace_s": max(ms, 0) / _SECONDS},
        "milliseconds: --http2-max-connection-age-grace-s",
    ),
    # -- SageMaker and Vertex AI ------------------------------------------------------------
    no_effect("--allow-sagemaker", "bool", "inferplex has no SageMaker endpoint"),
    no_effect("--sagemaker-port", "int", "inferplex has no SageMaker endpoint"),
    no_effect("--sagemaker-safe-port-range", "text", "inferplex has no SageMaker endpoint"),
    no_effect("--sagemaker-thread-count", "int", "inferplex has no SageMaker endpoint"),
    no_effect("--allow-vertex-ai", "bool", "inferplex has no Vertex AI endpoint"),
    no_effect("--vertex-ai-port", "int", "inferplex has no Vertex AI endpoint"),
    no_effect("--vertex-ai-thread-count", "int", "inferplex has no Vertex AI endpoint"),
    no_effect("--vertex-ai-default-model", "text", "inferplex has no Vertex AI endpoint"),
    # -- metrics ----------------------------------------------------------------------------
    TritonFlag(
        "--allow-gpu-metrics",
        "bool",
        setting("gpu_metrics"),
        "false: no nv_gpu_* metrics, NVML left unopened (INFERPLEX_GPU_METRICS)",
    ),
    no_effect(
        "--allow-cpu-metrics",
        "bool",
        "the process's CPU and memory metrics are always exported",
    ),
    TritonFlag(
        "--metrics-interval-ms",
        "float",
        setting("metrics_interval_s", lambda ms: ms / _SECONDS),
        "milliseconds: --metrics-interval-s (the window of the CPU and busy-ratio gauges; "
        "the counters are read at each scrape)",
    ),
    TritonFlag(
        "--metrics-config",
        "repeated",
        triton_values.metrics_config,
        "<setting>=<value>: no effect: inferplex's latency metrics are histograms, without "
        "settings",
    ),
    # -- tracing ----------------------------------------------------------------------------
    TritonFlag(
        "--trace-config",
        "repeated",
        lambda values: {"_trace_config": values},
        "[<mode>,]<setting>=<value>: level (not OFF) and rate set --trace-rate 1/rate; mode "
        "opentelemetry sends spans over OTLP to its url (--trace-endpoint), mode triton to "
        "the console (no trace file); count, file, log-frequency have no effect",
    ),
    TritonFlag(
        "--trace-level",
        "repeated",
        lambda values: {"_trace_level": _joined(values)},
        "Triton's older --trace-config level=...",
    ),
    *(
        TritonFlag(
            f"--trace-{name}",
            takes,
            setting(f"_trace_{name.replace('-', '_')}", str),
            f"Triton's older --trace-config {name}=...",
        )
        for name, takes in _OLD_TRACE_FLAGS
    ),
    # -- response cache, rate limiter -------------------------------------------------------
    TritonFlag(
        "--cache-config",
        "repeated",
        triton_values.cache_config,
        "local,size=N: the response cache's size in bytes (--cache-size); other caches have "
        "no effect",
    ),
    TritonFlag(
        "--response-cache-byte-size",
        "int",
        lambda size: {"_response_cache_bytes": size},
        "Triton's older --cache-config local,size=N (--cache-size)",
    ),
    no_effect("--cache-directory", "text", "the response cache is built in"),
    TritonFlag(
        "--rate-limit",
        "text",
        lambda mode: _rate_limit(mode),
        "execution_count (honoured) or off: no effect: models' rate_limiter resources and "
        "priorities always apply",
    ),
    TritonFlag(
        "--rate-limit-resource",
        "repeated",
        triton_values.rate_limit_resources,
        "<name>:<count>[:<device>]: --rate-limit-resources (per-device counts add up)",
    ),
    # -- memory, devices, backends ----------------------------------------------------------
    no_effect(
        "--pinned-memory-pool-byte-size",
        "int",
        "inferplex keeps no pinned-memory pool: each runtime allocates its own",
    ),
    no_effect(
        "--cuda-memory-pool-byte-size",
        "repeated",
        "inferplex keeps no CUDA memory pool: each runtime allocates its own "
        "(--gpu-memory-limit bounds what models take)",
    ),
    no_effect(
        "--cuda-virtual-address-size",
        "repeated",
        "inferplex has no growable implicit state on the GPU",
    ),
    no_effect(
        "--min-supported-compute-capability",
        "float",
        "every GPU the runtimes accept is used",
    ),
    no_effect("--buffer-manager-thread-count", "int", _THREADS + "buffer manager"),
    no_effect(
        "--host-policy",
        "repeated",
        "instances are not pinned to NUMA nodes or cores (run the server under numactl or taskset)",
    ),
    no_effect(
        "--model-load-gpu-limit",
        "repeated",
        "use --gpu-memory-limit GPU=SIZE: loading past it evicts idle models",
    ),
    no_effect(
        "--backend-directory",
        "text",
        "inferplex's backends are built in (ONNX Runtime, PyTorch, Python)",
    ),
    no_effect(
        "--backend-config",
        "repeated",
        "inferplex has none of Triton's per-backend settings; a model's backend "
        "settings go in its config's parameters (e.g. intra_op_thread_count)",
    ),
    no_effect("--repoagent-directory", "text", "inferplex has no repository agents"),
)


def _verbose_level(text: str) -> int:
    """Triton's --log-verbose: a number, or true (1) or false (0)."""
    spelled = {"true": 1, "false": 0}.get(text.lower())
    return spelled if spelled is not None else triton_values.integer("--log-verbose", text)


def _rate_limit(mode: str) -> Effect:
    if mode.lower() == "execution_count":
        return Effect()
    if mode.lower() == "off":
        return Effect(
            notes=("off: no effect: models' rate_limiter resources and priorities apply",)
        )
    raise click.UsageError(
        f"tritonserver's --rate-limit takes execution_count or off, got '{mode}'"
    )
