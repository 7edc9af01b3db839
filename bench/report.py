"""Printed tables and PASS/MISS targets: the overhead benchmark's (issue 2) and the shared
helpers the other benchmarks print their targets with."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: small_cnn's cases (bench/overhead.py): in-process with one session, then served tuned with
#: one instance (preferred batch sizes, spinning intra-op threads: the targets); in-process
#: with the cores split between single-threaded sessions, then served split the same way
#: between instances; served as the server's defaults have it; tuned over gRPC with grpc.aio
#: as the client instead of the lean one
CNN_MODES = (
    "in-process",
    "http-binary",
    "grpc",
    "in-process-split",
    "http-binary-split",
    "grpc-split",
    "http-binary-plain",
    "grpc-plain",
    "grpc-aio",
)
ADD_SUB_CASES = tuple(
    (protocol, concurrency)
    for protocol in ("http-json", "http-binary", "grpc")
    for concurrency in (1, 16)
)


@dataclass(frozen=True)
class Target:
    """A figure of the run, the bound it must meet, and which way."""

    label: str
    key: str
    bound: float
    unit: str
    higher_is_better: bool = False

    def met(self, value: float | None) -> bool:
        if value is None:
            return False
        return value >= self.bound if self.higher_is_better else value <= self.bound


TARGETS = (
    Target("add_sub p50 latency, c=1, HTTP binary", "http-binary/c1/p50_ms", 0.22, "ms"),
    Target("add_sub p50 latency, c=1, gRPC", "grpc/c1/p50_ms", 0.45, "ms"),
    Target(
        "add_sub server CPU per request, c=16, HTTP binary",
        "http-binary/c16/server_cpu_us_per_request",
        70.0,
        "µs",
    ),
    Target("small_cnn served / in-process, HTTP binary", "cnn/http-binary/ratio", 0.95, "", True),
    Target("small_cnn served / in-process, gRPC", "cnn/grpc/ratio", 0.95, "", True),
)


def report(flat: dict[str, Any], threads: int) -> list[dict[str, Any]]:
    """Print the tables and the targets; returns each target with its value and outcome."""
    print("\nadd_sub: FP32 [1,16] + [1,16] per request; CPU = process user+sys / requests")
    print(
        f"{'protocol':12} {'conc':>4} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'server µs/req':>14} {'client µs/req':>14}"
    )
    for protocol, concurrency in ADD_SUB_CASES:
        key = f"{protocol}/c{concurrency}"
        print(
            f"{protocol:12} {concurrency:>4} {flat[f'{key}/rate']:>8.0f} "
            f"{flat[f'{key}/p50_ms']:>8.3f} {flat[f'{key}/p99_ms']:>8.3f} "
            f"{number(flat[f'{key}/server_cpu_us_per_request']):>14} "
            f"{number(flat[f'{key}/client_cpu_us_per_request']):>14}"
        )
    print(
        f"\nsmall_cnn: FP32 [1,3,224,224] per request, concurrency 4, {threads} intra-op threads; "
        "served with preferred_batch_size [2, 4] and spinning intra-op threads; '-split': "
        f"{threads} sessions / instances of 1 intra-op thread, one image per run, ratio against "
        "in-process-split; '-plain': dynamic_batching { } and the server's defaults"
    )
    print(f"{'mode':17} {'img/s':>8} {'p50 ms':>8} {'ratio':>6}   rounds (img/s)")
    for mode in CNN_MODES:
        key = f"cnn/{mode}"
        print(
            f"{mode:17} {flat[f'{key}/rate']:>8.1f} {flat[f'{key}/p50_ms']:>8.2f} "
            f"{flat[f'{key}/ratio']:>6.3f}   {flat[f'{key}/rates']}"
        )
    return check_targets(TARGETS, flat)


def check_targets(targets: Sequence[Target], flat: dict[str, Any]) -> list[dict[str, Any]]:
    """Print each target with PASS or MISS; returns each with its value and outcome."""
    print("\ntargets")
    outcomes = []
    for target in targets:
        value = flat.get(target.key)
        met = target.met(value)
        sign = ">=" if target.higher_is_better else "<="
        print(
            f"  {'PASS' if met else 'MISS'}  {target.label}: {number(value)} {target.unit} "
            f"(target {sign} {target.bound:g})"
        )
        outcomes.append(
            {"target": target.label, "value": value, "bound": target.bound, "pass": met}
        )
    return outcomes


def number(value: float | None) -> str:
    """Four significant digits, or ``-`` for a figure that was not measured."""
    return "-" if value is None else f"{value:.4g}"
