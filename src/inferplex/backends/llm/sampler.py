"""Choosing each sequence's next token from its logits, per request: penalties, then greedy
or temperature, top-k and top-p sampling with the request's own random generator (a request
with a seed draws the same tokens whatever it is batched with)."""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import torch

from inferplex.backends.llm.params import SamplingRow


def new_generator(seed: int | None) -> torch.Generator:
    """A request's random generator (CPU: sampling runs on the step's CPU copy of the
    logits): seeded by the request, else at random."""
    generator = torch.Generator()
    generator.manual_seed(secrets.randbits(63) if seed is None else seed % 2**64)
    return generator


def sample(logits: torch.Tensor, rows: Sequence[SamplingRow]) -> list[int]:
    """The next token of each row; ``logits`` [rows, vocab] float32 on the CPU."""
    if all(r.params.greedy and not r.params.penalised and not r.banned for r in rows):
        return logits.argmax(dim=-1).tolist()
    return [_one(logits[i], row) for i, row in enumerate(rows)]


def _one(logits: torch.Tensor, row: SamplingRow) -> int:
    params = row.params
    if params.penalised:
        logits = _penalise(logits.clone(), row)
    if row.banned:
        logits = logits.clone()
        logits[list(row.banned)] = float("-inf")
    if params.greedy:
        return int(logits.argmax())
    logits = logits / params.temperature
    if 0 < params.top_k < logits.shape[0]:
        kth = torch.topk(logits, params.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if params.top_p < 1.0:
        ordered, order = probs.sort(descending=True)
        # drop the tokens after the smallest set whose mass reaches top_p (the first stays)
        drop = ordered.cumsum(0) - ordered > params.top_p
        ordered[drop] = 0.0
        probs = torch.zeros_like(probs).scatter_(0, order, ordered)
    return int(torch.multinomial(probs, 1, generator=row.generator))


def _penalise(logits: torch.Tensor, row: SamplingRow) -> torch.Tensor:
    """vLLM's penalties: repetition over the prompt and the output (divides a positive
    logit, multiplies a negative one), presence and frequency over the output."""
    params = row.params
    vocab = logits.shape[0]
    if params.repetition_penalty != 1.0:
        seen = torch.tensor(sorted({*row.prompt, *row.output}), dtype=torch.int64)
        seen = seen[seen < vocab]
        values = logits[seen]
        penalty = params.repetition_penalty
        logits[seen] = torch.where(values > 0, values / penalty, values * penalty)
    if row.output and (params.presence_penalty or params.frequency_penalty):
        counts = torch.bincount(torch.tensor(row.output, dtype=torch.int64), minlength=vocab)
        counts = counts[:vocab].to(logits.dtype)
        logits -= params.frequency_penalty * counts
        logits -= params.presence_penalty * (counts > 0).to(logits.dtype)
    return logits
