"""Request limits beyond the body size: elements per input tensor and bytes per BYTES
element. Checked by the frontends after decoding, before the request reaches a model."""

from __future__ import annotations

from inferplex.core.types import InferenceRequest
from inferplex.errors import PayloadTooLargeError


class RequestLimits:
    def __init__(self, max_tensor_elements: int, max_string_bytes: int) -> None:
        self.max_tensor_elements = max_tensor_elements
        self.max_string_bytes = max_string_bytes

    def check(self, request: InferenceRequest) -> None:
        """Raise PayloadTooLargeError (413 / RESOURCE_EXHAUSTED) naming the input and limit."""
        for tensor in request.inputs:
            data = tensor.data
            if data.size > self.max_tensor_elements:
                raise PayloadTooLargeError(
                    f"input '{tensor.name}' has {data.size} elements, above the limit of "
                    f"{self.max_tensor_elements} (INFERPLEX_MAX_TENSOR_ELEMENTS)"
                )
            if tensor.datatype == "BYTES" and data.size:
                longest = max(len(item) for item in data.reshape(-1))
                if longest > self.max_string_bytes:
                    raise PayloadTooLargeError(
                        f"input '{tensor.name}' has an element of {longest} bytes, above the "
                        f"limit of {self.max_string_bytes} (INFERPLEX_MAX_STRING_BYTES)"
                    )
