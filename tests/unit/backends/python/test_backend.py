"""PythonBackend with real worker processes: results, failures of every kind, restarts."""

from __future__ import annotations

import platform
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from inferplex.backends import backend_for_file
from inferplex.backends.base import InstanceSpec
from inferplex.backends.python import PythonBackend
from inferplex.backends.worker import worker_process
from inferplex.config.model_config import ModelConfig
from inferplex.errors import ConfigError, ModelExecutionError

HANDLER = """
import ctypes, os, time
import numpy as np
from inferplex.handler import BaseHandler, infer

class Handler(BaseHandler):
    def initialize(self, context):
        super().initialize(context)
        self.finalized_marker = os.environ.get("FINALIZED_MARKER")

    def inference(self, data):
        x = data["INPUT0"]
        action = int(x.flat[0]) if x.size else 0
        if action == 1:
            raise ValueError("the handler refuses 1")
        if action == 2:
            os._exit(3)
        if action == 3:
            ctypes.string_at(0)  # segfault
        if action == 4:
            time.sleep(60)
        if action == 5:
            infer("other", {"X": x})
        return {"OUTPUT0": x * 2, "TEXT": np.array([[b"n=%d" % x.shape[1]]] * len(x), dtype=object)}

    def finalize(self):
        if self.finalized_marker:
            open(self.finalized_marker, "w").write("done")
"""


def config(**parameters: str) -> ModelConfig:
    return ModelConfig.model_validate(
        {
            "name": "py",
            "backend": "python",
            "max_batch_size": 8,
            "input": [{"name": "INPUT0", "data_type": "FP32", "dims": [-1]}],
            "output": [
                {"name": "OUTPUT0", "data_type": "FP32", "dims": [-1]},
                {"name": "TEXT", "data_type": "BYTES", "dims": [1]},
            ],
            "parameters": parameters,
        }
    )


def write_model(tmp: Path, code: str = HANDLER) -> Path:
    path = tmp / "py" / "1" / "model.py"
    path.parent.mkdir(parents=True)
    path.write_text(code)
    return path


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("repo"))


@pytest.fixture(scope="module")
def backend(model_file: Path) -> Iterator[PythonBackend]:
    backend = PythonBackend(
        model_file, config(execute_timeout_seconds="1", shm_arena_bytes="4096"), InstanceSpec()
    )
    yield backend
    backend.close()


def run(backend: PythonBackend, action: float, width: int = 4) -> dict[str, np.ndarray]:
    x = np.zeros((2, width), np.float32)
    x[0, 0] = action
    return backend.execute({"INPUT0": x}, ["OUTPUT0", "TEXT"])


def test_model_py_selects_the_python_backend() -> None:
    assert backend_for_file("model.py") is PythonBackend


def test_outputs_come_back_with_bytes_and_a_growing_arena(backend: PythonBackend) -> None:
    out = run(backend, 0.5, width=100_000)  # 800 kB each way through a 4 kB arena
    assert out["OUTPUT0"].shape == (2, 100_000) and out["OUTPUT0"][0, 0] == 1.0
    assert out["TEXT"].tolist() == [[b"n=100000"], [b"n=100000"]]


def minor_faults(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc tunables")
def test_a_large_output_keeps_its_memory_between_batches(backend: PythonBackend) -> None:
    """The handler's fresh 2 MB output is not given back to the system after each batch and
    faulted in again on the next (worker_process.MALLOC_TUNABLES): that cost 240 page faults
    per batch per MB."""
    for _ in range(3):
        run(backend, 0.5, width=262_144)
    pid = backend._worker._process.pid
    before = minor_faults(pid)
    for _ in range(10):
        run(backend, 0.5, width=262_144)
    assert (minor_faults(pid) - before) / 10 < 50


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        (1, r"model 'py': the handler failed: ValueError: the handler refuses 1 \(model.py line"),
        (2, r"the handler's worker process died .*\(exited with code 3\); it was restarted"),
        (3, r"died while running the request \(killed by signal SIGSEGV\)"),
        (4, r"did not answer within 1 s \(parameter execute_timeout_seconds\); its worker"),
        (5, r"the handler failed: ModelCallError: this server gives handlers no access"),
    ],
    ids=["exception", "exit", "segfault", "hang", "call-without-caller"],
)  # fmt: skip
def test_a_failure_fails_the_batch_and_the_next_one_works(
    backend: PythonBackend, action: int, expected: str
) -> None:
    with pytest.raises(ModelExecutionError, match=expected):
        run(backend, action)
    np.testing.assert_array_equal(run(backend, 0)["OUTPUT0"], np.zeros((2, 4)))


def test_a_failing_initialize_fails_the_load_with_the_reason(tmp_path: Path) -> None:
    code = (
        "class TritonPythonModel:\n"
        "    def initialize(self, args):\n"
        "        raise OSError('no weights')\n"
        "    def execute(self, requests):\n"
        "        return []\n"
    )
    with pytest.raises(
        ModelExecutionError, match=r"initialize failed: OSError: no weights \(model.py line 3"
    ):
        PythonBackend(write_model(tmp_path, code), config(), InstanceSpec())


def test_close_calls_finalize(
    tmp_path: Path, model_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "finalized"
    monkeypatch.setenv("FINALIZED_MARKER", str(marker))
    monkeypatch.setattr(worker_process, "_extra", ("FINALIZED_MARKER",))  # --worker-env
    backend = PythonBackend(model_file, config(compute_slot="true"), InstanceSpec())
    assert not backend.composite  # asked for a compute slot
    run(backend, 0)
    backend.close()
    assert marker.read_text() == "done"


def test_handlers_take_no_compute_slot_by_default(backend: PythonBackend) -> None:
    # they may wait on the models they call: holding a slot then could deadlock
    assert backend.composite


def test_bad_parameters_are_config_errors(model_file: Path) -> None:
    with pytest.raises(ConfigError, match="execute_timeout_seconds must be a non-negative number"):
        PythonBackend(model_file, config(execute_timeout_seconds="soon"), InstanceSpec())
    with pytest.raises(ConfigError, match=r"EXECUTION_ENV_PATH .* is not supported"):
        PythonBackend(model_file, config(EXECUTION_ENV_PATH="/envs/py36.tar.gz"), InstanceSpec())


def test_nothing_is_written_into_the_model_folder(backend: PythonBackend, model_file: Path) -> None:
    run(backend, 0)
    assert sorted(p.name for p in model_file.parent.iterdir()) == ["model.py"]
