"""The LLM engine in process: what a decode step costs in the engine against the model's
own forward pass on the same batch, and against Hugging Face ``generate`` (static batching).

    python -m bench.llm_engine MODEL_DIR [--batches 1 4 8] [--prompt 128] [--tokens 64]
                               [--dtype auto|float32|bfloat16] [--threads 1]

MODEL_DIR is a Hugging Face folder (``python -m examples.build_llm OUT --hidden 512
--layers 8 --heads 8 --kv-heads 4 --vocab 16000`` builds the vLLM comparison's model). For
each batch size: ``batch`` prompts of ``--prompt`` tokens, prefilled, then ``--tokens``
decode steps timed three ways: the engine's ``step`` (schedule, forward, sample, text,
hand-off), the forward pass within it (``ModelRunner.run``: the batch's tensors, the
model, the logits to the CPU), and ``generate``
of ``--tokens`` new tokens for the same batch (its prefill included, as its users see it).
Prints ms per step, tokens/s and the ratios (the issue's target: engine / forward <= 1.1);
writes JSON to the results folder (bench/outputs.py).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from bench.outputs import add_results_option, result_path


def _engine_run(model: Any, batch: int, prompt: int, tokens: int) -> tuple[float, float]:
    """(engine step, its forward pass) in seconds per decode step, for ``batch``
    sequences."""
    from inferplex.backends.llm.admission import prepare
    from inferplex.backends.llm.params import SamplingParams
    from inferplex.backends.llm.policy import StepPlan
    from inferplex.backends.llm.runner import ModelRunner

    class TimedRunner(ModelRunner):
        spent = 0.0

        def run(self, plan: StepPlan) -> Any:
            start = time.perf_counter()
            try:
                return super().run(plan)
            finally:
                TimedRunner.spent += time.perf_counter() - start

    engine = model.engine
    runner = engine.runner
    params = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=tokens + 1)
    generations = []
    for row in range(batch):
        ids = [5 + (row * 7 + i) % 1000 for i in range(prompt)]
        generation = prepare(model, ids, params, lambda piece: None)
        engine.submit(generation)
        generations.append(generation)
    while any(g.generated == 0 for g in generations):  # the prefill, untimed
        engine.step()
    engine.runner = TimedRunner(runner.model, runner.cache, runner.device)
    steps = 0
    start = time.perf_counter()
    while any(g.finish_reason is None for g in generations):
        engine.step()
        steps += 1
    elapsed = time.perf_counter() - start
    engine.runner = runner
    return elapsed / steps, TimedRunner.spent / steps


def _generate_run(folder: Path, dtype: str, batch: int, prompt: int, tokens: int) -> float:
    """Seconds per new token of ``generate`` for the batch (prefill included)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        folder, dtype=getattr(torch, dtype) if dtype != "auto" else "auto"
    )
    ids = torch.tensor([[5 + (row * 7 + i) % 1000 for i in range(prompt)] for row in range(batch)])
    with torch.inference_mode():
        model.generate(ids, max_new_tokens=2, do_sample=False, eos_token_id=None)  # warm-up
        start = time.perf_counter()
        model.generate(
            ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, eos_token_id=None
        )
    return (time.perf_counter() - start) / tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--dtype", default="float32", choices=["auto", "float32", "bfloat16"])
    parser.add_argument("--threads", type=int, default=1)
    add_results_option(parser)
    args = parser.parse_args()

    import torch

    from inferplex.backends.llm.loading import load_model
    from inferplex.backends.llm.settings import EngineSettings

    torch.set_num_threads(args.threads)
    settings = EngineSettings(kv_cache_bytes=512 << 20, dtype=args.dtype)
    model = load_model(args.model_dir, settings, torch.device("cpu"), args.threads, start=False)
    rows = []
    print(
        f"{'batch':>5} {'engine ms':>10} {'forward ms':>10} {'generate ms':>11} "
        f"{'engine tok/s':>12} {'engine/forward':>14} {'generate/engine':>15}"
    )
    for batch in args.batches:
        step, forward = _engine_run(model, batch, args.prompt, args.tokens)
        generate = _generate_run(args.model_dir, args.dtype, batch, args.prompt, args.tokens)
        row = {
            "batch": batch,
            "engine_step_ms": step * 1e3,
            "forward_ms": forward * 1e3,
            "generate_step_ms": generate * 1e3,
            "engine_tokens_per_s": batch / step,
            "engine_over_forward": step / forward,
            "generate_over_engine": generate / step,
        }
        rows.append(row)
        print(
            f"{batch:>5} {step * 1e3:>10.2f} {forward * 1e3:>10.2f} {generate * 1e3:>11.2f} "
            f"{batch / step:>12.0f} {step / forward:>14.2f} {generate / step:>15.2f}"
        )
    model.engine.close()
    path = result_path("llm_engine", args.results_dir)
    path.write_text(
        json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=2)
    )
    print(f"results: {path}")


if __name__ == "__main__":
    main()
