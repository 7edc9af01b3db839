"""The ``inferplex`` command. Thin: parse flags -> ServerConfig -> run."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
import uvloop
from pydantic import ValidationError
from pydantic_settings import SettingsError

from inferplex.benchtool.command import bench as bench_command
from inferplex.config.server_config import ServerConfig
from inferplex.heatmap.command import heatmap as heatmap_command
from inferplex.logging_setup import configure_logging
from inferplex.optimize.command import optimize as optimize_command
from inferplex.tuner.command import tune as tune_command
from inferplex.version import __version__


class JsonObject(click.ParamType):
    """A flag whose value is a JSON object."""

    name = "json"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, dict):
            return value
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as exc:
            self.fail(f"not valid JSON: {exc}", param, ctx)
        if not isinstance(parsed, dict):
            self.fail('expected a JSON object such as {"R1": 4}', param, ctx)
        return parsed


@click.group()
@click.version_option(__version__, prog_name="inferplex")
def main() -> None:
    """inferplex: a multi-model inference server (KServe V2 over HTTP and gRPC)."""


@main.command()
@click.option("--model-repository", help="Folder of models, or s3://bucket/prefix.")
@click.option("--host", help="Address to bind (default 127.0.0.1).")
@click.option("--http-port", type=int, help="HTTP port (default 8000; 0 = any free port).")
@click.option("--grpc-port", type=int, help="gRPC port (default 8001; 0 = any free port).")
@click.option("--metrics-port", type=int, help="Metrics port (default 8002; 0 = any free port).")
@click.option(
    "--http-server",
    type=click.Choice(["builtin", "uvicorn"]),
    help="HTTP/1.1 server: builtin (default) or uvicorn, the reference twin.",
)
@click.option(
    "--grpc-server",
    type=click.Choice(["builtin", "grpcio"]),
    help="gRPC server: builtin (default) or grpcio (grpc.aio), the reference twin.",
)
@click.option(
    "--max-request-bytes", type=int, help="Largest HTTP request body (larger: 413; 256 MiB)."
)
@click.option(
    "--max-grpc-message-bytes",
    type=int,
    help="Largest gRPC message either way (larger: RESOURCE_EXHAUSTED; 256 MiB).",
)
@click.option("--intra-op-threads", type=int, help="Threads per model session (0 = divide cores).")
@click.option(
    "--scheduling-policy",
    type=click.Choice(["round_robin", "priority", "adaptive"]),
    help="Which ready batch runs next when models compete (default priority).",
)
@click.option("--max-concurrent-batches", type=int, help="Batches running at once (0 = cores).")
@click.option(
    "--inline-execution-us",
    type=float,
    help="Batches measured under this many µs run on the event loop (0 = never).",
)
@click.option(
    "--drain-delay-s", type=float, help="On SIGTERM, seconds to serve with readiness false."
)
@click.option("--cache-size", type=int, help="Response cache size in bytes (0 = off).")
@click.option(
    "--rate-limit-resources",
    type=JsonObject(),
    help="Rate-limiter resource totals as JSON, e.g. '{\"R1\": 4}'.",
)
@click.option(
    "--inference-token",
    help="API token for inference endpoints (prefer INFERPLEX_INFERENCE_TOKEN: flags show in ps).",
)
@click.option("--management-token", help="API token for the management API.")
@click.option("--management-port", type=int, help="Serve the HTTP management API only here.")
@click.option("--management-host", help="Address of the management listener (default --host).")
@click.option("--tls-cert-file", type=click.Path(path_type=Path), help="PEM certificate (TLS).")
@click.option("--tls-key-file", type=click.Path(path_type=Path), help="PEM private key (TLS).")
@click.option("--tls-client-ca", type=click.Path(path_type=Path), help="CA of clients (mTLS).")
@click.option(
    "--model-key-file", type=click.Path(path_type=Path), help="AES key of encrypted models."
)
@click.option("--max-header-bytes", type=int, help="Largest request headers/metadata (0 = any).")
@click.option(
    "--http-header-timeout-s", type=float, help="Seconds to a complete header block (408; 10)."
)
@click.option(
    "--http-body-timeout-s", type=float, help="Window a body's rate is measured over (408; 30)."
)
@click.option("--http-body-min-rate", type=int, help="Bytes/s a request body must keep up (16384).")
@click.option("--http-keep-alive-s", type=float, help="Idle seconds between requests (5).")
@click.option("--http-send-timeout-s", type=float, help="Seconds an unread answer may wait (30).")
@click.option(
    "--http-connection-buffer-bytes",
    type=int,
    help="Bytes one connection buffers behind a running request (16 MiB).",
)
@click.option(
    "--max-buffered-bytes", type=int, help="Body bytes buffered server-wide (503; 1 GiB; 0 = any)."
)
@click.option(
    "--http2-max-concurrent-streams", type=int, help="Open streams per gRPC connection (1024)."
)
@click.option(
    "--http2-max-header-frames", type=int, help="HEADERS+CONTINUATION frames per header block (32)."
)
@click.option(
    "--http2-max-resets", type=int, help="Streams reset/refused in a burst per connection (1000)."
)
@click.option("--http2-resets-per-s", type=float, help="Refill rate of that budget (33/s).")
@click.option(
    "--http2-max-control-frames", type=int, help="Frames doing no work in a burst (1000)."
)
@click.option(
    "--http2-control-frames-per-s", type=float, help="Refill rate of that budget (100/s)."
)
@click.option(
    "--http2-preface-timeout-s", type=float, help="Seconds to send the HTTP/2 preface (10)."
)
@click.option("--http2-idle-timeout-s", type=float, help="Seconds a connection may sit idle (300).")
@click.option(
    "--http2-keepalive-s", type=float, help="PING after this many silent seconds (0=off)."
)
@click.option(
    "--http2-keepalive-timeout-s", type=float, help="Seconds a keepalive PING may wait (20)."
)
@click.option(
    "--http2-max-connection-age-s", type=float, help="GOAWAY a connection this old (0 = never)."
)
@click.option(
    "--http2-max-connection-age-grace-s", type=float, help="Then seconds calls may finish (30)."
)
@click.option(
    "--http2-send-timeout-s", type=float, help="Seconds a response may stall on a window (30)."
)
@click.option(
    "--http2-connection-buffer-bytes",
    type=int,
    help="Request bytes one gRPC connection buffers (RESOURCE_EXHAUSTED; 64 MiB).",
)
@click.option("--max-tensor-elements", type=int, help="Most elements of one input tensor.")
@click.option("--max-string-bytes", type=int, help="Longest BYTES element accepted.")
@click.option(
    "--allow-shared-memory",
    is_flag=True,
    default=None,
    help="Let clients register system shared-memory regions (off by default).",
)
@click.option(
    "--worker-env",
    multiple=True,
    help="Environment variable passed on to model worker processes (repeatable; default: "
    "only the documented list, never INFERPLEX_*).",
)
@click.option(
    "--model-control-mode",
    type=click.Choice(["none", "poll", "explicit"]),
    help="none (load all, no load/unload API), poll (also rescan the repository), explicit.",
)
@click.option("--repository-poll-secs", type=float, help="Seconds between scans in poll mode.")
@click.option(
    "--load-model",
    multiple=True,
    help="Model to load at start in explicit mode (repeatable; '*' = all).",
)
@click.option("--memory-limit", help="Host memory for loaded models, e.g. 2GiB (0 = no limit).")
@click.option("--gpu-memory-limit", help="GPU memory for models per GPU, e.g. 0=8GiB,1=4GiB.")
@click.option("--load-nice", type=int, help="Nice steps below serving for load work (0-19).")
@click.option(
    "--load-share", type=float, help="Share of the time a load takes beside busy serving (0-1]."
)
@click.option("--load-on-demand", is_flag=True, default=None, help="Load models on first request.")
@click.option(
    "--load-on-demand-timeout-secs", type=float, help="How long a request waits for that load."
)
@click.option("--idle-unload-secs", type=float, help="Unload models idle this long (0 = never).")
@click.option(
    "--model-repository-cache",
    type=click.Path(path_type=Path),
    help="Local copy of an s3:// model repository.",
)
@click.option("--s3-endpoint-url", help="S3-compatible endpoint for s3:// repositories.")
@click.option("--routing-header", help="HTTP header used as routing_key (sticky routes).")
@click.option(
    "--breaker-failures", type=int, help="Consecutive failures that open a model's breaker."
)
@click.option("--breaker-cooldown-s", type=float, help="Seconds an open breaker fast-fails.")
@click.option("--request-timeout-ms", type=float, help="Default request timeout (0 = none).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]))
@click.option("--log-format", type=click.Choice(["plain", "json"]), help="Log line format.")
@click.option("--trace-rate", type=float, help="Share of requests traced, 0..1 (0 = off).")
@click.option("--trace-exporter", type=click.Choice(["otlp", "console"]), help="Span exporter.")
@click.option("--trace-endpoint", help="OTLP/HTTP traces URL (default: the exporter's).")
def serve(**options: Any) -> None:
    """Serve every model in the model repository.

    Every flag can also be set as an environment variable: INFERPLEX_<FLAG>, e.g.
    INFERPLEX_HTTP_PORT=9000.
    """
    # a repeatable flag not given is () and must not hide its environment variable
    given = {key: value for key, value in options.items() if value not in (None, ())}
    try:
        config = ServerConfig(**given)
    except ValidationError as exc:
        for error in exc.errors():
            field = ".".join(str(p) for p in error["loc"])
            click.echo(f"error: {field}: {error['msg']}", err=True)
        sys.exit(2)
    except SettingsError as exc:  # an INFERPLEX_* variable that should hold JSON does not
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    try:
        configure_logging(config.log_level, config.log_format)
    except ValueError as exc:  # INFERPLEX_LOG_LEVEL is not checked by the flag's choices
        click.echo(f"error: log_level: {exc}", err=True)
        sys.exit(2)
    from inferplex.errors import ConfigError
    from inferplex.server import Server  # the server's imports are heavy; after flag parsing

    try:
        uvloop.run(Server(config).serve_forever())
    except ConfigError as exc:  # a setting only checkable at start (e.g. a GPU not there)
        click.echo(f"error: {exc.message}", err=True)
        sys.exit(2)


@main.command()
@click.argument("source", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the encrypted model (default: replace SOURCE in place).",
)
@click.option(
    "--key-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="File holding the key (64 hex characters); else INFERPLEX_MODEL_KEY(_FILE).",
)
@click.option(
    "--new-key",
    is_flag=True,
    help="Generate a key, write it to --key-file (created mode 0600), use it.",
)
@click.option(
    "--overwrite-key",
    is_flag=True,
    help="With --new-key: replace an existing --key-file (its old key is lost).",
)
def encrypt(
    source: Path, output: Path | None, key_file: Path | None, new_key: bool, overwrite_key: bool
) -> None:
    """Encrypt a model file with AES-256-GCM for storage at rest.

    The server decrypts it in memory at load (--model-key-file or INFERPLEX_MODEL_KEY); the
    plain model is never written to disk. Keep the file name (e.g. 1/model.onnx).
    """
    from inferplex.errors import ConfigError
    from inferplex.security import encryption

    try:
        if new_key:
            if key_file is None:
                raise ConfigError("--new-key needs --key-file to write the key to")
            key: bytes | None = encryption.write_new_key(key_file, overwrite_key)
        elif overwrite_key:
            raise ConfigError("--overwrite-key goes with --new-key")
        else:
            key = encryption.load_key(key_file=key_file)
        if key is None:
            raise ConfigError("no key: give --key-file (or --new-key) or set INFERPLEX_MODEL_KEY")
        target = output or source
        encryption.encrypt_file(source, target, key)
    except ConfigError as exc:
        click.echo(f"error: {exc.message}", err=True)
        sys.exit(2)
    click.echo(f"encrypted {source} -> {target}")


# Benchmarking and tuning tools: their modules import nothing heavy until they run.
main.add_command(bench_command, "bench")
main.add_command(tune_command, "tune")
main.add_command(heatmap_command, "heatmap")
main.add_command(optimize_command, "optimize")


if __name__ == "__main__":
    main()
