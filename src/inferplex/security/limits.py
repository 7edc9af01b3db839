"""Request limits beyond the body size: elements per input tensor and bytes per BYTES
element. The element count is checked from the declared shape before a tensor's data is
decoded (``check_shape``), and everything again on the decoded request (``check``), before
the request reaches a model."""

from __future__ import annotations

from math import prod

from inferplex.datatypes import element_chunks
from inferplex.errors import PayloadTooLargeError
from inferplex.types import InferenceRequest


class RequestLimits:
    def __init__(self, max_tensor_elements: int, max_string_bytes: int) -> None:
        self.max_tensor_elements = max_tensor_elements
        self.max_string_bytes = max_string_bytes

    def check_shape(self, name: str, shape: tuple[int, ...]) -> None:
        """PayloadTooLargeError when an input of ``shape`` would have too many elements:
        decoders call it before they allocate or convert anything for the input."""
        count = prod(shape)
        if count > self.max_tensor_elements:
            raise self._too_many(name, count)

    def check(self, request: InferenceRequest) -> None:
        """Raise PayloadTooLargeError (413 / RESOURCE_EXHAUSTED) naming the input and limit."""
        for tensor in request.inputs:
            data = tensor.data
            if data.size > self.max_tensor_elements:
                raise self._too_many(tensor.name, data.size)
            if tensor.datatype == "BYTES" and data.size:
                # len in C over the elements, a chunk at a time: there may be millions
                longest = max(max(map(len, items)) for items in element_chunks(data))
                if longest > self.max_string_bytes:
                    raise PayloadTooLargeError(
                        f"input '{tensor.name}' has an element of {longest} bytes, above the "
                        f"limit of {self.max_string_bytes} (INFERPLEX_MAX_STRING_BYTES)"
                    )

    def _too_many(self, name: str, count: int) -> PayloadTooLargeError:
        return PayloadTooLargeError(
            f"input '{name}' has {count} elements, above the limit of "
            f"{self.max_tensor_elements} (INFERPLEX_MAX_TENSOR_ELEMENTS)"
        )
