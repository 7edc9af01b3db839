"""inferplex side by side with a real Triton Inference Server 2.51, both driven by Triton's
own load generator, perf_analyzer 2.51, in one run.

    bench/peers/install.sh                    # once: Triton and perf_analyzer under /tmp
    python -m bench.vs_triton [--rounds 3] [--window-ms 2500] [--queue-delay-us 200]
                              [--cases mlp/grpc/c32,add_sub/http/c1] [--quick]
                              [--results-dir DIR]

Builds the models of bench/peers/models.py once and serves the same files and configs from
inferplex (``python -m inferplex serve``) and from Triton (each model's ONNX Runtime session
in Triton's Python backend: Triton's own ONNX Runtime backend is on no package registry),
both on loopback, both with one instance and ``dynamic_batching {
max_queue_delay_microseconds: 200 }`` on the batched models. Then, case by case, perf_analyzer
runs on one server and then the other, ``--rounds`` times, the order swapped every round, so a
burst of unrelated load hits both alike. Per case and server it prints the medians over the
rounds of inferences/s, p50 and p99 (perf_analyzer's), and the CPU time per request of the
server (its process tree, over the requests its statistics counted) and of perf_analyzer;
then the ratios inferplex / Triton and the targets of issue 21 with PASS/MISS; the JSON goes
where bench/outputs.py says (``--results-dir``).

Every model is first asked once over HTTP on both servers and the answer compared with
in-process ONNX Runtime, and neither server may count a failed request: a server that answers
wrongly cannot look fast. Skips, saying why, when Triton or perf_analyzer is not installed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.outputs import add_results_option
from bench.peers import perf_analyzer, triton
from bench.peers.models import MODELS, Built, build, sample_inputs, shape_options
from bench.peers.perf_analyzer import Figures, Server, Settings
from bench.report import Target, check_targets, number
from bench.serving import machine_state, output_check, reference, write_results
from inferplex_tools.benchtool import arrays
from inferplex_tools.benchtool.clients import HttpPool
from inferplex_tools.benchtool.launch import HOST, start_server

INFERPLEX, TRITON = "inferplex", "triton"
FIGURES = ("rate", "p50_ms", "p99_ms", "server_cpu_us", "client_cpu_us")


@dataclass(frozen=True)
class Case:
    """perf_analyzer at ``concurrency`` over ``protocol`` on inferplex's ``model`` and on
    Triton's ``triton_model`` (the same model unless Triton runs an unbatched copy)."""

    model: str
    protocol: str
    concurrency: int
    triton_model: str = ""

    @property
    def key(self) -> str:
        return f"{self.model}/{self.protocol}/c{self.concurrency}"

    def served(self, server: str) -> str:
        return (self.triton_model or self.model) if server == TRITON else self.model


CASES = (
    Case("mlp", "grpc", 32),
    Case("mlp", "http", 32),
    Case("mlp_unbatched", "grpc", 32),
    Case("mlp_unbatched", "http", 32),
    # one request at a time: Triton at its fastest, without the batcher's queue delay
    Case("add_sub", "grpc", 1, triton_model="add_sub_unbatched"),
    Case("add_sub", "http", 1, triton_model="add_sub_unbatched"),
    Case("add_sub", "grpc", 16),
    Case("resnet18", "grpc", 4),
    Case("resnet18", "http", 4),
)

#: issue 21, section 1 (ratios: "/ Triton" is inferplex's figure over Triton's, same run)
TARGETS = (
    Target(
        "MLP c32 items/s batched / unbatched, inferplex, gRPC",
        "inferplex/mlp/grpc/c32/batching",
        3.5,
        "x",
        higher_is_better=True,
    ),
    Target(
        "MLP c32 items/s batched / unbatched, inferplex, HTTP",
        "inferplex/mlp/http/c32/batching",
        3.5,
        "x",
        higher_is_better=True,
    ),
    Target(
        "MLP c32 server CPU per request / Triton, gRPC",
        "mlp/grpc/c32/ratio/server_cpu_us",
        0.4,
        "x",
    ),
    Target(
        "MLP c32 server CPU per request / Triton, HTTP",
        "mlp/http/c32/ratio/server_cpu_us",
        0.4,
        "x",
    ),
    Target("add_sub c1 p50 / Triton unbatched, HTTP", "add_sub/http/c1/ratio/p50_ms", 0.9, "x"),
)

#: per case key and server, every round's figures
Runs = dict[str, dict[str, list[Figures]]]


def chosen_cases(selection: str) -> list[Case]:
    """The cases named in ``selection`` (comma-separated keys), all when it is empty."""
    if not selection:
        return list(CASES)
    by_key = {case.key: case for case in CASES}
    unknown = [key for key in selection.split(",") if key not in by_key]
    if unknown:
        raise SystemExit(f"unknown cases {unknown}; known: {list(by_key)}")
    return [by_key[key] for key in selection.split(",")]


def run_cases(
    cases: Sequence[Case],
    servers: Sequence[Server],
    rounds: int,
    settings: Settings,
    options: Mapping[str, Sequence[str]],
) -> Runs:
    """Every case ``rounds`` times on each server, one after the other, the order of the
    servers swapped every round, with perf_analyzer's extra ``options`` per model; prints
    each run as it ends, with the machine's load average then. A run that stayed unstable
    through every attempt is left out (its case's medians take the other rounds)."""
    runs: Runs = {case.key: {server.name: [] for server in servers} for case in cases}
    for case in cases:
        for number_ in range(rounds):
            order = servers if number_ % 2 == 0 else list(reversed(servers))
            for server in order:
                model = case.served(server.name)
                try:
                    figures = perf_analyzer.measure(
                        server, model, case.protocol, case.concurrency, settings, options[model]
                    )
                except perf_analyzer.Unstable:
                    print(f"  {case.key:22} round {number_ + 1} {server.name:9} left out: unstable")
                    continue
                runs[case.key][server.name].append(figures)
                print(
                    f"  {case.key:22} round {number_ + 1} {server.name:9} {model:17} "
                    f"{figures.rate:9.1f}/s  p50 {figures.p50_ms:7.3f} ms  "
                    f"server {figures.server_cpu_us:6.0f} µs/req  load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
    return runs


def medians(runs: Runs) -> dict[str, Any]:
    """Flat figures: ``<server>/<case>/<figure>`` (median over the rounds),
    ``<server>/<case>/rates`` (every round's), ``<case>/ratio/<figure>`` (inferplex /
    Triton) and ``<server>/mlp/<protocol>/c32/batching`` (MLP items/s batched / unbatched)."""
    flat: dict[str, Any] = {}
    for key, by_server in runs.items():
        for server, measured in by_server.items():
            if not measured:
                continue
            for name in FIGURES:
                value = statistics.median(getattr(figures, name) for figures in measured)
                flat[f"{server}/{key}/{name}"] = round(value, 3)
            flat[f"{server}/{key}/rates"] = [round(figures.rate, 1) for figures in measured]
        if all(by_server.get(server) for server in (INFERPLEX, TRITON)):
            for name in FIGURES:
                ours, theirs = flat[f"{INFERPLEX}/{key}/{name}"], flat[f"{TRITON}/{key}/{name}"]
                flat[f"{key}/ratio/{name}"] = round(ours / theirs, 3) if theirs else None
    for server in (INFERPLEX, TRITON):
        for protocol in ("grpc", "http"):
            batched = flat.get(f"{server}/mlp/{protocol}/c32/rate")
            unbatched = flat.get(f"{server}/mlp_unbatched/{protocol}/c32/rate")
            if batched and unbatched:
                flat[f"{server}/mlp/{protocol}/c32/batching"] = round(batched / unbatched, 3)
    return flat


def print_table(cases: Sequence[Case], flat: Mapping[str, Any]) -> None:
    """Medians per case and server, then the ratio inferplex / Triton."""
    print(
        "\nmedians over the rounds; CPU = µs of user+sys per request the server counted "
        "(server: its process tree; client: perf_analyzer)"
    )
    print(
        f"{'case':22} {'server':25} {'infer/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'server µs/req':>14} {'client µs/req':>14}   rounds (infer/s)"
    )
    for case in cases:
        for server in (INFERPLEX, TRITON):
            prefix = f"{server}/{case.key}"
            label = f"{server} {case.served(server)}" if server == TRITON else server
            if f"{prefix}/rate" not in flat:
                print(f"{case.key:22} {label:25} no stable run")
                continue
            print(
                f"{case.key:22} {label:25} {flat[f'{prefix}/rate']:>9.1f} "
                f"{flat[f'{prefix}/p50_ms']:>8.3f} {flat[f'{prefix}/p99_ms']:>8.3f} "
                f"{flat[f'{prefix}/server_cpu_us']:>14.0f} "
                f"{flat[f'{prefix}/client_cpu_us']:>14.0f}   {flat[f'{prefix}/rates']}"
            )
        ratios = [number(flat.get(f"{case.key}/ratio/{name}")) for name in FIGURES]
        print(
            f"{case.key:22} {'inferplex/triton':25} {ratios[0]:>9} {ratios[1]:>8} "
            f"{ratios[2]:>8} {ratios[3]:>14} {ratios[4]:>14}"
        )
    for server in (INFERPLEX, TRITON):
        gains = [
            f"{protocol} {number(flat.get(f'{server}/mlp/{protocol}/c32/batching'))}x"
            for protocol in ("grpc", "http")
        ]
        print(f"MLP c32 items/s batched / unbatched, {server}: {', '.join(gains)}")


async def check_answers(servers: Sequence[Server], built: Mapping[str, Built]) -> None:
    """Ask every model once over HTTP on every server; the answer must be in-process ONNX
    Runtime's (BadResponse otherwise)."""
    for name, model in built.items():
        inputs = sample_inputs(model.path)
        expected = reference(model.path, inputs)
        request = arrays.http_binary_request(HOST, name, inputs, list(expected))
        for server in servers:
            pool = HttpPool(HOST, int(server.http.rpartition(":")[2]))
            try:
                answer = arrays.decode_http_response(*await pool.send(request))
            finally:
                await pool.close()
            output_check(expected, f"{name} on {server.name}")(answer)


def check_no_failures(servers: Sequence[Server], models: Sequence[str]) -> None:
    for server in servers:
        for model in models:
            failed = perf_analyzer.count(server.http, model, "fail")
            if failed:
                raise arrays.BadResponse(f"{server.name} failed {failed} requests of {model}")


@contextmanager
def both_servers(built: Mapping[str, Built], repo: Path, tmp: Path) -> Iterator[list[Server]]:
    """inferplex on ``repo`` and Triton on the same models, on free loopback ports, until the
    block ends; an exit code other than 0 prints the end of the server's log."""
    with ExitStack() as stack:
        print("starting inferplex", flush=True)
        ours = start_server(repo, tmp / "inferplex.log", env={"INFERPLEX_LOG_LEVEL": "warning"})
        stack.callback(stopped, INFERPLEX, ours.stop, ours.log)
        print("starting Triton", flush=True)
        theirs = triton.start_triton(
            triton.triton_repository(built, tmp / "triton"), tmp / "triton.log"
        )
        stack.callback(stopped, TRITON, theirs.stop, theirs.log)
        yield [
            Server(INFERPLEX, ours.process.pid, ours.http_url, ours.grpc_url),
            Server(TRITON, theirs.process.pid, theirs.http_url, theirs.grpc_url),
        ]


def stopped(name: str, stop: Callable[[], int], log: Callable[[], str]) -> None:
    code = stop()
    if code != 0:
        print(f"{name} exited with {code}:\n{log()[-3000:]}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description="inferplex vs Triton under perf_analyzer")
    parser.add_argument("--rounds", type=int, default=3, help="runs per case and server")
    parser.add_argument(
        "--window-ms", type=int, default=Settings.window_ms, help="perf_analyzer's window"
    )
    parser.add_argument("--queue-delay-us", type=int, default=200)
    parser.add_argument("--cases", default="", help=f"comma-separated, of {[c.key for c in CASES]}")
    parser.add_argument("--quick", action="store_true", help="one round of short windows")
    add_results_option(parser)
    args = parser.parse_args()
    reason = triton.missing() or perf_analyzer.missing()
    if reason:
        print(f"bench.vs_triton skipped: {reason}")
        return
    cases = chosen_cases(args.cases)
    rounds, settings = (1, perf_analyzer.QUICK) if args.quick else (
        args.rounds, Settings(window_ms=args.window_ms)
    )  # fmt: skip
    names = sorted({case.served(server) for case in cases for server in (INFERPLEX, TRITON)})
    before = machine_state()
    with tempfile.TemporaryDirectory(prefix="inferplex-vs-triton-") as folder:
        tmp = Path(folder)
        built = build(tmp / "models", [MODELS[name] for name in names], args.queue_delay_us)
        with both_servers(built, tmp / "models", tmp) as servers:
            asyncio.run(check_answers(servers, built))
            print(f"{len(cases)} cases x {rounds} rounds x 2 servers", flush=True)
            shapes = {
                name: shape_options(model.path, MODELS[name].batched)
                for name, model in built.items()
            }
            runs = run_cases(cases, servers, rounds, settings, shapes)
            check_no_failures(servers, names)
    flat = medians(runs)
    print_table(cases, flat)
    outcomes = check_targets(TARGETS, flat)
    print(f"load average after the run: {os.getloadavg()[0]:.2f}")
    options = {**vars(args), "rounds": rounds, "window_ms": settings.window_ms}
    document = {"options": options, "figures": flat, "targets": outcomes}
    write_results("vs_triton", document, before, folder=args.results_dir)


if __name__ == "__main__":
    main()
