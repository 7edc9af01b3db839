"""``inferplex mesh``: the model mesh's tools (docs/mesh.md)."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import click

from inferplex.errors import ConfigError
from inferplex.mesh.members import MemberSource
from inferplex.mesh.nginx import Backend, Listen, render
from inferplex.mesh.ring import Ring, copies_by_model
from inferplex.repository.local import list_models


@click.group()
def mesh() -> None:
    """A model mesh: models placed on replicas by a consistent-hash ring (docs/mesh.md)."""


@mesh.command("nginx-config")
@click.option(
    "--model-repository",
    envvar="INFERPLEX_MODEL_REPOSITORY",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The replicas' model repository (each model's name and mesh_copies parameter).",
)
@click.option(
    "--replicas",
    envvar="INFERPLEX_MESH_REPLICAS",
    default="",
    help="The replicas' names, comma-separated, as the replicas' --mesh-replicas.",
)
@click.option(
    "--members",
    envvar="INFERPLEX_MESH_MEMBERS",
    default="",
    help="Where the replicas' names are read, as the replicas' --mesh-members "
    "(file:PATH or dns:TEMPLATE:max=N); in place of --replicas.",
)
@click.option(
    "--watch",
    is_flag=True,
    help="Keep running: read --members every --refresh-secs and, when they change, write "
    "the configuration again and run --reload-command.",
)
@click.option(
    "--reload-command",
    default="nginx -s reload",
    show_default=True,
    help="Run after each rewrite in --watch mode (split as a shell would; no shell).",
)
@click.option(
    "--refresh-secs",
    envvar="INFERPLEX_MESH_REFRESH_SECS",
    type=click.FloatRange(min=0.05),
    default=5.0,
    show_default=True,
    help="How often --watch reads --members.",
)
@click.option(
    "--copies",
    envvar="INFERPLEX_MESH_COPIES",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Owners per model, as the replicas' --mesh-copies.",
)
@click.option(
    "--http-address",
    default="{name}:8000",
    show_default=True,
    help="A replica's HTTP address; {name} is its name.",
)
@click.option(
    "--grpc-address",
    default="{name}:8001",
    show_default=True,
    help="A replica's gRPC address; {name} is its name.",
)
@click.option("--listen-http", default="0.0.0.0:8000", show_default=True)
@click.option("--listen-grpc", default="0.0.0.0:8001", show_default=True)
@click.option(
    "--prefix",
    default="/tmp/nginx",
    show_default=True,
    help="nginx's folder for its pid file, error log and temporary files.",
)
@click.option(
    "--resolver",
    default="",
    help="DNS server nginx asks again while it runs (needs nginx >= 1.27.3); on Kubernetes "
    "kube-dns.kube-system.svc.cluster.local.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write nginx.conf (default: standard output).",
)
def nginx_config(
    model_repository: Path,
    replicas: str,
    members: str,
    watch: bool,
    reload_command: str,
    refresh_secs: float,
    copies: int,
    http_address: str,
    grpc_address: str,
    listen_http: str,
    listen_grpc: str,
    prefix: str,
    resolver: str,
    output: Path | None,
) -> None:
    """Write nginx's configuration for a mesh: each model's requests to its owners."""
    listen = Listen(listen_http, listen_grpc, prefix, resolver=resolver)
    addresses = (http_address, grpc_address)
    try:
        if bool(replicas) == bool(members):
            raise ConfigError("give one of --replicas and --members")
        if watch and (not members or output is None):
            raise ConfigError("--watch needs --members and --output")
        source = MemberSource(members) if members else None
        names = (
            source.read() if source else tuple(filter(None, map(str.strip, replicas.split(","))))
        )
        text = _render(model_repository, names, copies, addresses, listen)
    except ConfigError as exc:
        click.echo(f"error: {exc.message}", err=True)
        sys.exit(2)
    if output is None:
        click.echo(text, nl=False)
        return
    _write(output, text)
    if watch and source is not None:
        _watch(
            source,
            names,
            refresh_secs,
            shlex.split(reload_command),
            lambda found: _render(model_repository, found, copies, addresses, listen),
            output,
        )


def _render(
    repository: Path,
    names: tuple[str, ...],
    copies: int,
    addresses: tuple[str, str],
    listen: Listen,
) -> str:
    """nginx.conf for the ring of ``names``. Blocking; ConfigError."""
    backends = [Backend(n, addresses[0].format(name=n), addresses[1].format(name=n)) for n in names]
    models = [path.name for path in list_models(repository)]
    return render(Ring(names), copies_by_model(repository, models, copies), backends, listen)


def _write(output: Path, text: str) -> None:
    """Replace ``output`` at once: nginx never reads half a file."""
    staged = output.with_name(output.name + ".new")
    staged.write_text(text)
    staged.replace(output)


def _watch(
    source: MemberSource,
    names: tuple[str, ...],
    every: float,
    reload: list[str],
    rendered: Callable[[tuple[str, ...]], str],
    output: Path,
) -> None:
    """Until stopped: on a change of members write the configuration and reload nginx. A read
    that fails keeps the configuration nginx has and says why."""
    stamp = source.stamp()
    while True:
        time.sleep(every)
        now = source.stamp()
        if now == stamp:
            continue
        stamp = now
        try:
            found = source.read()
            if found == names:
                continue
            text = rendered(found)
        except ConfigError as exc:
            click.echo(f"error: keeping {list(names)}: {exc.message}", err=True)
            continue
        _write(output, text)
        done = subprocess.run(reload, check=False)
        click.echo(
            f"mesh: {list(names)} -> {list(found)}; {shlex.join(reload)}: {done.returncode}",
            err=True,
        )
        names = found
