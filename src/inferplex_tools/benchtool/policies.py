"""Scheduling A/B: the same workload under each scheduling policy, side by side.

The bench launches ``inferplex serve --scheduling-policy P`` on the model repository for
each policy in turn (a fresh server each time, so no policy inherits another's warm state)
and runs the same sweep against it. Scheduling decides anything only when models compete,
so the workload is usually several models loaded together (``--together``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from inferplex_tools.benchtool import BenchError
from inferplex_tools.benchtool.launch import Launched, Ports, launch
from inferplex_tools.benchtool.progress import Progress
from inferplex_tools.benchtool.results import BenchReport
from inferplex_tools.benchtool.sweep import BenchOptions, run

POLICIES = ("round_robin", "priority", "adaptive")


async def run_policies(
    repository: Path,
    policies: Sequence[str],
    options: BenchOptions,
    server_args: Sequence[str] = (),
    progress: Callable[[str], Progress] | None = None,
    say: Callable[[str], None] = lambda line: None,
    around: Callable[[Launched], AbstractContextManager[object]] | None = None,
    ports: Ports | None = None,
) -> dict[str, BenchReport]:
    """One report per policy, in the order given, each from a server on ``ports`` (free ones
    by default); ``around(server)`` is entered around each run (the metrics recorder)."""
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        raise BenchError(
            f"--policies: expected some of {', '.join(POLICIES)}, got {', '.join(policies)}"
        )
    reports: dict[str, BenchReport] = {}
    for policy in policies:
        say(f"serving {repository} with --scheduling-policy {policy}")
        args = ["--scheduling-policy", policy, *server_args]
        with launch(repository, args, ports=ports) as server:
            run_options = dataclasses.replace(options, url=server.address(options.protocol))
            bar = progress(policy) if progress else None
            with around(server) if around else nullcontext():
                reports[policy] = await run(run_options, bar, say)
        reports[policy].target["scheduling_policy"] = policy
    return reports


def side_by_side(reports: dict[str, BenchReport]) -> str:
    """Per case: each policy's req/s and p99, and its throughput relative to the first."""
    policies = list(reports)
    keys: list[str] = []
    for report in reports.values():
        keys += [r.key for r in report.results if r.key not in keys]
    by_policy = {p: {r.key: r for r in reports[p].results} for p in policies}
    width = max([len(k) for k in keys] + [4])
    header = f"{'case':{width}} " + " ".join(
        f"{p + ' req/s':>20} {'p99 ms':>8} {'ratio':>6}" for p in policies
    )
    lines = [header]
    for key in keys:
        first = by_policy[policies[0]].get(key)
        cells = []
        for policy in policies:
            result = by_policy[policy].get(key)
            if result is None:
                cells.append(f"{'failed':>20} {'-':>8} {'-':>6}")
                continue
            ratio = result.throughput / first.throughput if first and first.throughput else None
            cells.append(
                f"{result.throughput:>20.1f} {result.latency['p99_ms']:>8.3f} "
                + (f"{ratio:>6.3f}" if ratio is not None else f"{'-':>6}")
            )
        lines.append(f"{key:{width}} " + " ".join(cells))
    return "\n".join(lines)
