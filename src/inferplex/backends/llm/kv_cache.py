"""The KV cache's memory: one tensor holding every layer's keys and values for every block
of the pool, sized by a byte budget and zeroed when made, so the pages are the process's from
the start (the server's memory budget measures a load by the growth of its RSS)."""

from __future__ import annotations

import torch

from inferplex.backends.llm.attention import LayerCache
from inferplex.backends.llm.shape import ModelShape
from inferplex.errors import ConfigError


def block_bytes(shape: ModelShape, block_size: int, dtype: torch.dtype) -> int:
    """Bytes of one block: keys and values of ``block_size`` tokens in every layer."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    per_token = 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * itemsize
    return per_token * block_size


class KvCache:
    """``num_blocks`` blocks of ``block_size`` tokens for every layer."""

    def __init__(
        self,
        shape: ModelShape,
        budget_bytes: int,
        block_size: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        size = block_bytes(shape, block_size, dtype)
        self.num_blocks = budget_bytes // size
        if self.num_blocks < 1:
            raise ConfigError(
                f"parameter kv_cache_bytes ({budget_bytes}) is below one KV block of "
                f"{block_size} tokens ({size} bytes)"
            )
        self.block_size = block_size
        self.bytes = self.num_blocks * size
        slots = self.num_blocks * block_size
        self._memory = torch.zeros(
            (shape.num_layers, 2, slots, shape.num_kv_heads, shape.head_dim),
            dtype=dtype,
            device=device,
        )
        self.layers = [LayerCache(layer[0], layer[1], block_size) for layer in self._memory]
