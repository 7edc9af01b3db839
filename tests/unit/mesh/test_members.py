"""Reading a mesh's members while it runs: a file, DNS through an injected resolver."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from inferplex.errors import ConfigError
from inferplex.mesh.members import MemberSource, resolves

TEMPLATE = "inferplex-mesh-{i}.inferplex-mesh"


def _dns(ready: set[int], most: int = 8) -> MemberSource:
    hosts = {TEMPLATE.format(i=i) for i in ready}
    return MemberSource(f"dns:{TEMPLATE}:max={most}", resolver=hosts.__contains__)


def test_a_file_names_one_member_a_line(tmp_path: Path) -> None:
    path = tmp_path / "members"
    path.write_text("# the ring\nr0\n\n  r1  # the second\nr2\n")
    assert MemberSource(f"file:{path}").read() == ("r0", "r1", "r2")


def test_a_changed_file_changes_its_stamp_and_its_members(tmp_path: Path) -> None:
    path = tmp_path / "members"
    path.write_text("r0\nr1\n")
    source = MemberSource(f"file:{path}")
    before = source.stamp()
    assert source.stamp() == before
    path.write_text("r0\nr1\nr2\n")
    os.utime(path, ns=(1, 1))  # a filesystem whose clock is coarse still sees the change
    assert source.stamp() != before
    assert source.read() == ("r0", "r1", "r2")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "names no replica"),
        ("# nobody\n\n", "names no replica"),
        ("r0\nr1 r2\n", "line 2: one replica name a line"),
        ("r0,r1\n", "line 1: one replica name a line"),
        ("r0\nr0\n", "line 2: replica 'r0' is named twice"),
    ],
)
def test_bad_content_is_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "members"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        MemberSource(f"file:{path}").read()


def test_a_missing_or_binary_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"members file .*absent"):
        MemberSource(f"file:{tmp_path / 'absent'}").read()
    (tmp_path / "binary").write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="not UTF-8"):
        MemberSource(f"file:{tmp_path / 'binary'}").read()


def test_dns_members_are_the_pods_up_to_the_highest_that_resolves() -> None:
    assert _dns({0, 1, 2}).read() == ("inferplex-mesh-0", "inferplex-mesh-1", "inferplex-mesh-2")
    # a pod that restarts keeps its place: its models do not move twice
    assert _dns({0, 2}).read() == ("inferplex-mesh-0", "inferplex-mesh-1", "inferplex-mesh-2")
    assert _dns({0, 1, 2, 3}).read()[-1] == "inferplex-mesh-3"
    assert _dns({0, 9}, most=8).read() == ("inferplex-mesh-0",)


def test_dns_with_nothing_resolving_is_never_an_empty_ring() -> None:
    with pytest.raises(ConfigError, match=r"no member of .* resolves"):
        _dns(set()).read()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "expected file:PATH or dns:"),
        ("members.txt", "expected file:PATH or dns:"),
        ("file:", "expected file:PATH or dns:"),
        (f"dns:{TEMPLATE}", "expected dns:TEMPLATE:max=N"),
        (f"dns:{TEMPLATE}:max=0", "expected dns:TEMPLATE:max=N"),
        (f"dns:{TEMPLATE}:max=100000", "expected dns:TEMPLATE:max=N"),
        ("dns:inferplex-mesh.svc-{i}:max=3", "first label needs"),
    ],
)
def test_a_bad_spec_is_a_clear_error(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        MemberSource(spec)


def test_the_default_resolver_asks_the_system() -> None:
    assert resolves("localhost")
    assert not resolves("no-such-host.invalid")
