"""Triton drop-in check: Triton's own example clients and Python-backend examples, run
unchanged against ``inferplex serve``.

    python scripts/triton_dropin.py --client DIR --python-backend DIR [--only NAME ...]

``DIR``: checkouts of github.com/triton-inference-server/client and .../python_backend (the
script reads them; nothing of them is kept in this project). It builds a model repository
under Triton's example model names — ``simple``, ``simple_int8``, ``simple_string``,
``simple_identity``, ``simple_sequence``, ``densenet_onnx`` by the project's own generators,
the Python-backend examples copied from the checkout as their READMEs say — starts
``inferplex serve`` on Triton's default ports (8000-8002 on 127.0.0.1: the Python-backend
clients have them written in), runs each example client with its own arguments, and prints
one line per case (``pass``/``FAIL`` and the last line of the output) and the count passed.
Cases that need what a CPU-only machine lacks (CUDA shared memory) or external data (DALI,
Inception) are listed as skipped, with the reason.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from examples import modelgen  # noqa: E402
from examples.modelgen.sequences import simple_sequence  # noqa: E402
from inferplex_tools.benchtool.launch import start_server  # noqa: E402

HTTP, GRPC, METRICS = 8000, 8001, 8002
#: how the servers start: as Triton's examples expect one started (models loaded and
#: controlled explicitly, system shared memory allowed, ServerMetadata named "triton")
SERVE_FLAGS = (
    "--model-control-mode=explicit",
    "--load-model=*",
    "--allow-shared-memory",
    "--id=triton",
)

#: INPUT0, INPUT1 -> OUTPUT0 = sum, OUTPUT1 = difference, in the model's datatype; BYTES
#: elements are decimal numbers (Triton's simple_string), answered as decimal numbers
ADD_SUB_MODEL = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.dtype = pb_utils.triton_string_to_numpy(config["output"][0]["data_type"])

    def execute(self, requests):
        answers = []
        for request in requests:
            a, b = (pb_utils.get_input_tensor_by_name(request, n).as_numpy()
                    for n in ("INPUT0", "INPUT1"))
            if self.dtype == np.object_:
                x, y = a.astype(np.bytes_).astype(np.int64), b.astype(np.bytes_).astype(np.int64)
                out = [np.char.encode((x + y).astype(str)), np.char.encode((x - y).astype(str))]
                out = [o.astype(np.object_) for o in out]
            else:
                out = [(a + b).astype(self.dtype), (a - b).astype(self.dtype)]
            answers.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor(n, o) for n, o in zip(("OUTPUT0", "OUTPUT1"), out)]))
        return answers
"""

ADD_SUB_CONFIG = """
backend: "python"
max_batch_size: 8
input [
  {{ name: "INPUT0" data_type: {dtype} dims: [ 16 ] }},
  {{ name: "INPUT1" data_type: {dtype} dims: [ 16 ] }}
]
output [
  {{ name: "OUTPUT0" data_type: {dtype} dims: [ 16 ] }},
  {{ name: "OUTPUT1" data_type: {dtype} dims: [ 16 ] }}
]
"""

#: Triton's simple_dyna_sequence: OUTPUT = (INPUT + START) * READY, plus the correlation id
#: on a sequence's last request
DYNA_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        answers = []
        for request in requests:
            value, start, end, ready, corrid = (
                pb_utils.get_input_tensor_by_name(request, n).as_numpy()
                for n in ("INPUT", "START", "END", "READY", "CORRID")
            )
            out = (value + start) * ready + end * corrid.astype(np.int32)
            answers.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", out)]))
        return answers
"""

DYNA_CONFIG = """
backend: "python"
max_batch_size: 8
sequence_batching {
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

IMAGE_CONFIG = """
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "image" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, 64, 64 ] } ]
output [ { name: "logits" data_type: TYPE_FP32 dims: [ 10 ] label_filename: "labels.txt" } ]
"""


@dataclass(frozen=True)
class Case:
    name: str
    script: Path
    args: tuple[str, ...] = ()
    skip: str = ""


def triton_examples(repo: Path) -> None:
    """Triton's example model repository (docs/examples/model_repository): its eight model
    names and what each answers; the images' classifiers are small and untrained."""
    path = modelgen.add_sub(repo, name="simple", dtype="INT32", dims=16)
    _write_pbtxt(
        path,
        ADD_SUB_CONFIG.format(dtype="TYPE_INT32").replace(
            'backend: "python"', 'platform: "onnxruntime_onnx"'
        ),
    )
    for name, dtype in (("simple_int8", "TYPE_INT8"), ("simple_string", "TYPE_STRING")):
        _python_model(repo, name, ADD_SUB_MODEL, ADD_SUB_CONFIG.format(dtype=dtype))
    _python_model(repo, "simple_dyna_sequence", DYNA_MODEL, DYNA_CONFIG)
    modelgen.identity(repo, "BYTES", name="simple_identity")
    simple_sequence(repo)
    for name in ("densenet_onnx", "inception_onnx"):
        path = modelgen.small_cnn(repo, name=name, image_size=64, widths=(8, 16))
        _write_pbtxt(path, IMAGE_CONFIG)
        (repo / name / "labels.txt").write_text("".join(f"CLASS_{i}\n" for i in range(10)))


def python_backend_examples(repo: Path, backend: Path) -> None:
    """The Python-backend examples, copied from the checkout as their READMEs say."""
    examples = backend / "examples"
    copies = {
        "add_sub": ("add_sub/model.py", "add_sub/config.pbtxt"),
        "pytorch": ("pytorch/model.py", "pytorch/config.pbtxt"),
        "bls_sync": ("bls/sync_model.py", "bls/sync_config.pbtxt"),
        "bls_async": ("bls/async_model.py", "bls/async_config.pbtxt"),
        "repeat_int32": ("decoupled/repeat_model.py", "decoupled/repeat_config.pbtxt"),
        "square_int32": ("decoupled/square_model.py", "decoupled/square_config.pbtxt"),
        "bls_decoupled_sync": ("bls_decoupled/sync_model.py", "bls_decoupled/sync_config.pbtxt"),
        "bls_decoupled_async": (
            "bls_decoupled/async_model.py",
            "bls_decoupled/async_config.pbtxt",
        ),
        "custom_metrics": ("custom_metrics/model.py", "custom_metrics/config.pbtxt"),
        "nobatch_auto_complete": ("auto_complete/nobatch_model.py", ""),
        "batch_auto_complete": ("auto_complete/batch_model.py", ""),
    }
    for name, (model, config) in copies.items():
        (repo / name / "1").mkdir(parents=True)
        shutil.copyfile(examples / model, repo / name / "1" / "model.py")
        if config:
            shutil.copyfile(examples / config, repo / name / "config.pbtxt")


def _python_model(repo: Path, name: str, code: str, config: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(code)
    (repo / name / "config.pbtxt").write_text(config)


def write_image(path: Path) -> Path:
    from PIL import Image

    pixels = np.random.default_rng(0).integers(0, 255, (80, 96, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path


def _write_pbtxt(model_file: Path, text: str) -> None:
    (model_file.parent.parent / "config.pbtxt").write_text(text)


#: the example clients not run, and why
SKIPPED = {
    "simple_grpc_cudashm_client": "CUDA shared memory: no GPU here",
    "simple_http_cudashm_client": "CUDA shared memory: no GPU here",
    "ensemble_image_client": "needs Triton's DALI/Inception ensemble",
    "memory_growth_test": "a soak test of custom_identity_int32",
    "grpc_client": "reads densenet_onnx's 1000 classes",
    "simple_http_model_control": "counts 7 models in the repository index, where Triton's "
    "example repository (and this client's gRPC twin) has 8",
    "image_client -i http": "its HTTP path imports attrdict, which Python 3.10+ cannot import",
}


def client_cases(client: Path, image: Path) -> list[Case]:
    """Triton's example clients, each with the arguments its model and port need."""
    examples = client / "src" / "python" / "examples"
    http, grpc = ("-u", f"127.0.0.1:{HTTP}"), ("-u", f"127.0.0.1:{GRPC}")
    classify = ("-m", "densenet_onnx", "-c", "3", "-s", "INCEPTION")
    #: the clients run more than once or with more than their port
    runs: dict[str, dict[str, tuple[str, ...]]] = {
        "image_client": {
            "-i http": (*classify, *http, str(image)),
            "-i grpc": (*classify, "-i", "grpc", *grpc, str(image)),
            "-i grpc --streaming": (*classify, "-i", "grpc", "--streaming", *grpc, str(image)),
        },
        "grpc_image_client": {"": (*classify, *grpc, str(image))},
        "reuse_infer_objects_client": {
            "-i http": ("-i", "http", *http),
            "-i grpc": ("-i", "grpc", *grpc),
        },
        "simple_grpc_custom_repeat": {},  # repeat_int32 is in the Python-backend suite
    }
    found: list[Case] = []
    for script in sorted(examples.glob("*.py")):
        stem = script.stem
        default = {"": http if "http" in stem else grpc}
        for variant, args in runs.get(stem, default).items():
            name = f"{stem} {variant}".strip()
            found.append(Case(name, script, args, SKIPPED.get(name, "")))
    # the model-control clients unload 'simple' at their end: they go last
    return sorted(found, key=lambda case: "model_control" in case.name)


def backend_cases(backend: Path, client: Path) -> list[Case]:
    """The Python-backend examples' clients (ports written in: Triton's defaults), and
    the client example calling their repeat_int32."""
    pb = backend / "examples"
    repeat = client / "src" / "python" / "examples" / "simple_grpc_custom_repeat.py"
    return [Case(repeat.stem, repeat, ("-u", f"127.0.0.1:{GRPC}"))] + [
        Case("python_backend " + script, pb / script)
        for script in (
            "add_sub/client.py",
            "pytorch/client.py",
            "bls/sync_client.py",
            "bls/async_client.py",
            "decoupled/repeat_client.py",
            "decoupled/square_client.py",
            "bls_decoupled/sync_client.py",
            "bls_decoupled/async_client.py",
            "custom_metrics/client.py",
            "auto_complete/client.py",
        )
    ]


def generate_cases(server: Path) -> list[Case]:
    """Triton's own tests of /generate and /generate_stream (qa/L0_http), one per test."""
    script = server / "qa" / "L0_http" / "generate_endpoint_test.py"
    names = re.findall(r"^    def (test_\w+)\(", script.read_text(), re.MULTILINE)
    return [Case(f"generate {name}", script, (f"GenerateEndpointTest.{name}",)) for name in names]


def run(case: Case, timeout: float) -> tuple[bool, str]:
    try:
        done = subprocess.run(
            [sys.executable, str(case.script), *case.args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=case.script.parent,
        )
    except subprocess.TimeoutExpired:
        return False, f"no end within {timeout:.0f} s"
    lines = (done.stdout + done.stderr).strip().splitlines()
    return done.returncode == 0, lines[-1][:160] if lines else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--client", type=Path, required=True)
    parser.add_argument("--python-backend", type=Path, required=True)
    parser.add_argument(
        "--server", type=Path, help="a checkout of Triton's server: its /generate tests too"
    )
    parser.add_argument("--only", nargs="*", default=(), help="cases whose name has one of these")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="triton-dropin-"))
    image = write_image(work / "image.jpg")
    suites: list[tuple[str, Callable[[Path], object], list[Case]]] = [
        ("triton-examples", triton_examples, client_cases(options.client, image)),
        (
            "python-backend",
            lambda repo: python_backend_examples(repo, options.python_backend),
            backend_cases(options.python_backend, options.client),
        ),
    ]
    if options.server is not None:
        models = options.server / "qa" / "python_models" / "generate_models"
        suites.append(
            ("generate", lambda repo: shutil.copytree(models, repo), generate_cases(options.server))
        )
    passed = ran = 0
    for name, build, found in suites:
        chosen = [c for c in found if not options.only or any(p in c.name for p in options.only)]
        if not chosen:
            continue
        build(work / name)
        server = start_server(
            work / name,
            work / f"{name}.log",
            {"OMP_NUM_THREADS": "1"},
            ports=(HTTP, GRPC, METRICS),
            args=SERVE_FLAGS,
        )
        try:
            for case in chosen:
                if case.skip:
                    print(f"skip  {case.name}: {case.skip}")
                    continue
                ok, last = run(case, options.timeout)
                ran += 1
                passed += ok
                print(f"{'pass' if ok else 'FAIL'}  {case.name}: {last}", flush=True)
        finally:
            server.stop()
    print(f"{passed} of {ran} passed; the servers' logs are in {work}")
    return 0 if passed == ran else 1


if __name__ == "__main__":
    sys.exit(main())
