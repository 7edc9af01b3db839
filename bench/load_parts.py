"""What loading a light model costs beside building its ONNX Runtime session, part by part,
each as a multiple of one session creation measured side by side in the same process.

    python -m bench.load_parts [--models 300] [--rounds 3]

The parts are the steps the server runs per model at start (docs/lifecycle.md) beside the
session itself: reading its config.pbtxt (protobuf's text tokenizer), checking it into a
ModelConfig, the signature session that completes the config from the model (Triton's
auto-complete), walking and fingerprinting its folder, and the three RSS readings that
measure its footprint for the memory budget. Each model has its own config (its own name),
as in bench/many_models.py, so no cache answers. Issue 21's target for 1000 models, ready in
at most 1.5x the in-process loop of sessions, leaves 0.5x of a session per model for all of
them; the last column of each round adds them up.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import onnxruntime as ort

from examples import modelgen
from inferplex.backends.onnxruntime import OnnxRuntimeBackend, session_options
from inferplex.config.pbtxt import parse_pbtxt
from inferplex.config.readers import config_from_dict
from inferplex.config.writers import to_pbtxt
from inferplex.lifecycle.memory import rss_bytes
from inferplex.repository.local import digest, list_files


def per_model_ms(step: Callable[[int], object], models: int) -> float:
    start = time.perf_counter()
    for index in range(models):
        step(index)
    return (time.perf_counter() - start) / models * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description="a light model's load, part by part")
    parser.add_argument("--models", type=int, default=300, help="models per part and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="inferplex-parts-") as tmp:
        repo = Path(tmp)
        model = modelgen.add_sub(repo, "add_sub")
        config = modelgen.model_config(model, max_batch_size=8, instance_kind="KIND_CPU")
        names = [f"m{index:04d}" for index in range(args.models)]
        texts = [to_pbtxt({**config, "name": name}) for name in names]
        raws = [parse_pbtxt(text) for text in texts]
        data = model.read_bytes()
        options = session_options(1)
        parts: dict[str, Callable[[int], object]] = {
            "session": lambda _: ort.InferenceSession(
                data, sess_options=options, providers=["CPUExecutionProvider"]
            ),
            "parse_pbtxt": lambda i: parse_pbtxt(texts[i]),
            "config_from_dict": lambda i: config_from_dict(raws[i], names[i], "config.pbtxt"),
            "signature session": lambda _: OnnxRuntimeBackend.signature(model),
            "folder walk+digest": lambda _: digest(list_files(repo / "add_sub"), repo),
            "3 RSS readings": lambda _: (rss_bytes(), rss_bytes(), rss_bytes()),
        }
        print(f"per model, ms (x one session creation), {args.models} models per part")
        for number in range(1, args.rounds + 1):
            ms = {name: per_model_ms(step, args.models) for name, step in parts.items()}
            session = ms.pop("session")
            cells = "  ".join(f"{n} {m:.3f} ({m / session:.2f}x)" for n, m in ms.items())
            beside = sum(ms.values()) / session
            print(f"round {number}: session {session:.3f}  {cells}  beside it {beside:.2f}x")


if __name__ == "__main__":
    main()
