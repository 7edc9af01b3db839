"""API tokens with two scopes, TorchServe-style: an inference token and a management token.

A request presents ``Authorization: Bearer <token>`` (HTTP header or gRPC metadata). The
management token is accepted everywhere; the inference token only for inference scope.
Comparison is constant-time (``hmac.compare_digest``) so a token cannot be guessed by timing.

A request that passes is made by a *principal*: the token it presented (``MANAGEMENT`` or
``INFERENCE``), or no one in particular (``ANONYMOUS``: no token was needed). What a principal
creates, a shared-memory region, is its own.
"""

from __future__ import annotations

import hmac

from inferplex.errors import PermissionDeniedError, UnauthenticatedError
from inferplex.security.scopes import Scope

_BEARER = "bearer "

#: who made a request that passed: the token it presented, or no one in particular
Principal = str | None
ANONYMOUS: Principal = None
INFERENCE: Principal = "inference"
MANAGEMENT: Principal = "management"


class TokenAuth:
    """Checks the credentials of one request. A scope whose token is not set is open."""

    def __init__(self, inference_token: str | None, management_token: str | None) -> None:
        self._inference = inference_token.encode() if inference_token else None
        self._management = management_token.encode() if management_token else None

    @property
    def enabled(self) -> bool:
        return self._inference is not None or self._management is not None

    def check(self, scope: Scope, authorization: str | None) -> Principal:
        """The principal of a request that may proceed; raise UnauthenticatedError (no or
        unknown token) or PermissionDeniedError (a valid token of the wrong scope)."""
        if scope is Scope.HEALTH or not self.enabled:
            return ANONYMOUS
        if scope is Scope.INFERENCE and self._inference is None:
            # only a management token is set: inference stays open, and the management
            # token's holder is still itself there (its shared-memory regions are its own)
            presented = _bearer(authorization)
            if presented is not None and _matches(presented, self._management):
                return MANAGEMENT
            return ANONYMOUS
        if scope is Scope.MANAGEMENT and self._management is None:
            # tokens are in use, so the management API must not be left open
            raise PermissionDeniedError(
                "the management API is off while only an inference token is set: start the "
                "server with --management-token to use it"
            )
        presented = _bearer(authorization)
        if presented is None:
            raise UnauthenticatedError(
                f"the {scope.value} API needs a token: send the header "
                "'Authorization: Bearer <token>'"
            )
        if _matches(presented, self._management):
            return MANAGEMENT
        if _matches(presented, self._inference):
            if scope is Scope.INFERENCE:
                return INFERENCE
            raise PermissionDeniedError(
                "this token has the inference scope only; the management API needs the "
                "management token"
            )
        raise UnauthenticatedError(f"the token is not valid for the {scope.value} API")


def _matches(presented: bytes, token: bytes | None) -> bool:
    return token is not None and hmac.compare_digest(presented, token)


def _bearer(authorization: str | None) -> bytes | None:
    if not authorization or authorization[: len(_BEARER)].lower() != _BEARER:
        return None
    token = authorization[len(_BEARER) :].strip()
    return token.encode() if token else None
