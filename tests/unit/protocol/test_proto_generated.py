"""The committed descriptor set: up to date with proto/, wire-compatible with tritonclient's
`inference` protos, and loadable in one process with tritonclient in either import order."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from inferplex.protocol.v2 import generated as pb

ROOT = Path(__file__).resolve().parents[3]
COMMITTED = ROOT / "src/inferplex/protocol/v2/generated/inference.desc"


def descriptor_set(path: Path) -> descriptor_pb2.FileDescriptorSet:
    return descriptor_pb2.FileDescriptorSet.FromString(path.read_bytes())


def test_committed_descriptor_set_matches_the_protos(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    # Copies, so that the regeneration cannot touch the working tree.
    shutil.copytree(ROOT / "proto", tmp_path / "proto")
    shutil.copytree(ROOT / "scripts", tmp_path / "scripts")
    subprocess.run(
        ["bash", str(tmp_path / "scripts/gen_proto.sh"), str(tmp_path / "out")],
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHON": sys.executable},
    )
    fresh = descriptor_set(tmp_path / "out/inference.desc")
    committed = descriptor_set(COMMITTED)
    assert [f.name for f in fresh.file] == [f.name for f in committed.file]
    for new, old in zip(fresh.file, committed.file, strict=True):
        assert new == old, f"{old.name} is stale: run scripts/gen_proto.sh and commit the result"


def test_every_message_is_a_module_attribute() -> None:
    """Of the V2 package (gRPC's health and reflection messages are the services' own)."""
    files = [f for f in descriptor_set(COMMITTED).file if f.package == "inference"]
    names = {m.name for f in files for m in f.message_type}
    exposed = {name for name in names if getattr(pb, name, None) is not None}
    assert exposed == names
    for name in names:
        assert getattr(pb, name).DESCRIPTOR.full_name == f"inference.{name}"


def _repeated(field) -> bool:
    # protobuf 7 dropped FieldDescriptor.label; older releases lack is_repeated
    if hasattr(field, "is_repeated"):
        return bool(field.is_repeated)
    return field.label == field.LABEL_REPEATED


def _fields(message) -> dict[str, tuple]:
    return {
        f.name: (
            f.number,
            f.type,
            _repeated(f),
            f.message_type.full_name if f.message_type else None,
            f.enum_type.full_name if f.enum_type else None,
            f.containing_oneof.name if f.containing_oneof else None,
        )
        for f in message.fields
    }


def _enums(message_or_file) -> dict[str, dict[str, int]]:
    enums = getattr(message_or_file, "enum_types", None)
    if enums is None:
        enums = message_or_file.enum_types_by_name.values()
    return {e.full_name: {v.name: v.number for v in e.values} for e in enums}


def _walk(message):
    yield message
    for nested in message.nested_types:
        yield from _walk(nested)


def test_wire_compatible_with_tritonclient() -> None:
    """Every field we declare exists in tritonclient's copy of Triton's protos with the same
    number, type and label; every enum value has the same number; every RPC has the same
    request and response types."""
    pytest.importorskip("tritonclient.grpc")
    from tritonclient.grpc import model_config_pb2, service_pb2

    theirs = service_pb2.DESCRIPTOR.pool
    checked = 0
    for file_name in ("grpc_service.proto", "model_config.proto"):
        ours_file = pb.POOL.FindFileByName(file_name)
        for enum_name, values in _enums(ours_file).items():
            reference = theirs.FindEnumTypeByName(enum_name)
            assert values == {v: reference.values_by_name[v].number for v in values}
        for top in ours_file.message_types_by_name.values():
            for message in _walk(top):
                checked += _check_message(message, theirs)
    assert checked > 200
    assert model_config_pb2.ModelConfig.DESCRIPTOR.full_name == "inference.ModelConfig"
    _check_service(theirs)


def _check_message(message, theirs) -> int:
    """``message`` agrees with its namesake in the pool ``theirs``, field by field and enum
    by enum; returns the fields compared. An older tritonclient lacks messages and fields
    added to Triton since: everything both sides declare must agree."""
    try:
        reference = theirs.FindMessageTypeByName(message.full_name)
    except KeyError:
        return 0
    checked = 0
    reference_fields = _fields(reference)
    for name, spec in _fields(message).items():
        if name in reference_fields:
            assert reference_fields[name] == spec, f"{message.full_name}.{name}"
            checked += 1
    for enum_name, values in _enums(message).items():
        assert values.items() <= _enums(reference)[enum_name].items(), enum_name
    return checked


def _check_service(theirs) -> None:
    """Every RPC both sides declare has the same request and response types, and streams
    alike."""
    reference_service = theirs.FindServiceByName(pb.SERVICE_NAME)
    for method in pb.SERVICE.methods:
        other = reference_service.methods_by_name.get(method.name)
        if other is None:
            continue
        assert (method.input_type.full_name, method.output_type.full_name) == (
            other.input_type.full_name,
            other.output_type.full_name,
        )
        assert (method.client_streaming, method.server_streaming) == (
            other.client_streaming,
            other.server_streaming,
        )


_IMPORT_BOTH = """
import warnings
warnings.simplefilter("error")
warnings.filterwarnings("ignore", category=DeprecationWarning)
from google.protobuf.internal import api_implementation
from google.protobuf import descriptor_pool
for module in {order}:
    __import__(module)
import tritonclient.grpc as client
from tritonclient.grpc import service_pb2
from inferplex.protocol.v2 import generated as pb
ours = pb.ModelInferRequest(model_name="m", raw_input_contents=[b"abcd"])
theirs = service_pb2.ModelInferRequest.FromString(ours.SerializeToString())
assert theirs.model_name == "m" and theirs.raw_input_contents == [b"abcd"]
assert pb.ModelInferRequest is not service_pb2.ModelInferRequest
assert descriptor_pool.Default().FindMessageTypeByName("inference.ModelInferRequest") is (
    service_pb2.ModelInferRequest.DESCRIPTOR
)
print(api_implementation.Type())
"""


@pytest.mark.parametrize(
    "order",
    [
        ["tritonclient.grpc", "inferplex.protocol.v2.generated"],
        ["inferplex.protocol.v2.generated", "tritonclient.grpc"],
        ["inferplex.protocol.v2.generated", "inferplex.frontends.grpc", "tritonclient.grpc"],
    ],
    ids=["tritonclient-first", "inferplex-first", "frontend-first"],
)
def test_imports_with_tritonclient_in_one_process(order: list[str]) -> None:
    pytest.importorskip("tritonclient.grpc")
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_BOTH.format(order=order)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "upb"


def test_default_pool_stays_free_of_our_messages() -> None:
    script = (
        "from google.protobuf import descriptor_pool\n"
        "import inferplex.protocol.v2.generated\n"
        "try:\n"
        "    descriptor_pool.Default().FindMessageTypeByName('inference.ModelInferRequest')\n"
        "except KeyError:\n"
        "    print('free')\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.stdout.strip() == "free", result.stderr
