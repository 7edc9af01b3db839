"""What metrics and tracing cost per request, measured in-process side by side.

    python -m bench.metrics_cost [--requests N] [--models M]

Prints, per request, the CPU time of the statistics the data path keeps (counters plus the
latency histogram buckets), the part of it the histograms add (two observations per request
and three per batch), the tracing switch when off, and what a scrape of /metrics, one
sampler tick and one dashboard document cost for M served model versions. The statistics
and the histogram observations alone are timed in the same run, interleaved.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from examples import modelgen
from inferplex.config.server_config import ServerConfig
from inferplex.config.writers import write_config
from inferplex.core.stats import Duration, Histogram, ModelStats
from inferplex.metrics.collector import Collector
from inferplex.metrics.dashboard import dashboard_data
from inferplex.metrics.exposition import render
from inferplex.metrics.sampler import Sampler
from inferplex.server import build_engine
from inferplex.tracing.context import TRACING


def per_call_ns(cases: list[Callable[[int], None]], n: int, rounds: int = 7) -> list[float]:
    """Per case, the median over interleaved rounds of the CPU time per call of ``case(n)``."""
    times: list[list[float]] = [[] for _ in cases]
    for _ in range(rounds):
        for case, measured in zip(cases, times, strict=True):
            start = time.thread_time_ns()  # CPU time: other processes' load stays out
            case(n)
            measured.append((time.thread_time_ns() - start) / n)
    return [statistics.median(measured) for measured in times]


def counters_only(n: int) -> None:
    """The counter updates of one request in a batch of one, without histogram buckets."""
    success, queue, infer = Duration(), Duration(), Duration()
    for i in range(n):
        queue.add(1000 + i)
        infer.add(5000 + i)
        success.count += 1
        success.ns += 9000 + i


def stats_recording(n: int) -> None:
    """ModelStats as the data path calls it: one request, one batch of one row."""
    stats = ModelStats("m", "1")
    for i in range(n):
        stats.record_batch(1, 2_000_000 + i, [1_000_000], 1000, 5000 + i, 1000)
        stats.record_request(True, 9000 + i)


def observations(n: int) -> None:
    """The five histogram observations of a one-request batch alone."""
    hist = Histogram()
    for i in range(n):
        value = 1000 + i * 37 % 10_000_000
        hist.observe(value)
        hist.observe(value)
        hist.observe(value)
        hist.observe(value)
        hist.observe(value)


def tracing_switch(n: int) -> None:
    hits = 0
    for _ in range(n):
        if TRACING.enabled:
            hits += 1
        if TRACING.enabled:
            hits += 1


async def scrape_costs(models: int) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        for i in range(models):
            path = modelgen.add_sub(repo, name=f"m{i}")
            config = modelgen.model_config(path, max_batch_size=8)
            write_config(repo / f"m{i}", config)
        engine = build_engine(ServerConfig(model_repository=repo, log_level="warning"))
        await engine.start()
        try:
            sampler = Sampler(engine.snapshot)
            collector = Collector(engine.snapshot, sampler)
            sampler.sample()
            results = []
            for work in (
                lambda: render(collector.collect()),
                sampler.sample,
                lambda: dashboard_data(engine.snapshot(), sampler),
            ):
                start = time.thread_time_ns()
                for _ in range(50):
                    work()
                results.append((time.thread_time_ns() - start) / 50 / 1000)
            collector.close()
            return results[0], results[1], results[2]
        finally:
            await engine.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--models", type=int, default=20)
    args = parser.parse_args()
    n = args.requests
    base, full, hist, switch = per_call_ns(
        [counters_only, stats_recording, observations, tracing_switch], n
    )
    print(f"per request, batch of 1 ({n} requests, median of 7 rounds, interleaved):")
    print(f"  4 counter updates, for scale         {base:8.1f} ns")
    print(f"  ModelStats now (counters+histograms) {full:8.1f} ns")
    print(f"  of which 5 histogram observations    {hist:8.1f} ns")
    print(f"  tracing off: two switch checks       {switch:8.1f} ns")
    scrape_us, tick_us, dashboard_us = asyncio.run(scrape_costs(args.models))
    print(f"with {args.models} model versions:")
    print(f"  GET /metrics body                    {scrape_us:8.1f} µs")
    print(f"  one sampler tick (once a second)     {tick_us:8.1f} µs")
    print(f"  one /dashboard/data document         {dashboard_us:8.1f} µs")


if __name__ == "__main__":
    main()
