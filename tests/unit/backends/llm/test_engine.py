"""The engine on tiny random-weight models (Llama and GPT-2 shapes), stepped by hand: greedy
tokens identical to transformers' own ``generate``; the same tokens for a sequence alone,
joined by others mid-batch, its prompt chunked, its prefix cached, preempted and resumed;
cancellation and finishing freeing every block; stop strings, stop tokens, max_tokens;
seeded sampling reproducible whatever the batch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from inferplex.backends.llm.admission import prepare  # noqa: E402
from inferplex.backends.llm.generation import ABORT, LENGTH, STOP, Generation, Piece  # noqa: E402
from inferplex.backends.llm.kv_cache import block_bytes  # noqa: E402
from inferplex.backends.llm.loading import LoadedModel  # noqa: E402
from inferplex.backends.llm.params import SamplingParams  # noqa: E402
from inferplex.errors import InvalidInputError  # noqa: E402

GREEDY = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=12)
PROMPTS = (
    "The server loads models from a repository",
    "def infer(request):",
    "Each model has a config",
)


class Request:
    """A request submitted to a hand-stepped engine, with the pieces it received."""

    def __init__(self, model: LoadedModel, prompt: str | list[int], params: SamplingParams) -> None:
        ids = model.tokenizer.encode(prompt) if isinstance(prompt, str) else prompt
        self.pieces: list[Piece] = []
        self.generation: Generation = prepare(model, ids, params, self.pieces.append)
        self.prompt = ids
        model.engine.submit(self.generation)

    @property
    def done(self) -> bool:
        return bool(self.pieces) and self.pieces[-1].final

    @property
    def output(self) -> list[int]:
        return self.generation.seq.tokens[len(self.prompt) :]

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.pieces)


def run(model: LoadedModel, requests: Sequence[Request], limit: int = 500) -> None:
    for _ in range(limit):
        if all(r.done for r in requests):
            return
        model.engine.step()
    raise AssertionError("the requests did not finish")


def alone(model: LoadedModel, prompt: str, params: SamplingParams = GREEDY) -> list[int]:
    request = Request(model, prompt, params)
    run(model, [request])
    return request.output


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_greedy_tokens_are_those_of_transformers_generate(
    family: str, load: Callable[..., Any], llm_repository: Path
) -> None:
    model = load(family, max_num_batched_tokens=16)  # prompts chunked beside decodes
    requests = [Request(model, prompt, GREEDY) for prompt in PROMPTS]
    run(model, requests)
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        llm_repository / f"tiny_{family}" / "1"
    )
    for request in requests:
        expected = reference.generate(
            torch.tensor([request.prompt]), max_new_tokens=12, do_sample=False, eos_token_id=None
        )[0, len(request.prompt) :].tolist()
        assert request.output == expected
        assert request.pieces[-1].finish_reason == LENGTH
    assert model.engine.policy.pool.used == 0


def test_sequences_joining_and_leaving_mid_batch_get_the_tokens_they_get_alone(
    load: Callable[..., Any],
) -> None:
    model = load()
    expected = [alone(model, p) for p in PROMPTS]
    short = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=4)
    early = alone(model, PROMPTS[0], short)
    first = Request(model, PROMPTS[0], GREEDY)
    leaving = Request(model, PROMPTS[0], short)  # leaves after 4 tokens
    for _ in range(3):
        model.engine.step()
    joining = [Request(model, p, GREEDY) for p in PROMPTS[1:]]
    run(model, [first, leaving, *joining])
    assert [first.output, *[r.output for r in joining]] == expected
    assert leaving.output == early


def test_a_chunked_prompt_gives_the_same_tokens(load: Callable[..., Any]) -> None:
    prompt = " ".join(PROMPTS) * 3
    whole = alone(load(), prompt)
    chunked = load(max_num_batched_tokens=5)
    request = Request(chunked, prompt, GREEDY)
    assert len(request.prompt) > 5 * 4
    run(chunked, [request])
    assert request.output == whole


def test_a_cached_prefix_is_not_computed_again_and_changes_nothing(
    load: Callable[..., Any],
) -> None:
    model = load(block_size=4)
    prompt = " ".join(PROMPTS)
    first = alone(model, prompt)
    again = Request(model, prompt + " and more", GREEDY)
    reference = load(block_size=4, enable_prefix_caching=False)
    expected = alone(reference, prompt + " and more")
    run(model, [again])
    assert again.generation.seq.cached_tokens >= 4 * (len(again.prompt) // 4 - 2)
    assert model.engine.policy.pool.stats.hit > 0
    assert again.output == expected
    assert alone(model, prompt) == first


def test_preempted_sequences_resume_with_the_same_tokens(load: Callable[..., Any]) -> None:
    expected = [
        alone(load(), p, SamplingParams(temperature=0, ignore_eos=True, max_tokens=40))
        for p in PROMPTS
    ]
    shape = load().shape
    size = block_bytes(shape, 4, torch.float32)
    # 20 blocks of 4 tokens: each sequence needs up to 13 blocks, three at once run out
    small = load(block_size=4, kv_cache_bytes=20 * size)
    params = SamplingParams(temperature=0, ignore_eos=True, max_tokens=40)
    requests = [Request(small, p, params) for p in PROMPTS]
    run(small, requests)
    assert small.engine.policy.preemptions > 0
    assert [r.output for r in requests] == expected
    assert small.engine.policy.pool.used == 0


def test_a_cancelled_request_frees_its_blocks_within_one_step(load: Callable[..., Any]) -> None:
    model = load()
    staying = Request(model, PROMPTS[0], GREEDY)
    leaving = Request(model, PROMPTS[1], SamplingParams(temperature=0, max_tokens=200))
    for _ in range(3):
        model.engine.step()
    held = len(leaving.generation.seq.blocks)
    used = model.engine.policy.pool.used
    assert held > 0
    model.engine.cancel(leaving.generation)
    model.engine.step()
    assert leaving.done and leaving.pieces[-1].finish_reason == ABORT
    assert model.engine.policy.pool.used <= used - held + 1  # the one staying may grow
    run(model, [staying])
    assert model.engine.policy.pool.used == 0 and model.engine.counters.cancelled == 1


def test_a_stop_string_across_tokens_ends_the_output_before_it(load: Callable[..., Any]) -> None:
    model = load()
    tokens = alone(model, PROMPTS[0])
    decode = model.tokenizer.decode
    texts = [decode(tokens[:n]) for n in range(len(tokens) + 1)]
    # a stop string from the last character of one token's text into the next token's
    boundary = max(
        n
        for n in range(1, len(tokens))
        if texts[n + 1].startswith(texts[n])
        and len(texts[n + 1]) > len(texts[n])
        and (pair := texts[n][-1] + texts[n + 1][len(texts[n])]).isprintable()
        and "\ufffd" not in pair
    )
    stop = texts[boundary][-1] + texts[boundary + 1][len(texts[boundary])]
    request = Request(model, PROMPTS[0], SamplingParams(temperature=0, stop=[stop], max_tokens=12))
    run(model, [request])
    assert request.pieces[-1].finish_reason == STOP
    full = texts[-1]
    assert request.text == full[: full.find(stop)]
    assert len(request.output) <= boundary + 1


def test_stop_tokens_end_the_output_and_min_tokens_holds_them_back(
    load: Callable[..., Any],
) -> None:
    model = load()
    tokens = alone(model, PROMPTS[1])
    stopped = Request(model, PROMPTS[1], SamplingParams(temperature=0, stop_token_ids=(tokens[2],)))
    run(model, [stopped])
    assert stopped.output == tokens[:3] and stopped.pieces[-1].finish_reason == STOP
    held = Request(
        model,
        PROMPTS[1],
        SamplingParams(temperature=0, stop_token_ids=(tokens[2],), min_tokens=5, max_tokens=6),
    )
    run(model, [held])
    assert tokens[2] not in held.output[:5] and len(held.output) >= 5


def test_a_seeded_request_samples_the_same_tokens_alone_and_batched(
    load: Callable[..., Any],
) -> None:
    model = load()
    seeded = SamplingParams(
        temperature=1.0, top_p=0.9, top_k=50, seed=7, max_tokens=12, ignore_eos=True
    )
    first = alone(model, PROMPTS[0], seeded)
    others = [Request(model, p, SamplingParams(temperature=1.0, max_tokens=8)) for p in PROMPTS]
    again = Request(model, PROMPTS[0], seeded)
    run(model, [*others, again])
    assert again.output == first
    other_seed = alone(
        model, PROMPTS[0], SamplingParams(temperature=1.0, seed=8, max_tokens=12, ignore_eos=True)
    )
    assert other_seed != first


def test_a_prompt_beyond_the_context_is_refused_before_any_work(
    load: Callable[..., Any],
) -> None:
    model = load(max_model_len=32)
    ids = model.tokenizer.encode(PROMPTS[0])
    with pytest.raises(InvalidInputError, match="context of 32 tokens"):
        prepare(model, ids, SamplingParams(max_tokens=40), lambda piece: None)
    small = load(block_size=4, kv_cache_bytes=2 * block_bytes(model.shape, 4, torch.float32))
    with pytest.raises(InvalidInputError, match="KV blocks"):
        prepare(small, ids, SamplingParams(max_tokens=8), lambda piece: None)
    assert model.engine.counters.steps == 0


def test_multi_byte_characters_of_the_real_tokenizer_come_whole(
    load: Callable[..., Any],
) -> None:
    from inferplex.backends.llm.text import OutputText

    model = load()
    sentence = "héllo 世界 🙂 naïve"
    ids = model.tokenizer.encode(sentence)
    text = OutputText(model.tokenizer.decode, [])
    pieces = [text.add(token) for token in ids]
    assert "" in pieces  # some tokens hold part of a character: nothing comes for them
    assert all("\ufffd" not in piece for piece in pieces)
    assert "".join(pieces) + text.flush() == sentence


def test_the_bfloat16_decode_attention_matches_sdpa() -> None:
    """The decodes' own attention (bfloat16, grouped query heads, masked padding) gives
    SDPA's result within bfloat16's precision."""
    from inferplex.backends.llm.attention import _decode_attention

    generator = torch.Generator().manual_seed(0)
    q = torch.randn(5, 8, 64, generator=generator).bfloat16()
    keys = torch.randn(5, 4, 48, 64, generator=generator).bfloat16()
    values = torch.randn(5, 4, 48, 64, generator=generator).bfloat16()
    mask = (torch.arange(48) < torch.tensor([48, 30, 17, 1, 40]).unsqueeze(1)).view(5, 1, 1, 48)
    expected = torch.nn.functional.scaled_dot_product_attention(
        q.float().unsqueeze(2), keys.float(), values.float(), mask, scale=0.125, enable_gqa=True
    ).squeeze(2)
    found = _decode_attention(q, keys, values, mask, 0.125).float()
    assert (found - expected).abs().max().item() < 0.03
