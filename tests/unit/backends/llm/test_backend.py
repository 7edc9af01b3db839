"""The llm backend without the server: auto-complete's signature, instances sharing one
engine, a streamed request's responses through its sink, a reader going away or a
cancelled request freeing its blocks, bad requests failing alone."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from inferplex.backends import backend_for, backend_for_file
from inferplex.backends.base import BatchRequest, Cancellation, InstanceSpec
from inferplex.backends.llm import LlmBackend
from inferplex.config import ModelConfig
from inferplex.errors import InferplexError, InvalidInputError
from tests.support.polling import wait_for

CPU = InstanceSpec(intra_op_threads=1)


class Sink:
    """A response sink that takes ``accept`` responses, then says its reader went away."""

    def __init__(self, accept: int = 1000) -> None:
        self.sent: list[tuple[object, bool]] = []
        self.accept = accept

    def send(self, outcome: object, final: bool) -> bool:
        self.sent.append((outcome, final))
        return len(self.sent) < self.accept


def text(value: str) -> np.ndarray:
    return np.array([value.encode()], dtype=np.object_)


def inputs(prompt: str, max_tokens: int, stream: bool = True) -> dict[str, np.ndarray]:
    return {
        "text_input": text(prompt),
        "stream": np.array([stream]),
        "sampling_parameters": text(json.dumps({"temperature": 0, "ignore_eos": True})),
        "max_tokens": np.array([max_tokens], dtype=np.int32),
        "return_finish_reason": np.array([True]),
        "return_num_output_tokens": np.array([True]),
    }


@pytest.fixture
def config(llm_repository: Path) -> ModelConfig:
    folder = llm_repository / "tiny_llama" / "1"
    written = ModelConfig(
        name="tiny_llama", backend="llm", parameters={"kv_cache_bytes": str(1 << 22)}
    )
    completed = LlmBackend.auto_complete(written, "tiny_llama", folder)
    assert completed is not None
    return completed


@pytest.fixture
def backends(config: ModelConfig, llm_repository: Path) -> list[LlmBackend]:
    path = llm_repository / "tiny_llama" / "1"
    made = [LlmBackend(path, config, CPU) for _ in range(2)]
    yield made
    for backend in made:
        backend.close()


def test_auto_complete_declares_tritons_llm_signature(config: ModelConfig) -> None:
    assert backend_for(config) is LlmBackend
    assert config.model_transaction_policy.decoupled
    assert [t.name for t in config.input][:4] == [
        "text_input",
        "stream",
        "sampling_parameters",
        "exclude_input_in_output",
    ]
    assert next(t.name for t in config.output) == "text_output"
    assert sum(g.count for g in config.instance_group) == 64


def test_a_config_json_is_no_sign_of_an_llm() -> None:
    # exported ONNX models keep their Hugging Face config.json beside model.onnx
    assert backend_for_file("config.json") is None


def test_instances_share_one_engine_stopped_with_the_last(
    config: ModelConfig, llm_repository: Path
) -> None:
    path = llm_repository / "tiny_llama" / "1"
    first, second = LlmBackend(path, config, CPU), LlmBackend(path, config, CPU)
    engine = first._model.engine
    assert second._model.engine is engine
    first.close()
    assert engine._thread.is_alive()
    second.close()
    assert not engine._thread.is_alive()


def test_a_streamed_request_sends_each_token_and_a_final_response(
    backends: list[LlmBackend],
) -> None:
    sink = Sink()
    request = BatchRequest("1", {}, 1, sink)
    answers = backends[0].execute_requests(inputs("Hello there", 5), [], [request])
    assert answers == [{}]
    assert [final for _, final in sink.sent] == [False] * (len(sink.sent) - 1) + [True]
    outputs = [o for o, _ in sink.sent if isinstance(o, dict)]
    assert sum(int(o["num_output_tokens"][0]) for o in outputs) == 5
    assert outputs[-1]["finish_reason"][0] == b"length"


def test_a_request_not_streamed_gets_one_response_with_its_prompt(
    backends: list[LlmBackend],
) -> None:
    sink = Sink()
    backends[0].execute_requests(
        inputs("Hello there", 4, stream=False), [], [BatchRequest("1", {}, 1, sink)]
    )
    ((outputs, final),) = sink.sent
    assert final and isinstance(outputs, dict)
    assert outputs["text_output"][0].decode().startswith("Hello there")
    # a unary call (no sink): the batch's answer holds the text
    (answer,) = backends[1].execute_requests(
        inputs("Hello there", 4, stream=False), [], [BatchRequest("2", {}, 1, None)]
    )
    assert isinstance(answer, dict) and answer["text_output"][0] == outputs["text_output"][0]


def test_a_reader_that_goes_away_ends_the_request_and_frees_its_blocks(
    backends: list[LlmBackend],
) -> None:
    sink = Sink(accept=2)
    backends[0].execute_requests(inputs("Hello there", 400), [], [BatchRequest("1", {}, 1, sink)])
    engine = backends[0]._model.engine
    assert len(sink.sent) < 20 and engine.counters.cancelled == 1
    assert engine.policy.pool.used == 0


def test_a_cancelled_request_ends_and_frees_its_blocks(backends: list[LlmBackend]) -> None:
    cancellation = Cancellation()

    class Cancelling(Sink):
        def send(self, outcome: object, final: bool) -> bool:
            if len(self.sent) == 2:  # its caller goes away (the event loop would say so)
                threading.Thread(target=cancellation.cancel, args=([0],)).start()
            return super().send(outcome, final)

    sink = Cancelling()
    backends[0].execute_requests(
        inputs("Hello there", 450), [], [BatchRequest("1", {}, 1, sink)], cancellation
    )
    outcome, final = sink.sent[-1]
    assert final and isinstance(outcome, dict) and outcome["finish_reason"][0] == b"abort"
    assert len(sink.sent) < 100
    assert backends[0]._model.engine.policy.pool.used == 0


def test_a_bad_request_fails_alone_in_its_batch(backends: list[LlmBackend]) -> None:
    good, bad = inputs("Hello", 3), inputs("Hello", 100_000)
    both = {name: np.concatenate([good[name], bad[name]]) for name in good}
    sinks = [Sink(), Sink()]
    answers = backends[0].execute_requests(
        both, [], [BatchRequest("a", {}, 1, sinks[0]), BatchRequest("b", {}, 1, sinks[1])]
    )
    assert answers[0] == {} and sinks[0].sent[-1][1]
    assert isinstance(answers[1], InvalidInputError) and "context" in str(answers[1])
    assert not sinks[1].sent
    assert isinstance(answers[1], InferplexError)


def test_a_relay_that_fails_cancels_what_it_was_relaying(backends: list[LlmBackend]) -> None:
    class Broken(Sink):
        def send(self, outcome: object, final: bool) -> bool:
            raise RuntimeError("the sink broke")

    with pytest.raises(RuntimeError, match="sink broke"):
        backends[0].execute_requests(
            inputs("Hello there", 400), [], [BatchRequest("1", {}, 1, Broken())]
        )
    engine = backends[0]._model.engine
    wait_for(lambda: engine.counters.cancelled == 1)  # taken at the engine's next step
    assert engine.policy.pool.used == 0


def test_unloading_ends_the_requests_still_generating(backends: list[LlmBackend]) -> None:
    started = threading.Event()

    class Watching(Sink):
        def send(self, outcome: object, final: bool) -> bool:
            started.set()
            return super().send(outcome, final)

    answers: list[object] = []
    request = BatchRequest("1", {}, 1, Watching())
    runner = threading.Thread(
        target=lambda: answers.extend(
            backends[0].execute_requests(inputs("Hello there", 450), [], [request])
        )
    )
    runner.start()
    assert started.wait(30)
    for backend in backends:
        backend.close()
    runner.join(30)
    assert not runner.is_alive()
    (answer,) = answers
    assert isinstance(answer, InferplexError) and "unloaded" in str(answer)
