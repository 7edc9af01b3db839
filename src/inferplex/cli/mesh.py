"""``inferplex mesh``: the model mesh's tools (docs/mesh.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from inferplex.errors import ConfigError
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
    required=True,
    help="The replicas' names, comma-separated, as the replicas' --mesh-replicas.",
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
    names = [name.strip() for name in replicas.split(",") if name.strip()]
    backends = [Backend(n, http_address.format(name=n), grpc_address.format(name=n)) for n in names]
    try:
        ring = Ring(names)
        models = [path.name for path in list_models(model_repository)]
        text = render(
            ring,
            copies_by_model(model_repository, models, copies),
            backends,
            Listen(listen_http, listen_grpc, prefix, resolver=resolver),
        )
    except ConfigError as exc:
        click.echo(f"error: {exc.message}", err=True)
        sys.exit(2)
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text)
