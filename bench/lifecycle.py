"""Model lifecycle speed: cold loads, new version to serving, throughput during a swap.

    python -m bench.lifecycle [--quick] [--rounds N] [--swaps N] [--clients N]
                              [--examples DIR] [--parts cold,poll,swap] [--models M,...]

1. **Cold load time per example model.** Builds the example repository
   (``examples/build_models.py``) into a temporary folder, starts the server in
   ``--model-control-mode explicit`` with nothing loaded and times
   ``POST /v2/repository/models/{m}/load`` per model (a pipeline after the models it calls),
   ``--rounds`` times each with an unload in between: median and best, in ms. A load reads
   the config, creates the instances, runs any warm-up and returns once the model is READY.
2. **New version to serving (poll mode).** A server polls its repository every
   ``POLL_SECS``; clients keep sending unversioned requests to add_sub while a new version
   folder appears (written aside, then renamed into place). The time from the rename to the
   first answer from the new version, per round; it is bound by the poll period.
3. **Throughput during a version swap ÷ before.** ``--clients`` closed-loop HTTP
   binary clients keep a model busy while its version is swapped over and over (the
   version's file is rewritten, then ``load`` replaces it: the new one loads beside the old,
   traffic switches, the old drains and is freed before the load answers). The load requests
   come from a process of their own, so their client-side work does not slow the traffic
   clients. Per swap, the window is the swap itself, from the load call to its answer: its
   length, the requests completed in it, and their rate ÷ the rate of the undisturbed
   ``BEFORE_SECS`` right before it. Printed: the median and minimum of the swaps' ratios, the
   pooled ratio (all swaps' requests ÷ what the baseline rates predict for their windows: a
   short window holds few batches, so one swap's ratio is coarse) and the requests short per
   swap, in the window and with the ``AFTER_SECS`` after it (a new version's first runs
   are slower: an unpaced swap leaves part of its cost after its answer). Side by side,
   servers alternating over ``--rounds`` rounds: loads unpaced (``--load-share 1``) and paced
   as the server's default (``--load-share 0.05``: while requests are served, a load's steps
   take at most 5 % of the time; src/inferplex/lifecycle/pacing.py); the targets are checked
   on the paced one. For add_sub (overhead-bound: the swap's own CPU work shows most) and
   small_cnn (compute-bound). Target of issue 4: during the
   swap / before >= 0.9.

Prints every figure and writes JSON to the results folder (bench/outputs.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from bench.outputs import add_results_option
from bench.report import Target, check_targets, number
from bench.serving import machine_state, write_results
from examples import modelgen
from inferplex.config.server_config import ServerConfig
from inferplex.config.writers import write_config
from inferplex_tools.benchtool import arrays
from inferplex_tools.benchtool.clients import HttpConnection
from inferplex_tools.benchtool.launch import HOST, RunningServer, start_server

ROOT = Path(__file__).resolve().parent.parent
#: the poll period of part 2: the time to serving is bound by it
POLL_SECS = 0.2
#: examples that call other models load after them
LOAD_ORDER_LAST = ("camera_pipeline", "digits_reader")
TARGETS = (
    Target(
        "add_sub throughput during swaps / before (median)", "swap/add_sub/ratio", 0.9, "", True
    ),
    Target(
        "small_cnn throughput during swaps / before (median)", "swap/small_cnn/ratio", 0.9, "", True
    ),
)


@contextmanager
def server(repository: Path, log: Path, **settings: str) -> Iterator[RunningServer]:
    env = {f"INFERPLEX_{k.upper()}": v for k, v in settings.items()}
    running = start_server(repository, log, env={"INFERPLEX_LOG_LEVEL": "warning", **env})
    try:
        yield running
    finally:
        code = running.stop()
        if code != 0:
            print(f"server exited with {code}:\n{running.log()[-3000:]}", file=sys.stderr)


def post(running: RunningServer, path: str, body: dict[str, Any] | None = None) -> None:
    data = json.dumps(body or {}).encode()
    request = urllib.request.Request(f"http://{running.http_url}{path}", data=data)
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"{path}: {exc.code} {exc.read().decode(errors='replace')}") from None


# -- 1: cold loads ------------------------------------------------------------------------------
def cold_loads(work: Path, rounds: int, examples: Path | None) -> dict[str, Any]:
    if examples is None:
        examples = work / "examples"
        print("building the example models (python -m examples.build_models) ...", flush=True)
        subprocess.run(
            [sys.executable, "-m", "examples.build_models", "--out", str(examples)],
            check=True,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
        )
    names = sorted(p.name for p in examples.iterdir() if p.is_dir())
    names.sort(key=lambda n: n in LOAD_ORDER_LAST)
    print(f"\n1. cold load time per example model ({rounds} loads each, explicit mode)")
    results: dict[str, Any] = {}
    with server(examples, work / "cold.log", model_control_mode="explicit") as running:
        for name in names:
            times = []
            try:
                for i in range(rounds):
                    if i:  # each load is cold; the last one stays for the models calling it
                        post(running, f"/v2/repository/models/{name}/unload")
                    start = time.perf_counter()
                    post(running, f"/v2/repository/models/{name}/load")
                    times.append((time.perf_counter() - start) * 1e3)
            except RuntimeError as exc:
                print(f"  {name:22} failed: {exc}")
                results[name] = {"error": str(exc)}
                continue
            size = sum(f.stat().st_size for f in (examples / name).rglob("*") if f.is_file())
            results[name] = {
                "median_ms": round(statistics.median(times), 1),
                "best_ms": round(min(times), 1),
                "loads": len(times),
                "bytes_on_disk": size,
            }
            print(
                f"  {name:22} median {statistics.median(times):8.1f} ms   best "
                f"{min(times):8.1f} ms   ({len(times)} load(s), {size / 1e6:.2f} MB on disk)"
            )
    return results


# -- clients ------------------------------------------------------------------------------------
class Traffic:
    """Closed-loop HTTP binary clients on their own event loop thread, recording when each
    answer arrived (any failed request ends the run with its error)."""

    def __init__(self, running: RunningServer, model: str, inputs: arrays.Arrays, clients: int):
        self._request = arrays.http_binary_request(
            running.http_url, model, inputs, list(_outputs(model))
        )
        self._port = running.http_port
        self._clients = clients
        self.done: list[float] = []
        self._stop = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()

    async def _run(self) -> None:
        try:
            await asyncio.gather(*(self._client() for _ in range(self._clients)))
        except BaseException as exc:  # reported by stop()
            self._error = exc

    async def _client(self) -> None:
        connection = await HttpConnection.open(HOST, self._port)
        clock = time.perf_counter
        while not self._stop:
            await connection.send(self._request)
            self.done.append(clock())
        connection.close()

    def count(self, start: float, end: float) -> int:
        return sum(1 for t in self.done if start <= t < end)

    def stop(self) -> None:
        self._stop = True
        self._thread.join(30)
        if self._error is not None:
            raise self._error


def _outputs(model: str) -> tuple[str, ...]:
    return ("OUTPUT0", "OUTPUT1") if model == "add_sub" else ("logits",)


class VersionProbe:
    """A client that asks, over and over, which version serves unversioned requests."""

    def __init__(self, running: RunningServer, inputs: arrays.Arrays) -> None:
        self._url = f"http://{running.http_url}/v2/models/add_sub/infer"
        body = {
            "inputs": [
                {"name": n, "shape": list(a.shape), "datatype": "FP32", "data": a.ravel().tolist()}
                for n, a in inputs.items()
            ]
        }
        self._body = json.dumps(body).encode()

    def version(self) -> str:
        request = urllib.request.Request(
            self._url, data=self._body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return str(json.load(response)["model_version"])


# -- 2: new version to serving ------------------------------------------------------------------
def new_version_to_serving(work: Path, rounds: int) -> dict[str, Any]:
    repo = work / "poll"
    path = modelgen.add_sub(repo)
    write_config(repo / "add_sub", modelgen.model_config(path, max_batch_size=8))
    inputs = _add_sub_inputs()
    print(f"\n2. new version appearing -> serving (poll mode, every {POLL_SECS} s)")
    times = []
    with server(
        repo, work / "poll.log", model_control_mode="poll", repository_poll_secs=str(POLL_SECS)
    ) as running:
        probe = VersionProbe(running, inputs)
        for version in range(2, rounds + 2):
            staging = work / "staging"
            modelgen.add_sub(staging, version=version)
            start = time.perf_counter()
            os.rename(staging / "add_sub" / str(version), repo / "add_sub" / str(version))
            while probe.version() != str(version):
                if time.perf_counter() - start > 60:
                    raise TimeoutError(f"version {version} not served after 60 s")
            times.append((time.perf_counter() - start) * 1e3)
            print(f"  version {version}: serving after {times[-1]:7.1f} ms")
    result = {
        "poll_secs": POLL_SECS,
        "median_ms": round(statistics.median(times), 1),
        "max_ms": round(max(times), 1),
        "rounds_ms": [round(t, 1) for t in times],
    }
    print(
        f"  median {result['median_ms']} ms, max {result['max_ms']} ms "
        f"(poll period {POLL_SECS * 1e3:.0f} ms)"
    )
    return result


# -- 3: throughput during swaps -----------------------------------------------------------------
#: the targets are checked on the server's default
_DEFAULT_SHARE = ServerConfig.model_fields["load_share"].default
DEFAULT_LOAD_SHARE = f"--load-share {_DEFAULT_SHARE:g}"
#: the two ways compared: loads unpaced, and paced as the server's default
LOAD_SHARE = {"--load-share 1": "1", DEFAULT_LOAD_SHARE: f"{_DEFAULT_SHARE:g}"}
#: seconds of undisturbed traffic measured right before each swap: its rate is the baseline
BEFORE_SECS = {"add_sub": 0.5, "small_cnn": 1.0}
#: seconds after each swap's answer counted in its second "requests short" figure
AFTER_SECS = 0.2
#: swaps per server and round
SWAPS = {"add_sub": 8, "small_cnn": 4}

#: the load client: a separate process, so that the load call's own client-side work does not
#: hold up the traffic clients (it would show as a loss of the server). It reads a path per
#: line and answers "status began ended" (perf_counter is CLOCK_MONOTONIC: one clock for all
#: processes of the machine).
_TRIGGER = """
import http.client, sys, time
conn = http.client.HTTPConnection(sys.argv[1], int(sys.argv[2]), timeout=300)
for line in sys.stdin:
    began = time.perf_counter()
    conn.request("POST", line.strip(), body=b"{}", headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    body = response.read()
    ended = time.perf_counter()
    detail = "" if response.status == 200 else body.decode(errors="replace").replace(chr(10), " ")
    print(response.status, began, ended, detail, flush=True)
"""


class LoadTrigger:
    """Sends ``load`` requests from its own process; ``load`` returns when it was sent and
    when its answer arrived."""

    def __init__(self, running: RunningServer) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-c", _TRIGGER, HOST, str(running.http_port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def load(self, model: str) -> tuple[float, float]:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(f"/v2/repository/models/{model}/load\n")
        self._process.stdin.flush()
        status, began, ended, *detail = self._process.stdout.readline().split(maxsplit=3)
        if status != "200":
            raise RuntimeError(f"load {model}: {status} {' '.join(detail)}")
        return float(began), float(ended)

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(30)


def swaps(
    work: Path, model: str, rounds: int, swaps_per_round: int, clients: int
) -> dict[str, Any]:
    repo = work / f"swap_{model}"
    if model == "add_sub":
        path = modelgen.add_sub(repo)
        inputs = _add_sub_inputs()
    else:
        path = modelgen.small_cnn(repo)
        inputs = {"image": np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)}
    write_config(repo / model, modelgen.model_config(path, max_batch_size=8, dynamic_batching=True))
    data = path.read_bytes()
    before_secs = BEFORE_SECS[model]
    print(
        f"\n3. {model}: throughput during version swaps / before ({clients} clients; the window "
        "is each swap itself, from the load call to its answer, after the old version is "
        f"freed; the baseline is the {before_secs:g} s before it; {swaps_per_round} swaps per "
        f"server, {rounds} round(s), servers alternating)"
    )
    swapped: dict[str, list[dict[str, float]]] = {label: [] for label in LOAD_SHARE}
    for _ in range(rounds):
        for label, share in LOAD_SHARE.items():
            log = work / f"swap_{model}_{share}.log"
            with server(repo, log, model_control_mode="explicit", load_share=share) as running:
                post(running, f"/v2/repository/models/{model}/load")
                trigger = LoadTrigger(running)
                traffic = Traffic(running, model, inputs, clients)
                marks = []
                try:
                    time.sleep(1.0)  # warm-up: connections open, batch sizes settle
                    for _ in range(swaps_per_round):
                        time.sleep(before_secs + AFTER_SECS)  # the last swap's aftermath
                        path.write_bytes(data)  # a new file: the load replaces the version
                        marks.append(trigger.load(model))
                    time.sleep(AFTER_SECS)
                finally:
                    traffic.stop()
                    trigger.close()
            for began, ended in marks:
                before = traffic.count(began - before_secs, began) / before_secs
                held = traffic.count(began, ended)
                window = ended - began
                held_after = traffic.count(began, ended + AFTER_SECS)
                swapped[label].append(
                    {
                        "window_ms": round(window * 1e3, 1),
                        "requests": held,
                        "before_rps": round(before, 1),
                        "ratio": round(held / window / before, 3),
                        "lost": round(before * window - held, 1),
                        "lost_with_after": round(before * (window + AFTER_SECS) - held_after, 1),
                    }
                )
    results: dict[str, Any] = {}
    for label, share in LOAD_SHARE.items():
        rows = swapped[label]
        ratios = [r["ratio"] for r in rows]
        # every swap's requests over every swap's time: short windows hold few batches, so
        # one swap's ratio is coarse; the pooled one weighs each swap by its length
        expected = sum(r["before_rps"] * r["window_ms"] / 1e3 for r in rows)
        pooled = sum(r["requests"] for r in rows) / expected
        summary = {
            "load_share": float(share),
            "ratio_median": round(statistics.median(ratios), 3),
            "ratio_min": round(min(ratios), 3),
            "ratio_pooled": round(pooled, 3),
            "window_ms_median": statistics.median(r["window_ms"] for r in rows),
            "requests_median": statistics.median(r["requests"] for r in rows),
            "lost_per_swap_median": statistics.median(r["lost"] for r in rows),
            "lost_with_after_median": statistics.median(r["lost_with_after"] for r in rows),
            "before_rps_median": statistics.median(r["before_rps"] for r in rows),
            "swaps": rows,
        }
        results[label] = summary
        print(
            f"  {label:15} during/before: median {summary['ratio_median']:.3f} "
            f"min {summary['ratio_min']:.3f} pooled {pooled:.3f}   window median "
            f"{summary['window_ms_median']:.1f} ms holding {summary['requests_median']:g} "
            f"requests (before: {summary['before_rps_median']:.0f} req/s; requests short per "
            f"swap: {summary['lost_per_swap_median']:.1f} in the window, "
            f"{summary['lost_with_after_median']:.1f} with the {AFTER_SECS:g} s after it)"
        )
    return results


def _add_sub_inputs() -> arrays.Arrays:
    return {
        "INPUT0": np.arange(16, dtype=np.float32).reshape(1, 16),
        "INPUT1": np.ones((1, 16), dtype=np.float32),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--swaps",
        type=int,
        default=0,
        help="swaps per server and round in part 3 (default: "
        + ", ".join(f"{m} {n}" for m, n in SWAPS.items())
        + ")",
    )
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument(
        "--models",
        default=",".join(SWAPS),
        help="the models of part 3 (comma-separated; default: %(default)s)",
    )
    parser.add_argument("--quick", action="store_true", help="one short round of each part")
    parser.add_argument(
        "--parts", default="cold,poll,swap", help="which parts to run (comma-separated)"
    )
    parser.add_argument(
        "--examples",
        type=Path,
        help="an example repository built already (python -m examples.build_models --out DIR); "
        "default: build one in a temporary folder",
    )
    add_results_option(parser)
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.swaps = 1, 3
    state = machine_state()
    with tempfile.TemporaryDirectory(prefix="bench-lifecycle-") as folder:
        work = Path(folder)
        parts = set(args.parts.split(","))
        results: dict[str, Any] = {}
        if "cold" in parts:
            results["cold_load"] = cold_loads(work, args.rounds, args.examples)
        if "poll" in parts:
            results["new_version"] = new_version_to_serving(work, args.rounds)
        if "swap" in parts:
            results["swap"] = {
                model: swaps(work, model, args.rounds, args.swaps or SWAPS[model], args.clients)
                for model in args.models.split(",")
            }
    flat = {
        f"swap/{m}/ratio": r[DEFAULT_LOAD_SHARE]["ratio_median"]
        for m, r in results.get("swap", {}).items()
    }
    # the targets of the models run (--models)
    outcomes = check_targets([t for t in TARGETS if t.key in flat], flat) if flat else []
    if "new_version" in results:
        median = number(results["new_version"]["median_ms"])
        print(f"\nnew version -> serving: median {median} ms")
    settings = {**vars(args), "examples": str(args.examples or "")}
    write_results(
        "lifecycle",
        {**results, "targets": outcomes, "args": settings},
        state,
        folder=args.results_dir,
    )


if __name__ == "__main__":
    main()
