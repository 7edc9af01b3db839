"""nginx's mesh configuration: the map follows the ring, owners then backup."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from inferplex.cli.main import main
from inferplex.errors import ConfigError
from inferplex.mesh.nginx import Backend, Listen, render
from inferplex.mesh.ring import Ring

RING = Ring(["r0", "r1", "r2"])
BACKENDS = [Backend(f"r{i}", f"10.0.0.{i}:8000", f"10.0.0.{i}:8001") for i in range(3)]
LISTEN = Listen("0.0.0.0:8000", "0.0.0.0:8001", "/tmp/nginx")


def upstreams(text: str) -> dict[str, list[str]]:
    """upstream name -> its server lines."""
    found = re.findall(r"upstream (\S+) \{[^\n]*\n(.*?)\n    \}", text, re.S)
    return {name: re.findall(r"server (.+);", body) for name, body in found}


def routes(text: str) -> dict[str, str]:
    return dict(re.findall(r'^        "(.+)" (s\d+);$', text, re.M))


def test_each_model_goes_to_its_owners_then_its_backup() -> None:
    copies = {f"m{i}": 1 + i % 2 for i in range(40)}
    text = render(RING, copies, BACKENDS, LISTEN)
    servers = upstreams(text)
    address = {b.http: b.name for b in BACKENDS}
    for model, set_id in routes(text).items():
        lines = servers[f"http_{set_id}"]
        primary = [address[s.split()[0]] for s in lines if not s.endswith("backup")]
        backup = [address[s.split()[0]] for s in lines if s.endswith("backup")]
        owners = RING.owners(model, copies[model] + 1)
        assert sorted(primary) == sorted(owners[: copies[model]])
        assert backup == list(owners[copies[model] :])
        assert len(servers[f"grpc_{set_id}"]) == len(lines)
    assert set(routes(text)) == set(copies)
    assert "hash $mesh_model consistent" in text


def test_down_replicas_and_names_outside_the_map() -> None:
    text = render(RING, {"m1": 1, "odd name": 1}, BACKENDS, LISTEN, down={"r1"})
    assert set(routes(text)) == {"m1"}
    assert all(
        line.endswith(" down")
        for lines in upstreams(text).values()
        for line in lines
        if line.startswith("10.0.0.1:")
    )


def test_a_resolver_resolves_again() -> None:
    listen = Listen("0.0.0.0:8000", "0.0.0.0:8001", "/tmp/nginx", resolver="kube-dns")
    text = render(RING, {"m1": 1}, BACKENDS, listen)
    assert "resolver kube-dns valid=5s;" in text
    assert all(" resolve " in line for lines in upstreams(text).values() for line in lines)


def test_every_replica_needs_an_address() -> None:
    with pytest.raises(ConfigError, match="r2"):
        render(RING, {"m1": 1}, BACKENDS[:2], LISTEN)


def test_the_command_writes_the_same_configuration(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    result = CliRunner().invoke(
        main,
        ["mesh", "nginx-config", "--model-repository", str(tmp_path), "--replicas", "r0,r1,r2",
         "--http-address", "{name}.mesh:8000", "--copies", "2"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    backends = [Backend(f"r{i}", f"r{i}.mesh:8000", f"r{i}:8001") for i in range(3)]
    assert result.output == render(RING, {"a": 2, "b": 2}, backends, LISTEN)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "give one of --replicas and --members"),
        (["--replicas", "r0", "--members", "file:m"], "give one of --replicas and --members"),
        (["--replicas", "r0", "--watch"], "--watch needs --members and --output"),
        (["--members", "dns:x:max=2"], "first label needs"),
    ],
)
def test_the_command_refuses_unclear_members(
    tmp_path: Path, extra: list[str], message: str
) -> None:
    args = ["mesh", "nginx-config", "--model-repository", str(tmp_path), *extra]
    result = CliRunner().invoke(main, args, env={})
    assert result.exit_code == 2 and message in result.output, result.output
