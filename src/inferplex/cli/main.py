"""The ``inferplex`` command. Thin: parse flags -> ServerConfig -> run."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import click
import uvloop
from pydantic import ValidationError
from pydantic_settings import SettingsError

from inferplex.cli.mesh import mesh as mesh_command
from inferplex.cli.options import server_options
from inferplex.cli.tools import ToolsGroup
from inferplex.cli.triton_flags import take_triton_flags, triton_options
from inferplex.config.server_config import ServerConfig
from inferplex.logging_setup import configure_logging
from inferplex.version import __version__


@click.group(cls=ToolsGroup)
@click.version_option(__version__, prog_name="inferplex")
def main() -> None:
    """inferplex: a multi-model inference server (KServe V2 over HTTP and gRPC)."""


@main.command()
@server_options
@triton_options
def serve(**options: Any) -> None:
    """Serve every model in the model repository.

    Every flag can also be set as an environment variable: INFERPLEX_<FLAG>, e.g.
    INFERPLEX_HTTP_PORT=9000. The flags are ServerConfig's fields (config/server_config.py):
    their help and defaults are the fields' own. The flags marked [tritonserver] are
    Triton's, accepted so its start scripts run unchanged.
    """
    from_triton, ignored = take_triton_flags(options)
    # a repeatable flag not given is () and must not hide its environment variable
    given = {key: value for key, value in options.items() if value not in (None, ())}
    try:
        config = ServerConfig(**{**from_triton, **given})
    except ValidationError as exc:
        for error in exc.errors():
            field = ".".join(str(p) for p in error["loc"])  # none: a check of several
            message = error["msg"].removeprefix("Value error, ")
            click.echo(f"error: {field + ': ' if field else ''}{message}", err=True)
        sys.exit(2)
    except SettingsError as exc:  # an INFERPLEX_* variable that should hold JSON does not
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    try:
        log_file = str(config.log_file) if config.log_file else None
        configure_logging(config.log_level, config.log_format, log_file)
    except ValueError as exc:  # INFERPLEX_LOG_LEVEL is not checked by the flag's choices
        click.echo(f"error: log_level: {exc}", err=True)
        sys.exit(2)
    except OSError as exc:
        click.echo(f"error: log_file: cannot open {config.log_file}: {exc.strerror}", err=True)
        sys.exit(2)
    for line in ignored:
        logging.getLogger(__name__).warning(line)
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


# the tools' commands (bench, tune, optimize, heatmap) come from ToolsGroup, imported when named
main.add_command(mesh_command, "mesh")


if __name__ == "__main__":
    main()
