"""Sampling settings and the request's inputs: vLLM's names and defaults, each bad value an
InvalidInputError naming the field; the engine's settings from the config's parameters."""

from __future__ import annotations

import json

import numpy as np
import pytest

from inferplex.backends.llm.params import SamplingParams, parse_sampling
from inferplex.backends.llm.request import read_request
from inferplex.backends.llm.settings import EngineSettings, read_settings
from inferplex.errors import ConfigError, InvalidInputError


def test_defaults_and_settings_are_read() -> None:
    assert parse_sampling({}) == SamplingParams()
    params = parse_sampling(
        {"temperature": 0, "top_k": -1, "stop": "x", "seed": 3, "max_tokens": 5}
    )
    assert params.greedy and params.top_k == 0 and params.stop == ("x",)
    assert (params.seed, params.max_tokens) == (3, 5)


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"temprature": 1.0}, "temprature"),
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_k": 1.5}, "top_k"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"stop": [""]}, "stop"),
        ({"stop_token_ids": "1"}, "stop_token_ids"),
        ({"ignore_eos": 1}, "ignore_eos"),
        ({"min_tokens": 4, "max_tokens": 2}, "min_tokens"),
        ({"repetition_penalty": 0}, "repetition_penalty"),
    ],
)
def test_a_bad_setting_is_refused_by_name(settings: dict[str, object], named: str) -> None:
    with pytest.raises(InvalidInputError, match=named):
        parse_sampling(settings)


def _bytes(value: str) -> np.ndarray:
    return np.array([value.encode()], dtype=np.object_)


def test_a_request_reads_triton_llm_inputs_and_sampling_parameters() -> None:
    inputs = {
        "text_input": _bytes("hello"),
        "stream": np.array([True]),
        "sampling_parameters": _bytes(json.dumps({"temperature": 0.5, "top_p": 0.9})),
        "max_tokens": np.array([7], dtype=np.int32),
        "return_num_output_tokens": np.array([True]),
    }
    # request parameters add sampling settings; the protocol's own are not sampling's
    request = read_request(inputs, {"top_k": 5, "triton_enable_empty_final_response": True})
    assert request.prompt == "hello" and request.stream and not request.exclude_input
    assert (request.params.temperature, request.params.top_p) == (0.5, 0.9)
    assert (request.params.top_k, request.params.max_tokens) == (5, 7)
    assert request.return_output_tokens and not request.return_finish_reason


def test_stream_may_come_as_a_request_parameter() -> None:
    assert read_request({"text_input": _bytes("x")}, {"stream": True}).stream
    assert not read_request({"text_input": _bytes("x")}, {}).stream


@pytest.mark.parametrize(
    ("inputs", "named"),
    [
        ({}, "text_input"),
        ({"text_input": np.array([b"\xff"], dtype=np.object_)}, "UTF-8"),
        ({"text_input": _bytes("x"), "sampling_parameters": _bytes("{")}, "not JSON"),
        ({"text_input": _bytes("x"), "sampling_parameters": _bytes("[1]")}, "JSON object"),
        ({"text_input": np.array([b"a", b"b"], dtype=np.object_)}, "one element"),
    ],
)
def test_bad_inputs_are_refused(inputs: dict[str, np.ndarray], named: str) -> None:
    with pytest.raises(InvalidInputError, match=named):
        read_request(inputs, {})


def test_engine_settings_come_from_the_config_parameters() -> None:
    assert read_settings({}, "m") == EngineSettings()
    settings = read_settings({"block_size": "8", "enable_prefix_caching": "false"}, "m")
    assert settings.block_size == 8 and not settings.enable_prefix_caching
    for bad in ({"block_size": "0"}, {"max_num_seqs": "x"}, {"dtype": "int8"}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            read_settings(bad, "m")
