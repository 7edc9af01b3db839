"""The ``inferplex`` command. Thin: parse flags -> ServerConfig -> run."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import click
import uvloop
from pydantic import ValidationError

from inferplex.config.server_config import ServerConfig
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
@click.option("--model-repository", type=click.Path(path_type=Path), help="Folder of models.")
@click.option("--host", help="Address to bind (default 127.0.0.1).")
@click.option("--http-port", type=int, help="HTTP port (default 8000; 0 = any free port).")
@click.option("--grpc-port", type=int, help="gRPC port (default 8001; 0 = any free port).")
@click.option("--metrics-port", type=int, help="Metrics port (default 8002; 0 = any free port).")
@click.option("--max-request-bytes", type=int, help="Largest request body accepted.")
@click.option("--intra-op-threads", type=int, help="Threads per model session (0 = divide cores).")
@click.option(
    "--scheduling-policy",
    type=click.Choice(["round_robin", "priority", "adaptive"]),
    help="Which ready batch runs next when models compete (default priority).",
)
@click.option("--max-concurrent-batches", type=int, help="Batches running at once (0 = cores).")
@click.option(
    "--drain-delay-s", type=float, help="On SIGTERM, seconds to serve with readiness false."
)
@click.option("--cache-size", type=int, help="Response cache size in bytes (0 = off).")
@click.option(
    "--rate-limit-resources",
    type=JsonObject(),
    help="Rate-limiter resource totals as JSON, e.g. '{\"R1\": 4}'.",
)
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]))
def serve(**options: Any) -> None:
    """Serve every model in the model repository.

    Every flag can also be set as an environment variable: INFERPLEX_<FLAG>, e.g.
    INFERPLEX_HTTP_PORT=9000.
    """
    given = {key: value for key, value in options.items() if value is not None}
    try:
        config = ServerConfig(**given)
    except ValidationError as exc:
        for error in exc.errors():
            field = ".".join(str(p) for p in error["loc"])
            click.echo(f"error: {field}: {error['msg']}", err=True)
        sys.exit(2)
    logging.basicConfig(
        level=config.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    from inferplex.server import Server  # the server's imports are heavy; after flag parsing

    uvloop.run(Server(config).serve_forever())


if __name__ == "__main__":
    main()
