"""nginx's configuration for a model mesh, written from the ring the replicas use.

- The model of a request: over HTTP from the V2 path (``/v2/models/{name}/...``); over gRPC,
  whose V2 messages carry the name inside the protobuf, from the ``inferplex-model`` header
  (metadata) the client sets; the header wins when both are there.
- ``map`` from each model of the repository to the upstream of its owner set: the model's
  ``k`` owners (``least_conn``, so a hot model's requests spread over its owners) and the next
  replica on the ring as ``backup``, which nginx uses when every owner failed (a killed or
  restarting replica); the backup loads the model on demand.
- A name not in the map (a model added since the map was written, a request without a model)
  goes to ``any``: every replica, ``hash $mesh_model consistent``; any replica can answer it.
- Retries as in deploy/nginx/nginx.conf.template (its header says why), plus ``http_429``:
  a replica whose memory budget cannot make room at once.

A replica in ``down`` is marked ``down`` everywhere (drain before stopping it, for gRPC).
With ``resolver`` the replicas' host names are resolved again while nginx runs (``resolve``,
nginx 1.27.3 and later): on Kubernetes a restarted pod comes back with a new address.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from inferplex.errors import ConfigError
from inferplex.mesh.ring import Ring

#: the gRPC metadata key (an HTTP/2 header) naming the model of a call
MODEL_HEADER = "inferplex-model"
#: names that go into the map as they are; others go to the ``any`` upstream
_PLAIN_NAME = re.compile(r"[A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Backend:
    """One replica: its name on the ring and its HTTP and gRPC addresses (host:port)."""

    name: str
    http: str
    grpc: str


@dataclass(frozen=True)
class Listen:
    """Where nginx listens and keeps its files."""

    http: str
    grpc: str
    prefix: str
    worker_processes: str = "auto"
    resolver: str = ""


def render(
    ring: Ring,
    copies: Mapping[str, int],
    backends: Sequence[Backend],
    listen: Listen,
    down: Collection[str] = (),
) -> str:
    """The whole nginx.conf: each model of ``copies`` (model -> its number of owners) routed
    to its owners on ``ring`` and the next replica as their backup."""
    missing = set(ring.replicas) - {b.name for b in backends}
    if missing:
        raise ConfigError(f"no address for replica(s) {sorted(missing)}")
    routed = {m: (ring.owners(m, k + 1), k) for m, k in copies.items() if _PLAIN_NAME.fullmatch(m)}
    by_name = {b.name: b for b in backends}
    sets = sorted({(o, k) for o, k in routed.values()})
    ids = {s: f"s{i}" for i, s in enumerate(sets)}
    lines = [_HEAD.format(listen=listen, header=MODEL_HEADER.replace("-", "_"))]
    if listen.resolver:
        lines.append(f"    resolver {listen.resolver} valid=5s;")
    lines.append("    map $mesh_model $mesh_set {\n        default any;")
    lines += [f'        "{m}" {ids[s]};' for m, s in sorted(routed.items())]
    lines.append("    }")
    for protocol in ("http", "grpc"):
        for (members, k), set_id in ids.items():
            servers = [
                _server(getattr(by_name[n], protocol), n in down, listen, backup=i >= k)
                for i, n in enumerate(members)
            ]
            comment = f"owners {', '.join(members[:k])}; backup {', '.join(members[k:]) or '-'}"
            lines.append(_upstream(f"{protocol}_{set_id}", "least_conn", servers, comment, listen))
        servers = [_server(getattr(b, protocol), b.name in down, listen) for b in backends]
        hashed = "hash $mesh_model consistent"
        lines.append(_upstream(f"{protocol}_any", hashed, servers, "names not in the map", listen))
    lines.append(_SERVERS.format(listen=listen))
    return "\n".join(lines) + "\n"


def _server(address: str, down: bool, listen: Listen, backup: bool = False) -> str:
    flags = " down" if down else " backup" if backup else ""
    resolve = " resolve" if listen.resolver else ""
    return f"server {address}{resolve} max_fails=1 fail_timeout=1s{flags};"


def _upstream(name: str, method: str, servers: list[str], comment: str, listen: Listen) -> str:
    zone = f"\n        zone {name} 64k;" if listen.resolver else ""
    body = "\n".join(f"        {s}" for s in servers)
    return (
        f"    upstream {name} {{  # {comment}\n        {method};{zone}\n{body}\n"
        "        keepalive 16;\n    }"
    )


_HEAD = """\
# Written by `inferplex mesh nginx-config` (src/inferplex/mesh/nginx.py, docs/mesh.md).
worker_processes {listen.worker_processes};
pid {listen.prefix}/nginx.pid;
error_log {listen.prefix}/error.log warn;

events {{
    worker_connections 4096;
}}

http {{
    access_log off;
    client_body_temp_path {listen.prefix}/tmp/body;
    proxy_temp_path {listen.prefix}/tmp/proxy;
    fastcgi_temp_path {listen.prefix}/tmp/fastcgi;
    uwsgi_temp_path {listen.prefix}/tmp/uwsgi;
    scgi_temp_path {listen.prefix}/tmp/scgi;
    client_max_body_size 256m;
    client_body_buffer_size 1m;
    map_hash_max_size 262144;
    map_hash_bucket_size 256;

    # The model: the {header} header (gRPC metadata), else the V2 path.
    map $uri $mesh_path_model {{
        ~^/v2/models/(?<name>[^/]+) $name;
        default "";
    }}
    map $http_{header} $mesh_model {{
        "" $mesh_path_model;
        default $http_{header};
    }}"""

_SERVERS = """\
    server {{
        listen {listen.http};
        location / {{
            proxy_pass http://http_$mesh_set;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_next_upstream error http_503 http_429 non_idempotent;
            proxy_next_upstream_tries 3;
            proxy_read_timeout 300s;
        }}
    }}

    server {{
        listen {listen.grpc} http2;
        location / {{
            grpc_pass grpc://grpc_$mesh_set;
            grpc_next_upstream error http_503 http_429 non_idempotent;
            grpc_next_upstream_tries 3;
            grpc_read_timeout 300s;
        }}
    }}
}}"""
