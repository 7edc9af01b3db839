"""A cascade (light model first, the heavy one only for unconfident rows) against always the
heavy model, on the digits data: accuracy and throughput, measured in one run.

    python -m bench.cascade [--threshold T] [--rounds N] [--duration S] [--quick]

1. Trains two MLPs with scikit-learn on its bundled 8x8 digits (``modelgen.digits_mlp``, the
   same held-out quarter for both): ``digits_light`` (one hidden layer of 32, a few µs of
   compute per digit) and ``digits_heavy`` (three of 1024, about a thousand times the
   multiply-adds), and serves them with ``digits_cascade`` (backend
   ``cascade``: confidence = the light model's largest probability, ``--threshold``), each
   ``max_batch_size: 64`` with dynamic batching, one instance of one intra-op thread.
2. Prints, from in-process ONNX Runtime, how the threshold trades accuracy for the share of
   rows the heavy model still sees.
3. Sends the whole held-out split through each served model and prints the measured accuracy
   (and, for the cascade, the share of rows the heavy model answered, from ``answered_by``).
4. ``--concurrency`` clients send requests of ``--rows`` digits each (closed loop, HTTP
   binary, cycling through the held-out split) to each model, round-robin over ``--rounds``;
   each keeps its best round. Printed: digits/s per model and cascade / heavy (issue 5: a
   throughput gain over always-heavy, at the accuracy measured).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.http as httpclient
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from bench.loadgen import measure, open_http
from bench.outputs import add_results_option
from bench.overhead import Timing, add_round_options, round_options
from bench.report import Target, check_targets
from bench.serving import machine_state, reference, serve, write_results
from examples import modelgen
from inferplex.config.writers import write_config
from inferplex_tools.benchtool import arrays
from inferplex_tools.benchtool.launch import HOST

LIGHT, HEAVY, CASCADE = "digits_light", "digits_heavy", "digits_cascade"
MODELS = (LIGHT, HEAVY, CASCADE)
MAX_BATCH = 64
LIGHT_HIDDEN = (32,)
HEAVY_HIDDEN = (1024, 1024, 1024)
TARGET = Target("cascade / heavy digits per second", "gain", 1.0, "x", higher_is_better=True)


def held_out(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The held-out quarter ``modelgen.digits_mlp`` leaves out with the same seed."""
    features, labels = load_digits(return_X_y=True)
    _, x_test, _, y_test = train_test_split(
        features.astype(np.float32), labels, test_size=0.25, random_state=seed, stratify=labels
    )
    return x_test, y_test


def build(repo: Path, threshold: float, epochs: int) -> dict[str, Path]:
    light = modelgen.digits_mlp(repo, LIGHT, hidden=LIGHT_HIDDEN, epochs=epochs)
    heavy = modelgen.digits_mlp(repo, HEAVY, hidden=HEAVY_HIDDEN, epochs=epochs)
    for trained in (light, heavy):
        config = modelgen.model_config(
            trained.path, max_batch_size=MAX_BATCH, instance_kind="KIND_CPU", dynamic_batching=True
        )
        config["parameters"] = [{"key": "intra_op_thread_count", "value": {"string_value": "1"}}]
        write_config(trained.path.parent.parent, config)
    cascade = {
        "backend": "cascade",
        "max_batch_size": MAX_BATCH,
        "input": [{"name": "pixels", "data_type": "TYPE_FP32", "dims": [64]}],
        "output": [
            {"name": "probabilities", "data_type": "TYPE_FP32", "dims": [10]},
            {"name": "label", "data_type": "TYPE_INT64", "dims": [1]},
            {"name": "answered_by", "data_type": "TYPE_STRING", "dims": [1]},
        ],
        # two instances, not the composite default of 8: while both wait on their models,
        # arriving requests queue up and the next batch carries them all, so the light and the
        # heavy model are called once for many requests instead of once per request
        "instance_group": [{"kind": "KIND_CPU", "count": 2}],
        "dynamic_batching": {},
        "cascade": {
            "light_model": LIGHT,
            "heavy_model": HEAVY,
            "confidence_output": "probabilities",
            "confidence": "max",
            "threshold": threshold,
        },
    }
    (repo / CASCADE / "1").mkdir(parents=True)
    write_config(repo / CASCADE, cascade, "yaml")
    return {LIGHT: light.path, HEAVY: heavy.path}


def sweep(paths: dict[str, Path], x: np.ndarray, y: np.ndarray, chosen: float) -> np.ndarray:
    """Print accuracy and the heavy share per threshold (in-process); returns the labels the
    cascade gives at ``chosen``."""
    light = reference(paths[LIGHT], {"pixels": x})
    heavy = reference(paths[HEAVY], {"pixels": x})
    confidence = light["probabilities"].max(axis=1)
    print("\nin-process: threshold -> rows sent to the heavy model, cascade accuracy")
    print(f"  light alone {np.mean(light['label'] == y):.4f}, heavy alone "
          f"{np.mean(heavy['label'] == y):.4f}")  # fmt: skip
    chosen_labels = light["label"]
    for threshold in sorted({0.5, 0.8, 0.9, 0.95, 0.99, 0.999, chosen}):
        low = ~(confidence >= threshold)
        labels = np.where(low, heavy["label"], light["label"])
        mark = "  <- served" if threshold == chosen else ""
        print(f"  {threshold:<6g} {np.mean(low):6.1%} {np.mean(labels == y):.4f}{mark}")
        if threshold == chosen:
            chosen_labels = labels
    return chosen_labels


def served_accuracy(url: str, x: np.ndarray, y: np.ndarray) -> dict[str, dict[str, float]]:
    """Every model's accuracy on the held-out split, as served; the cascade's heavy share."""
    client = httpclient.InferenceServerClient(url)
    figures: dict[str, dict[str, float]] = {}
    try:
        for model in MODELS:
            labels, answered = [], []
            for start in range(0, len(x), MAX_BATCH):
                rows = x[start : start + MAX_BATCH]
                pixels = httpclient.InferInput("pixels", list(rows.shape), "FP32")
                pixels.set_data_from_numpy(rows, binary_data=True)
                wanted = ["label", "answered_by"] if model == CASCADE else ["label"]
                outputs = [httpclient.InferRequestedOutput(n, binary_data=True) for n in wanted]
                result = client.infer(model, [pixels], outputs=outputs)
                labels.append(result.as_numpy("label").reshape(-1))
                if model == CASCADE:
                    answered.append(result.as_numpy("answered_by").reshape(-1))
            figures[model] = {"accuracy": float(np.mean(np.concatenate(labels) == y))}
            if answered:
                heavy = np.concatenate(answered) == HEAVY.encode()
                figures[model]["heavy_share"] = float(np.mean(heavy))
    finally:
        client.close()
    return figures


def cycling(send: Callable[[bytes], Awaitable[Any]], requests: list[bytes]) -> Callable[[], Any]:
    """A call that sends the next of ``requests`` each time, round and round."""
    order = itertools.cycle(requests)
    return lambda: send(next(order))


async def throughput(
    port: int,
    x: np.ndarray,
    expected: dict[str, np.ndarray],
    rows: int,
    concurrency: int,
    rounds: int,
    timing: Timing,
) -> dict[str, dict[str, Any]]:
    chunks = [(s, min(s + rows, len(x))) for s in range(0, len(x) - rows + 1, rows)]
    host = f"{HOST}:{port}"
    best: dict[str, dict[str, Any]] = {}
    for _ in range(rounds):
        for model in MODELS:
            requests = [
                arrays.http_binary_request(host, model, {"pixels": x[a:b]}, ["label"])
                for a, b in chunks
            ]
            connections = await open_http(HOST, port, concurrency)
            try:
                # the first chunk's answer must be the labels in-process ONNX Runtime gives
                got = arrays.decode_http_response(*await connections[0].send(requests[0]))
                a, b = chunks[0]
                arrays.check_outputs(got, {"label": expected[model][a:b, None]}, model)
                calls = [cycling(c.send, requests) for c in connections]
                result = await measure(calls, timing.duration, timing.warmup)
            finally:
                for connection in connections:
                    connection.close()
            figures = {"digits_per_s": round(result.rate * rows, 1)}
            figures["p50_ms"] = round(result.percentile_ms(50), 3)
            if model not in best or figures["digits_per_s"] > best[model]["digits_per_s"]:
                best[model] = figures
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threshold", type=float, default=0.95)
    parser.add_argument("--rows", type=int, default=16, help="digits per request")
    parser.add_argument("--concurrency", type=int, default=4)
    add_round_options(parser, duration=3.0, warmup=1.0, rounds=3)
    parser.add_argument("--epochs", type=int, default=200, help="training epochs per MLP")
    add_results_option(parser)
    args = parser.parse_args()
    rounds, timing = round_options(args, quick=Timing(1.0, 0.3))
    before = machine_state()
    x, y = held_out()
    with tempfile.TemporaryDirectory() as folder:
        repo = Path(folder)
        paths = build(repo, args.threshold, args.epochs)
        cascade_labels = sweep(paths, x, y, args.threshold)
        expected = {
            LIGHT: reference(paths[LIGHT], {"pixels": x})["label"],
            HEAVY: reference(paths[HEAVY], {"pixels": x})["label"],
            CASCADE: cascade_labels,
        }
        with serve(repo, repo / "server.log", {}, MODELS) as served:
            accuracy = served_accuracy(served.server.http_url, x, y)
            best = asyncio.run(
                throughput(
                    served.server.http_port,
                    x,
                    expected,
                    args.rows,
                    args.concurrency,
                    rounds,
                    timing,
                )
            )
    print(
        f"\nserved: {len(x)} held-out digits; load: {args.concurrency} clients x {args.rows} "
        f"digits per request, HTTP binary (best of {rounds} round(s))"
    )
    print(f"{'model':16} {'accuracy':>9} {'heavy share':>12} {'digits/s':>10} {'p50 ms':>8}")
    for model in MODELS:
        share = accuracy[model].get("heavy_share")
        print(
            f"{model:16} {accuracy[model]['accuracy']:>9.4f} "
            f"{'-' if share is None else f'{share:.1%}':>12} "
            f"{best[model]['digits_per_s']:>10.0f} {best[model]['p50_ms']:>8.3f}"
        )
    gain = best[CASCADE]["digits_per_s"] / best[HEAVY]["digits_per_s"]
    change = accuracy[CASCADE]["accuracy"] - accuracy[HEAVY]["accuracy"]
    print(
        f"\ncascade / heavy: {gain:.2f}x the digits per second at accuracy "
        f"{accuracy[CASCADE]['accuracy']:.4f} vs {accuracy[HEAVY]['accuracy']:.4f} "
        f"({change * 100:+.2f} points)"
    )
    flat = {"gain": round(gain, 3), "accuracy_change_points": round(change * 100, 2)}
    flat["targets"] = check_targets([TARGET], flat)
    options = {**vars(args), "rounds": rounds, "duration": timing.duration}
    document = {"options": options, "accuracy": accuracy, "throughput": best, **flat}
    print(f"results: {write_results('cascade', document, before, folder=args.results_dir)}")


if __name__ == "__main__":
    main()
