import pytest

from inferplex.errors import PermissionDeniedError, UnauthenticatedError
from inferplex.security.scopes import Scope, grpc_scope
from inferplex.security.tokens import ANONYMOUS, INFERENCE, MANAGEMENT, TokenAuth

BOTH = TokenAuth("inf-secret", "mgmt-secret")


def test_grpc_scopes() -> None:
    service = "/inference.GRPCInferenceService/"
    assert grpc_scope(service + "ServerReady") is Scope.HEALTH
    assert grpc_scope(service + "ModelInfer") is Scope.INFERENCE
    assert grpc_scope(service + "RepositoryModelLoad") is Scope.MANAGEMENT
    assert grpc_scope(service + "SystemSharedMemoryRegister") is Scope.MANAGEMENT
    # only exact method paths have a scope of their own: anything else is closed
    assert grpc_scope(service + "ModelInfer/") is Scope.MANAGEMENT
    assert grpc_scope("/other.Service/ServerLive") is Scope.MANAGEMENT
    # gRPC's health service is open as /v2/health/* is, reflection too (it shows the API's
    # definitions only); the health list names every model, as the repository index does
    assert grpc_scope("/grpc.health.v1.Health/Check") is Scope.HEALTH
    assert grpc_scope("/grpc.health.v1.Health/Watch") is Scope.HEALTH
    assert grpc_scope("/grpc.health.v1.Health/List") is Scope.INFERENCE
    for package in ("v1", "v1alpha"):
        reflection = f"/grpc.reflection.{package}.ServerReflection/ServerReflectionInfo"
        assert grpc_scope(reflection) is Scope.HEALTH


def test_no_tokens_means_everything_open() -> None:
    auth = TokenAuth(None, None)
    assert not auth.enabled
    for scope in Scope:
        auth.check(scope, None)


def test_health_is_always_open() -> None:
    BOTH.check(Scope.HEALTH, None)


def test_inference_token_or_management_token_opens_inference() -> None:
    BOTH.check(Scope.INFERENCE, "Bearer inf-secret")
    BOTH.check(Scope.INFERENCE, "bearer mgmt-secret")


def test_management_needs_the_management_token() -> None:
    BOTH.check(Scope.MANAGEMENT, "Bearer mgmt-secret")
    with pytest.raises(PermissionDeniedError, match="inference scope only"):
        BOTH.check(Scope.MANAGEMENT, "Bearer inf-secret")


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer ", "Basic abc", "inf-secret"])
def test_missing_or_malformed_credentials_are_unauthenticated(header: str | None) -> None:
    with pytest.raises(UnauthenticatedError, match="Authorization: Bearer"):
        BOTH.check(Scope.INFERENCE, header)


def test_wrong_token_is_unauthenticated() -> None:
    with pytest.raises(UnauthenticatedError, match="not valid for the inference API"):
        BOTH.check(Scope.INFERENCE, "Bearer inf-secreT")


def test_only_a_management_token_leaves_inference_open() -> None:
    auth = TokenAuth(None, "mgmt-secret")
    auth.check(Scope.INFERENCE, None)
    with pytest.raises(UnauthenticatedError):
        auth.check(Scope.MANAGEMENT, None)


def test_only_an_inference_token_turns_management_off() -> None:
    auth = TokenAuth("inf-secret", None)
    with pytest.raises(PermissionDeniedError, match="--management-token"):
        auth.check(Scope.MANAGEMENT, "Bearer inf-secret")


def test_a_request_that_passes_is_made_by_the_principal_of_its_token() -> None:
    # what a principal registers (a shared-memory region) is its own
    assert BOTH.check(Scope.INFERENCE, "Bearer inf-secret") == INFERENCE
    assert BOTH.check(Scope.INFERENCE, "Bearer mgmt-secret") == MANAGEMENT
    assert BOTH.check(Scope.MANAGEMENT, "Bearer mgmt-secret") == MANAGEMENT
    assert BOTH.check(Scope.HEALTH, "Bearer mgmt-secret") is ANONYMOUS
    assert TokenAuth(None, None).check(Scope.MANAGEMENT, "Bearer x") is ANONYMOUS
    # only a management token: inference is open to anyone, and its holder stays itself
    only = TokenAuth(None, "mgmt-secret")
    assert only.check(Scope.INFERENCE, None) is ANONYMOUS
    assert only.check(Scope.INFERENCE, "Bearer wrong") is ANONYMOUS
    assert only.check(Scope.INFERENCE, "Bearer mgmt-secret") == MANAGEMENT
    assert only.check(Scope.MANAGEMENT, "Bearer mgmt-secret") == MANAGEMENT
