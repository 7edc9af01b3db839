"""The OpenAI codec's pure parts: reading requests (fields named in errors), the request of
a Triton LLM model, and a choice's stop sequences and max_tokens across streamed pieces."""

from __future__ import annotations

import json

import numpy as np
import pytest

from inferplex.config.model_config import ModelConfig
from inferplex.protocol.openai.choices import Choice
from inferplex.protocol.openai.errors import FieldError, error_object
from inferplex.protocol.openai.llm import llm_model, llm_request
from inferplex.protocol.openai.requests import Sampling, read_chat, read_completion
from inferplex.protocol.openai.text_model import TextModel
from inferplex.types import InferenceResponse, Tensor


def body(**fields: object) -> bytes:
    return json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}
    ).encode()


def test_a_chat_request_is_read() -> None:
    request = read_chat(
        body(
            max_completion_tokens=5,
            max_tokens=9,
            stop="x",
            temperature=0.5,
            seed=3,
            top_k=4,
            stream=True,
            stream_options={"include_usage": True},
            logprobs=True,
            top_logprobs=2,
            store=False,
            response_format={"type": "text"},
        ),
        8,
    )
    sampling = request.sampling
    assert (sampling.max_tokens, sampling.stop, sampling.logprobs) == (5, ["x"], 2)
    assert sampling.options == {"temperature": 0.5, "seed": 3, "top_k": 4}
    assert request.stream and request.include_usage


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"n": 9}, "n"),
        ({"stop": ["a", ""]}, "stop"),
        ({"logit_bias": {"1": 2}}, "logit_bias"),
        ({"seed": 1.5}, "seed"),
        (
            {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
            "messages[0].content[0].text",
        ),
    ],
)
def test_bad_fields_are_named(fields: dict[str, object], param: str) -> None:
    with pytest.raises(FieldError) as refused:
        read_chat(body(**fields), 8)
    assert refused.value.param == param
    assert error_object(refused.value)["error"]["param"] == param


def test_completion_prompts() -> None:
    assert read_completion(b'{"model": "m", "prompt": [1, 2]}', 4).prompts == [[1, 2]]
    assert read_completion(b'{"model": "m", "prompt": ["a", "b"]}', 4).prompts == ["a", "b"]
    with pytest.raises(FieldError):
        read_completion(b'{"model": "m", "prompt": [[1], "b"]}', 4)


def vllm_config(*inputs: tuple[str, str]) -> ModelConfig:
    return ModelConfig.model_validate(
        {
            "name": "llm",
            "input": [{"name": "text_input", "data_type": "BYTES", "dims": [1]}]
            + [{"name": n, "data_type": t, "dims": [1], "optional": True} for n, t in inputs],
            "output": [{"name": "text_output", "data_type": "BYTES", "dims": [-1]}],
        }
    )


def test_sampling_goes_into_sampling_parameters() -> None:
    model = llm_model(vllm_config(("sampling_parameters", "BYTES"), ("stream", "BOOL")))
    sampling = Sampling(max_tokens=4, stop=["."], n=2, options={"seed": 7, "temperature": 0.1})
    request = llm_request(model, "hi", sampling, True, 1, "r")
    tensors = {t.name: t.data.reshape(-1)[0] for t in request.inputs}
    assert tensors["text_input"] == b"hi" and tensors["stream"]
    # choice 1 of seed 7 has seed 8: the choices differ, reproducibly
    assert json.loads(tensors["sampling_parameters"]) == {
        "seed": 8,
        "temperature": 0.1,
        "max_tokens": 4,
        "stop": ["."],
    }


def test_a_field_without_an_input_is_refused() -> None:
    model = llm_model(vllm_config(("temperature", "FP32")))
    request = llm_request(model, "x", Sampling(options={"temperature": 0.5}), False, 0, "r")
    assert {t.name: float(t.data[0]) for t in request.inputs[1:]} == {"temperature": 0.5}
    with pytest.raises(FieldError) as refused:
        llm_request(model, "x", Sampling(options={"top_p": 0.5}), False, 0, "r")
    assert refused.value.param == "top_p"


def response(text: str) -> InferenceResponse:
    data = np.array([text.encode()], object)
    return InferenceResponse("m", "1", [Tensor("text_output", "BYTES", (1,), data)])


def test_a_stop_sequence_split_over_pieces_is_held_back_and_cut() -> None:
    choice = Choice(0, None, ["END"], TextModel())
    sent = [choice.take(response(t)) for t in ("abc E", "N", "D more")]
    assert [p.text if p else None for p in sent] == ["abc", " ", ""]
    assert sent[2] is not None and sent[2].finish_reason == "stop"
    assert choice.done and choice.finish_reason == "stop" and choice.text == "abc "


def test_max_tokens_counts_responses() -> None:
    choice = Choice(0, 2, [], TextModel())
    assert choice.take(response(" a")) is not None and not choice.done
    last = choice.take(response(" b"))
    assert last is not None and last.finish_reason == "length" and choice.done
    assert choice.completion_tokens() == 2
