"""An ensemble serves only while its steps do (issue 20 §4): with a step model missing, not
loaded or failed it is not ready (the ready endpoints say false, inference is 503 /
UNAVAILABLE naming the step, the index shows why), and it is ready once the steps are, without
a reload of its own. Triton's clients over both protocols."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from examples import modelgen
from inferplex.config.writers import write_config
from inferplex_tools.benchtool.launch import RunningServer, start_server
from tests.support.repository import BROKEN_CONFIG

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import InferenceServerException  # noqa: E402

#: y = add_sub(x, x).OUTPUT0 = 2x, through add_sub
PIPE = """
platform: "ensemble"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 16 ] } ]
ensemble_scheduling { step [
  { model_name: "add_sub" model_version: -1
    input_map [ { key: "INPUT0" value: "x" }, { key: "INPUT1" value: "x" } ]
    output_map { key: "OUTPUT0" value: "y" } } ] }
"""

#: the same through a model that fails to load
PIPE_ON_BROKEN = PIPE.replace('"add_sub"', '"broken"')

#: two ensembles, each the other's step
LOOP = """
platform: "ensemble"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 16 ] } ]
ensemble_scheduling { step [ { model_name: "OTHER" input_map { key: "x" value: "x" }
                               output_map { key: "y" value: "y" } } ] }
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """Explicit control mode: the ensembles load at start, add_sub does not."""
    repo = tmp_path_factory.mktemp("repository")
    path = modelgen.add_sub(repo)
    write_config(repo / "add_sub", modelgen.model_config(path, max_batch_size=8))
    modelgen.add_sub(repo, name="broken")
    (repo / "broken" / "config.pbtxt").write_text(BROKEN_CONFIG)
    loops = [
        ("loop_a", LOOP.replace("OTHER", "loop_b")),
        ("loop_b", LOOP.replace("OTHER", "loop_a")),
    ]
    for name, text in (("pipe", PIPE), ("pipe_on_broken", PIPE_ON_BROKEN), *loops):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(text)
    args = ["--model-control-mode", "explicit", "--load-model", "pipe"]
    for name in ("pipe_on_broken", "broken", "loop_a", "loop_b"):
        args += ["--load-model", name]
    running = start_server(repo, tmp_path_factory.mktemp("log") / "server.log", args=args)
    yield running
    assert running.stop() == 0, running.log()


def _http_infer(client: httpclient.InferenceServerClient, model: str) -> np.ndarray:
    x = httpclient.InferInput("x", [1, 16], "FP32")
    x.set_data_from_numpy(np.ones((1, 16), dtype=np.float32))
    return client.infer(model, [x]).as_numpy("y")


def _grpc_infer(client: grpcclient.InferenceServerClient, model: str) -> np.ndarray:
    x = grpcclient.InferInput("x", [1, 16], "FP32")
    x.set_data_from_numpy(np.ones((1, 16), dtype=np.float32))
    return client.infer(model, [x]).as_numpy("y")


def _index(client: httpclient.InferenceServerClient) -> dict[str, tuple[str, str]]:
    return {
        (m["name"]): (m.get("state", ""), m.get("reason", ""))
        for m in client.get_model_repository_index()
    }


def test_an_ensemble_is_ready_only_while_its_steps_are(server: RunningServer) -> None:
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        # add_sub is in the repository but not loaded
        assert not http.is_model_ready("pipe") and not grpc.is_model_ready("pipe")
        with pytest.raises(InferenceServerException) as refused:
            _http_infer(http, "pipe")
        assert refused.value.status() == "503"
        assert "step 1 'add_sub' is not available" in refused.value.message()
        with pytest.raises(InferenceServerException) as refused:
            _grpc_infer(grpc, "pipe")
        assert refused.value.status() == "StatusCode.UNAVAILABLE"
        assert "step 1 'add_sub' is not available" in refused.value.message()
        state, reason = _index(http)["pipe"]
        assert state == "UNAVAILABLE" and "step 1 'add_sub'" in reason

        http.load_model("add_sub")  # the step comes up: the ensemble serves, unreloaded
        assert http.is_model_ready("pipe") and grpc.is_model_ready("pipe")
        assert _http_infer(http, "pipe").tolist() == [[2.0] * 16]
        assert _grpc_infer(grpc, "pipe").tolist() == [[2.0] * 16]
        assert _index(http)["pipe"][0] == "READY"

        http.unload_model("add_sub")  # and goes down with it
        assert not http.is_model_ready("pipe") and not grpc.is_model_ready("pipe")
    finally:
        http.close()
        grpc.close()


def test_an_ensemble_on_a_failed_model_names_the_failure(server: RunningServer) -> None:
    http = httpclient.InferenceServerClient(server.http_url)
    try:
        assert not http.is_model_ready("pipe_on_broken")
        with pytest.raises(InferenceServerException) as refused:
            _http_infer(http, "pipe_on_broken")
        assert refused.value.status() == "503"
        message = refused.value.message()
        assert "step 1 'broken' is not available" in message and "TYPE_NOT_A_TYPE" in message
    finally:
        http.close()


def test_ensembles_that_are_each_others_step_answer_readiness(server: RunningServer) -> None:
    """The check of a step that is an ensemble follows its steps, once round a loop."""
    http = httpclient.InferenceServerClient(server.http_url)
    try:
        assert http.is_model_ready("loop_a") and http.is_model_ready("loop_b")
    finally:
        http.close()
