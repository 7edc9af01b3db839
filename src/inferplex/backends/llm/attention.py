"""Attention over the paged KV cache for one step's varlen batch: the decodes of the step
(one query each) in one padded call, each prefill chunk in a call of its own (a chunk after
cached tokens attends to them and causally to itself).

The keys and values of the step's tokens are written to their slots first (slot = block *
block_size + offset), then each sequence's are gathered from its blocks, so a chunk sees the
tokens of earlier steps and of itself alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True, slots=True)
class PrefillChunk:
    """A prompt chunk's rows of the step (``row`` .. ``row + count``) and the cache slots of
    its sequence's keys, earlier tokens and its own (None where the chunk is the whole
    context: plain causal attention over the step's own keys)."""

    row: int
    count: int
    key_slots: torch.Tensor | None
    mask: torch.Tensor | None


@dataclass(frozen=True, slots=True)
class AttentionBatch:
    """Where one step's tokens go in the cache and what each attends to."""

    #: each token's cache slot
    slots: torch.Tensor
    #: the step's first ``decodes`` tokens are decodes, one per sequence
    decodes: int
    #: [decodes, most blocks] each decoding sequence's blocks (padded with block 0): whole
    #: blocks are gathered, a far cheaper copy than token by token
    decode_blocks: torch.Tensor | None
    #: [decodes, 1, 1, most blocks x block size]: which of the gathered keys are real
    decode_mask: torch.Tensor | None
    prefills: tuple[PrefillChunk, ...]


@dataclass(frozen=True, slots=True)
class StepInputs:
    """One step's varlen batch for the model: its tokens, their positions, what they attend
    to, and the rows whose logits are wanted (the tokens that sample)."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    attention: AttentionBatch
    logits_rows: torch.Tensor


class LayerCache:
    """One layer's keys and values: [slots, kv heads, head dim] each, slot = block x
    block_size + offset (``blocks_of_*``: the same memory, a row per block)."""

    __slots__ = ("block_size", "blocks_of_keys", "blocks_of_values", "keys", "values")

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, block_size: int) -> None:
        self.keys = keys
        self.values = values
        self.block_size = block_size
        self.blocks_of_keys = keys.view(-1, block_size * keys.shape[1] * keys.shape[2])
        self.blocks_of_values = values.view(-1, block_size * values.shape[1] * values.shape[2])


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cache: LayerCache,
    batch: AttentionBatch,
    scale: float,
) -> torch.Tensor:
    """q [tokens, heads, dim], k and v [tokens, kv heads, dim] → [tokens, heads * dim]."""
    cache.keys.index_copy_(0, batch.slots, k)
    cache.values.index_copy_(0, batch.slots, v)
    tokens, heads, dim = q.shape
    gqa = heads != k.shape[1]
    out = q.new_empty(tokens, heads, dim)
    n = batch.decodes
    if n:
        assert batch.decode_blocks is not None
        # [n, kv heads, keys, dim]
        keys = _gather(cache.blocks_of_keys, batch.decode_blocks, k.shape[1:])
        values = _gather(cache.blocks_of_values, batch.decode_blocks, v.shape[1:])
        mask = batch.decode_mask
        if q.dtype == torch.float32 or q.device.type != "cpu":  # SDPA's kernels are faster there
            attended = F.scaled_dot_product_attention(
                q[:n].unsqueeze(2), keys, values, mask, scale=scale, enable_gqa=gqa
            ).squeeze(2)
        else:
            assert mask is not None
            attended = _decode_attention(q[:n], keys, values, mask, scale)
        out[:n] = attended
    for chunk in batch.prefills:
        rows = slice(chunk.row, chunk.row + chunk.count)
        query = q[rows].transpose(0, 1).unsqueeze(0)
        if chunk.key_slots is None:
            keys, values = k[rows], v[rows]
        else:
            keys, values = cache.keys[chunk.key_slots], cache.values[chunk.key_slots]
        attended = F.scaled_dot_product_attention(
            query,
            keys.transpose(0, 1).unsqueeze(0),
            values.transpose(0, 1).unsqueeze(0),
            chunk.mask,
            is_causal=chunk.key_slots is None,
            scale=scale,
            enable_gqa=gqa,
        )
        out[rows] = attended[0].transpose(0, 1)
    return out.reshape(tokens, heads * dim)


def _decode_attention(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, scale: float
) -> torch.Tensor:
    """One query per sequence, q [n, heads, dim] over keys and values [n, kv heads, keys,
    dim] where ``mask`` [n, 1, 1, keys] is True, in bfloat16 or float16: two batched matrix
    products, the query heads of a KV head as the rows of one (no copy of the keys per query
    head), the softmax in float32. SDPA's CPU flash kernel handles a single query in
    bfloat16 poorly: alone, this is 3-5x faster for 8-16 decodes of 160-320 keys; a
    reference-model step of 16 decodes 5-10% faster, of 8 about even (thread CPU time, a busy
    machine). In float32 SDPA stays the faster on the gathered (strided) keys, and on a GPU
    its fused kernels: it is kept for both."""
    n, heads, dim = q.shape
    kv_heads = keys.shape[1]
    grouped = (q * scale).view(n, kv_heads, heads // kv_heads, dim)
    scores = torch.matmul(grouped, keys.transpose(-1, -2)).float()
    scores.masked_fill_(mask.logical_not(), float("-inf"))
    weights = torch.softmax(scores, dim=-1).to(values.dtype)
    return torch.matmul(weights, values).view(n, heads, dim)


def _gather(blocks: torch.Tensor, table: torch.Tensor, head: torch.Size) -> torch.Tensor:
    """The blocks of ``table`` [n, width] as [n, kv heads, keys, dim] (``head``: kv heads,
    dim); one row copied per block."""
    n = table.shape[0]
    gathered = blocks.index_select(0, table.reshape(-1))
    return gathered.view(n, -1, *head).transpose(1, 2)
