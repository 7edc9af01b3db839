"""A chat or completion's model requests: :func:`prepare` turns the read request into one
InferenceRequest per choice (the chat template applied, the prompt counted and checked
against the model's context); ``answer.py`` reads their responses."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from inferplex.config.model_config import ModelConfig
from inferplex.protocol.openai import encode
from inferplex.protocol.openai.errors import FieldError
from inferplex.protocol.openai.llm import llm_model, llm_request
from inferplex.protocol.openai.requests import Generation
from inferplex.protocol.openai.text_model import WORDS, TextModel
from inferplex.types import InferenceRequest


@dataclass(slots=True)
class Prepared:
    """A request ready to run: its choices' requests and what the answer needs."""

    request: Generation
    head: encode.Head
    requests: list[InferenceRequest]
    #: the prompt of each choice (its text, for ``echo``) and the tokens of each prompt
    prompts: list[str]
    prompt_tokens: list[int]
    text_model: TextModel


def prepare(
    request: Generation, config: ModelConfig, text_model: TextModel, model_name: str
) -> Prepared:
    """The requests of ``request`` for the model ``config`` (in a worker thread for a large
    request: the template and the tokenizer take time in proportion)."""
    model = llm_model(config)
    prompts = _prompts(request, text_model)
    counts = [_count(text_model, p, request.kind == "completion") for p in prompts]
    _check_context(request, text_model, counts)
    request_id = f"{'chatcmpl' if request.kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex}"
    sampling = request.sampling
    requests = [
        llm_request(model, prompt, sampling, request.stream, index, f"{request_id}-{p}-{index}")
        for p, prompt in enumerate(prompts)
        for index in range(sampling.n)
    ]
    head = encode.Head(request.kind, request_id, int(time.time()), model_name, sampling.logprobs)
    choice_prompts = [p for p in prompts for _ in range(sampling.n)]
    return Prepared(request, head, requests, choice_prompts, counts, text_model)


def _prompts(request: Generation, text_model: TextModel) -> list[str]:
    if request.kind == "chat":
        if text_model.template is None:
            raise FieldError(
                "messages",
                f"model '{request.model}' has no chat template: give it one as 'chat_template' "
                "in its tokenizer_config.json or as a chat_template.jinja file in its folder, "
                "or use /v1/completions",
            )
        return [text_model.render(request.messages)]
    prompts = []
    for index, prompt in enumerate(request.prompts):
        if isinstance(prompt, str):
            prompts.append(prompt)
            continue
        text = text_model.decode(prompt)
        if text is None:
            raise FieldError(
                f"prompt[{index}]" if len(request.prompts) > 1 else "prompt",
                f"model '{request.model}' has no tokenizer.json: its prompts must be text, "
                "not token ids",
            )
        prompts.append(text)
    return prompts


def _count(text_model: TextModel, prompt: str, special: bool) -> int:
    """Tokens of a prompt: by the model's tokenizer, else its words and punctuation marks
    (an estimate, docs/openai.md "Usage")."""
    counted = text_model.count(prompt, special_tokens=special)
    return counted if counted is not None else len(WORDS.findall(prompt))


def _check_context(request: Generation, text_model: TextModel, counts: list[int]) -> None:
    limit = text_model.context_length
    if limit is None or text_model.tokenizer is None:
        return
    wanted = request.sampling.max_tokens or 0
    field = "messages" if request.kind == "chat" else "prompt"
    for count in counts:
        if count + wanted > limit:
            asked = f" + {wanted} of 'max_tokens'" if wanted else ""
            raise FieldError(
                field if count >= limit or not wanted else "max_tokens",
                f"model '{request.model}' has a context of {limit} tokens; this request asks "
                f"for {count + wanted}: {count} in the {field}{asked}",
                "context_length_exceeded",
            )
