"""A request made ready for the engine: its prompt's tokens checked against the model's
context and the cache, its max_tokens settled, its text and random generator made. A
request that can never run is refused here, before any work (InvalidInputError: a 400)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from inferplex.backends.llm.generation import Generation, Piece
from inferplex.backends.llm.params import SamplingParams
from inferplex.backends.llm.policy import Sequence
from inferplex.backends.llm.text import OutputText
from inferplex.errors import InvalidInputError

if TYPE_CHECKING:
    from inferplex.backends.llm.loading import LoadedModel


def prepare(
    model: LoadedModel,
    prompt: list[int],
    params: SamplingParams,
    deliver: Callable[[Piece], None],
) -> Generation:
    """The engine's state of a request for ``prompt`` (token ids)."""
    from inferplex.backends.llm.sampler import new_generator

    if not prompt:
        raise InvalidInputError("input 'text_input' encodes to no tokens")
    room = model.max_model_len - len(prompt)
    if params.max_tokens is None:
        max_tokens = min(model.settings.default_max_tokens, room)
    else:
        max_tokens = params.max_tokens
    if max_tokens < 1 or len(prompt) + max_tokens > model.max_model_len:
        raise InvalidInputError(
            f"the prompt ({len(prompt)} tokens) and max_tokens ({params.max_tokens}) exceed "
            f"the model's context of {model.max_model_len} tokens"
        )
    engine = model.engine
    seq = Sequence(engine.next_seq_id(), list(prompt), len(prompt), len(prompt) + max_tokens)
    why = engine.policy.capacity_error(seq.max_len)
    if why is not None:
        raise InvalidInputError(f"the prompt and max_tokens {why} (kv_cache_bytes)")
    tokenizer = model.tokenizer
    skip = params.skip_special_tokens

    def decode(ids: Iterable[int]) -> str:
        return tokenizer.decode(list(ids), skip)

    text = OutputText(decode, prompt, params.stop, params.include_stop_str_in_output)
    return Generation(
        seq,
        params,
        max_tokens,
        text,
        model.shape.eos_token_ids,
        new_generator(params.seed),
        deliver,
    )
