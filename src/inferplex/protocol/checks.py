"""What a decoder checks of each input tensor from what the request declares (its name,
datatype and shape), before it decodes the tensor's data: a body whose tensors are too
large, or that the model would refuse, costs no decoding."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from inferplex.core.validation import RequestValidator
from inferplex.security.limits import RequestLimits

#: (input name, datatype, shape) -> None; raises an InferplexError to refuse the request
InputCheck = Callable[[str, str, tuple[int, ...]], None]
#: (model name, model version) -> the InputCheck for a request to that model
CheckFactory = Callable[[str, str], InputCheck]


class ModelChecks(Protocol):
    """Where the checks of the model serving a request come from: the engine."""

    def input_checks(self, name: str, version: str = "") -> RequestValidator | None: ...


def declared_checks(limits: RequestLimits, models: ModelChecks) -> CheckFactory:
    """The per-input checks of a request: ``limits`` first, then the model's, if known."""

    def for_model(model: str, version: str) -> InputCheck:
        validator = models.input_checks(model, version)

        def check(name: str, datatype: str, shape: tuple[int, ...]) -> None:
            limits.check_shape(name, shape)
            if validator is not None:
                validator.check_declared(name, datatype, shape)

        return check

    return for_model
