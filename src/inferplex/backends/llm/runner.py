"""One forward pass for a step: the plan's chunks made into a varlen batch (token ids,
positions, cache slots, what each token attends to) and run through the model; the logits
of the chunks that end in a sampled token come back, in the plan's order."""

from __future__ import annotations

from typing import Protocol

import torch

from inferplex.backends.llm.attention import (
    AttentionBatch,
    LayerCache,
    PrefillChunk,
    StepInputs,
)
from inferplex.backends.llm.kv_cache import KvCache
from inferplex.backends.llm.policy import Chunk, StepPlan


class CausalModel(Protocol):
    def forward(self, step: StepInputs, caches: list[LayerCache]) -> torch.Tensor: ...


class ModelRunner:
    """Runs steps of ``model`` over ``cache`` on ``device``."""

    def __init__(self, model: CausalModel, cache: KvCache, device: torch.device) -> None:
        self.model = model
        self.cache = cache
        self.device = device

    def run(self, plan: StepPlan) -> tuple[list[Chunk], torch.Tensor]:
        """The chunks that sample, and their logits [chunks, vocab] (float32, on the CPU)."""
        # decodes first: their rows are the batch's first, attended in one call
        chunks = sorted(plan.chunks, key=lambda c: c.count != 1 or c.start == 0)
        decodes = [c for c in chunks if c.count == 1 and c.start > 0]
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        sampled: list[Chunk] = []
        rows: list[int] = []
        for chunk in chunks:
            seq = chunk.seq
            ids += seq.tokens[chunk.start : chunk.start + chunk.count]
            span = range(chunk.start, chunk.start + chunk.count)
            positions += span
            slots += self._slots(seq.blocks, span)
            if chunk.sample:
                sampled.append(chunk)
                rows.append(len(ids) - 1)
        device = self.device
        batch = AttentionBatch(
            slots=torch.tensor(slots, dtype=torch.int64, device=device),
            decodes=len(decodes),
            decode_blocks=None,
            decode_mask=None,
            prefills=self._prefills(chunks[len(decodes) :], len(decodes)),
        )
        if decodes:
            blocks, mask = self._decode_blocks(decodes)
            batch = AttentionBatch(batch.slots, len(decodes), blocks, mask, batch.prefills)
        with torch.inference_mode():
            step = StepInputs(
                torch.tensor(ids, dtype=torch.int64, device=device),
                torch.tensor(positions, dtype=torch.int64, device=device),
                batch,
                torch.tensor(rows, dtype=torch.int64, device=device),
            )
            logits = self.model.forward(step, self.cache.layers)
        return sampled, logits.cpu()

    def _slots(self, blocks: list[int], span: range) -> list[int]:
        size = self.cache.block_size
        return [blocks[p // size] * size + p % size for p in span]

    def _decode_blocks(self, decodes: list[Chunk]) -> tuple[torch.Tensor, torch.Tensor]:
        """Each decoding sequence's blocks, and which of their slots hold its keys."""
        size = self.cache.block_size
        contexts = torch.tensor([c.start + 1 for c in decodes])
        width = -(-int(contexts.max()) // size)
        table = torch.zeros((len(decodes), width), dtype=torch.int64)
        for row, chunk in enumerate(decodes):
            blocks = chunk.seq.blocks[:width]
            table[row, : len(blocks)] = torch.tensor(blocks, dtype=torch.int64)
        position = torch.arange(width * size)
        mask = position.unsqueeze(0) < contexts.unsqueeze(1)
        return table.to(self.device), mask.view(len(decodes), 1, 1, -1).to(self.device)

    def _prefills(self, chunks: list[Chunk], row: int) -> tuple[PrefillChunk, ...]:
        prefills: list[PrefillChunk] = []
        for chunk in chunks:
            if chunk.start == 0:  # the whole context is the chunk's own: plain causal
                prefills.append(PrefillChunk(row, chunk.count, None, None))
            else:
                context = chunk.start + chunk.count
                key_slots = torch.tensor(
                    self._slots(chunk.seq.blocks, range(context)),
                    dtype=torch.int64,
                    device=self.device,
                )
                # query i (at position start + i) sees keys 0 .. start + i
                query = torch.arange(chunk.start, context, device=self.device).unsqueeze(1)
                mask = torch.arange(context, device=self.device).unsqueeze(0) <= query
                prefills.append(PrefillChunk(row, chunk.count, key_slots, mask))
            row += chunk.count
        return tuple(prefills)
