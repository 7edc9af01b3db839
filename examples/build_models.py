"""Build the example model repository.

    python -m examples.build_models [--out DIR]      (from the repository root; default:
                                                     examples/models)

Writes every model's ``<name>/1/model.onnx`` (generated, git-ignored) and its configuration
(``config.pbtxt`` or ``config.yaml``, committed; rewritten identically on every run). Running
it again rebuilds the same models, so it is safe to repeat.
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from examples import modelgen
from examples.modelgen.embedder import sentence_encoder
from examples.modelgen.llm import mock_llm
from inferplex.config.writers import write_config

DEFAULT_OUT = Path(__file__).resolve().parent / "models"


def build(out: Path) -> None:
    """Build all example models into ``out`` and print what was built."""
    out.mkdir(parents=True, exist_ok=True)

    path = modelgen.add_sub(out, dims=16)
    _configure(path, "pbtxt", max_batch_size=8)

    digits = modelgen.digits_mlp(out)
    _configure(digits.path, "yaml", max_batch_size=32)
    print(
        f"  digits held-out accuracy: scikit-learn {digits.sklearn_accuracy:.4f}, "
        f"ONNX Runtime {digits.onnx_accuracy:.4f}"
    )

    path = digits_reader(out)
    _report_python(path)

    # The same network with no configuration file: the server completes it from the
    # model's own inputs and outputs, as Triton's auto-complete does.
    auto = out / "digits_autoconfig" / "1" / modelgen.MODEL_FILENAME
    auto.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(digits.path, auto)
    _report(auto, "no config file (completed by the server)")

    path = modelgen.small_cnn(out)
    _configure(path, "pbtxt", max_batch_size=8)

    build_camera_pipeline(out)

    # the OpenAI-compatible API (docs/openai.md): a Triton-style decoupled LLM with its
    # tokenizer and chat template, and a sentence encoder for /v1/embeddings
    print(f"  {mock_llm(out).name}: decoupled Python LLM (text_input -> text_output)")
    print(f"  {sentence_encoder(out).name}: sentence encoder marked openai_embedding")


#: The camera-frame pipeline's stand-in models: (builder, keyword arguments). Fixed random
#: weights; each costs a few ms per 128x128 frame on one core.
#: per stand-in model: its modelgen builder and the builder's options
CAMERA_MODELS: dict[str, tuple[Callable[..., Path], dict[str, Any]]] = {
    # finds the face and hands a 64x64 crop of it on
    "face_detect": (modelgen.crop_net, {"image_size": 128, "crop_size": 64, "widths": (24, 24)}),
    "face_embed": (modelgen.small_cnn, {"image_size": 64, "widths": (48, 96, 160)}),
    "object_classify": (modelgen.small_cnn, {"image_size": 128, "widths": (16, 32, 64)}),
    "behaviour_classify": (modelgen.small_cnn, {"image_size": 128, "widths": (12, 24, 48)}),
}

#: frame -> face_detect -> face_embed, while object_classify and behaviour_classify read the
#: same frame: three branches that run at the same time.
CAMERA_STEPS = (
    ("face_detect", {"image": "frame"}, {"crop": "face"}),
    ("face_embed", {"image": "face"}, {"logits": "face_embedding"}),
    ("object_classify", {"image": "frame"}, {"logits": "objects"}),
    ("behaviour_classify", {"image": "frame"}, {"logits": "behaviour"}),
)


def build_camera_pipeline(out: Path, name: str = "camera_pipeline") -> None:
    """The four stand-in models and the ensemble that runs them on one camera frame."""
    for seed, (model, (builder, options)) in enumerate(CAMERA_MODELS.items(), start=1):
        path = builder(out, model, seed=seed, **options)
        config = modelgen.model_config(
            path, max_batch_size=8, instance_kind="KIND_CPU", dynamic_batching=True
        )
        # one core per model: the branches of a frame run side by side on different cores
        # instead of each spreading over every core and waiting for the others
        config["parameters"] = [{"key": "intra_op_thread_count", "value": {"string_value": "1"}}]
        write_config(path.parent.parent, config, "pbtxt")
        _report(path, "config.pbtxt")
    write_ensemble(out, name, CAMERA_STEPS)


def write_ensemble(
    out: Path,
    name: str,
    steps: tuple[tuple[str, dict[str, str], dict[str, str]], ...],
    frame_size: int = 128,
) -> None:
    """An ensemble config over ``steps`` (model, input_map, output_map) with input ``frame``
    and, as outputs, every tensor the steps make that no step reads; and its empty version
    folder (an ensemble has no model file)."""
    read = {tensor for _, inputs, _ in steps for tensor in inputs.values()}
    outputs = [t for _, _, made in steps for t in made.values() if t not in read]
    config = {
        "name": name,
        "platform": "ensemble",
        "max_batch_size": 8,
        "input": [{"name": "frame", "data_type": "TYPE_FP32", "dims": [3, frame_size, frame_size]}],
        "output": [{"name": t, "data_type": "TYPE_FP32", "dims": [10]} for t in outputs],
        "ensemble_scheduling": {
            "step": [
                {
                    "model_name": model,
                    "model_version": -1,
                    "input_map": [{"key": k, "value": v} for k, v in inputs.items()],
                    "output_map": [{"key": k, "value": v} for k, v in made.items()],
                }
                for model, inputs, made in steps
            ]
        },
    }
    (out / name / "1").mkdir(parents=True, exist_ok=True)
    write_config(out / name, config, "pbtxt")
    print(f"{name:18} config.pbtxt (ensemble of {', '.join(s[0] for s in steps)})")


#: the example Python model: raw PGM images in, digits_mlp called in-process, JSON out
DIGITS_READER_CONFIG = {
    "name": "digits_reader",
    "backend": "python",
    "max_batch_size": 16,
    "input": [{"name": "image", "data_type": "TYPE_STRING", "dims": [1]}],
    "output": [{"name": "prediction", "data_type": "TYPE_STRING", "dims": [1]}],
    "instance_group": [{"kind": "KIND_CPU", "count": 1}],
    "dynamic_batching": {},
    "parameters": [{"key": "execute_timeout_seconds", "value": {"string_value": "10"}}],
}
HANDLERS = Path(__file__).resolve().parent / "handlers"


def digits_reader(out: Path) -> Path:
    """Copy the digits_reader handler to ``out/digits_reader/1/model.py`` with its config
    (it calls digits_mlp, which must be served too)."""
    model_dir = out / "digits_reader"
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(HANDLERS / "digits_reader.py", model_dir / "1" / "model.py")
    write_config(model_dir, DIGITS_READER_CONFIG)
    return model_dir


def _report_python(model_dir: Path) -> None:
    print(f"{model_dir.name:18} config.pbtxt (python backend, calls digits_mlp)")
    print("  inputs:  image BYTES[-1, 1] (a binary PGM image)")
    print("  outputs: prediction BYTES[-1, 1] (JSON: digit, confidence)")


def _configure(path: Path, fmt: Literal["pbtxt", "yaml"], max_batch_size: int) -> None:
    config = modelgen.model_config(
        path, max_batch_size=max_batch_size, instance_kind="KIND_CPU", dynamic_batching=True
    )
    written = write_config(path.parent.parent, config, fmt)
    _report(path, written.name)


def _report(path: Path, config: str) -> None:
    inputs, outputs = modelgen.signature(path)

    def describe(specs: list[modelgen.TensorSpec]) -> str:
        return ", ".join(f"{s.name} {s.datatype}{list(s.shape)}" for s in specs)

    print(f"{path.parent.parent.name:18} {config}")
    print(f"  inputs:  {describe(inputs)}")
    print(f"  outputs: {describe(outputs)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="model repository folder")
    args = parser.parse_args()
    build(args.out)
    print(f"model repository: {args.out}")


if __name__ == "__main__":
    main()
