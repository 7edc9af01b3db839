"""The generate endpoints decode a large body off the event loop (its JSON and one bytes
object per BYTES element take time in proportion), a small one on it."""

from __future__ import annotations

import threading
from typing import Any

import orjson
import pytest

from inferplex.config.model_config import ModelConfig, TensorConfig
from inferplex.frontends import http_generate
from inferplex.protocol.v2.offload import OFFLOAD_BYTES
from inferplex.types import InferenceRequest, InferenceResponse

CONFIG = ModelConfig(
    name="m",
    input=(TensorConfig(name="text_input", data_type="BYTES", dims=(-1,)),),
    output=(TensorConfig(name="text_output", data_type="BYTES", dims=(-1,)),),
)


class _Engine:
    def model_config(self, model: str, version: str) -> ModelConfig:
        return CONFIG


class _Plane:
    def admit(self, request: InferenceRequest) -> None:
        pass

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        return InferenceResponse("m", "1", [], request.id)


@pytest.mark.parametrize("elements", [10, OFFLOAD_BYTES])
async def test_a_large_body_is_decoded_off_the_loop(
    monkeypatch: pytest.MonkeyPatch, elements: int
) -> None:
    threads: list[threading.Thread] = []
    decode = http_generate.decode_generate

    def recording(*args: Any) -> InferenceRequest:
        threads.append(threading.current_thread())
        return decode(*args)

    monkeypatch.setattr(http_generate, "decode_generate", recording)
    generate = http_generate.Generate(_Engine(), _Plane())  # type: ignore[arg-type]
    body = orjson.dumps({"id": "r", "text_input": ["ab"] * elements})
    status, _, _ = await generate.generate("m", "", body)
    assert status == 200
    on_loop = threads == [threading.main_thread()]
    assert on_loop is (len(body) <= OFFLOAD_BYTES)
