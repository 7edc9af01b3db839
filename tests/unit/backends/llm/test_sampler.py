"""The sampler on made-up logits: greedy, top-k and top-p leave only the tokens they allow,
penalties as vLLM applies them, banned tokens, and a request's generator making its draws
reproducible."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from inferplex.backends.llm.params import SamplingParams, SamplingRow  # noqa: E402
from inferplex.backends.llm.sampler import new_generator, sample  # noqa: E402

LOGITS = torch.tensor([[1.0, 3.0, 2.0, 0.5]])


def row(params: SamplingParams, **kwargs: object) -> SamplingRow:
    return SamplingRow(params, new_generator(params.seed), **kwargs)  # type: ignore[arg-type]


def draws(params: SamplingParams, count: int = 200) -> set[int]:
    r = row(params, prompt=(), output=())
    return {sample(LOGITS, [r])[0] for _ in range(count)}


def test_greedy_takes_the_largest_and_top_k_top_p_narrow_the_draw() -> None:
    assert sample(LOGITS, [row(SamplingParams(temperature=0), prompt=(), output=())]) == [1]
    assert draws(SamplingParams(temperature=1.0, seed=1)) == {0, 1, 2, 3}
    assert draws(SamplingParams(temperature=1.0, top_k=2, seed=1)) == {1, 2}
    # probabilities ~ .09 .67 .24 .05: the top 0.7 needs tokens 1 and 2
    assert draws(SamplingParams(temperature=1.0, top_p=0.7, seed=1)) == {1, 2}
    assert draws(SamplingParams(temperature=1.0, top_p=0.5, seed=1)) == {1}


def test_a_seed_repeats_the_draws() -> None:
    params = SamplingParams(temperature=1.0, seed=5)
    first = [sample(LOGITS, [r])[0] for r in [row(params, prompt=(), output=())] for _ in range(20)]
    again_row = row(params, prompt=(), output=())
    assert [sample(LOGITS, [again_row])[0] for _ in range(20)] == first


def test_penalties_and_banned_tokens_change_the_greedy_choice() -> None:
    greedy = SamplingParams(temperature=0)
    repeated = SamplingParams(temperature=0, repetition_penalty=2.0)
    assert sample(LOGITS, [row(repeated, prompt=(1,), output=())]) == [2]  # 3 / 2 < 2
    frequent = SamplingParams(temperature=0, frequency_penalty=0.6)
    assert sample(LOGITS, [row(frequent, prompt=(), output=(1, 1))]) == [2]  # 3 - 1.2
    present = SamplingParams(temperature=0, presence_penalty=1.5)
    assert sample(LOGITS, [row(present, prompt=(), output=(1,))]) == [2]  # 3 - 1.5
    # presence counts a token once, frequency each time
    once = SamplingParams(temperature=0, presence_penalty=0.6)
    assert sample(LOGITS, [row(once, prompt=(), output=(1, 1))]) == [1]  # 3 - 0.6
    assert sample(LOGITS, [row(greedy, prompt=(), output=(), banned=(1,))]) == [2]
