"""The version gate: benchmark a new version of a model against the version serving now,
and promote it only when no figure regressed beyond the threshold.

Both versions must be loaded (a ``version_policy`` that serves both, e.g. ``all`` or
``latest { num_versions: 2 }``). The two versions are measured in alternation, ``rounds``
times each, with the same workload (addressed by version:
``/v2/models/{m}/versions/{v}/infer``), and each case keeps its best round (highest
throughput): on a shared machine the least disturbed round is the fairest figure, and
alternating exposes both versions to the same drift. The comparison is
:func:`~inferplex_tools.benchtool.compare.compare` with the serving version as the baseline.
Promotion is Triton's repository load with a configuration override whose
``version_policy`` serves the candidate only; a regressed candidate gets the serving version
pinned the same way. A server without the repository load API gets the action printed
instead of done. :func:`watch` gates every version that appears while it polls (a new
version folder in a repository served in poll mode).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from inferplex_tools.benchtool import BenchError
from inferplex_tools.benchtool.compare import Comparison, compare
from inferplex_tools.benchtool.compat import CompatLog
from inferplex_tools.benchtool.control import ServerApi, Unsupported, server_api
from inferplex_tools.benchtool.progress import Progress
from inferplex_tools.benchtool.results import BenchReport, CaseResult
from inferplex_tools.benchtool.sweep import BenchOptions, run, split_address


@dataclass
class GateResult:
    """The two runs, their comparison and what was done about it."""

    model: str
    serving: str
    candidate: str
    serving_report: BenchReport
    candidate_report: BenchReport
    comparison: Comparison
    promoted: bool
    note: str
    ok: bool
    """the gate passed, and the promotion (when asked and possible) worked"""


async def version_gate(
    options: BenchOptions,
    candidate: str,
    serving: str = "",
    threshold: float = 5.0,
    promote: bool = True,
    rounds: int = 2,
    progress: Callable[[str], Progress] | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> GateResult:
    """Measure ``serving`` (default: the highest other served version) and ``candidate``."""
    if len(options.models) != 1:
        raise BenchError("--gate-version: give exactly one --model")
    model = options.models[0]
    host, port = split_address(options.url)
    api = server_api(options.protocol, f"{host}:{port}", CompatLog())
    try:
        versions = [str(v) for v in api.model_metadata(model).get("versions", [])]
        if candidate not in versions:
            raise BenchError(
                f"--gate-version: version {candidate} of {model} is not served (served: "
                f"{', '.join(versions) or 'none'}); its version_policy must serve both versions, "
                "e.g. version_policy: { all: { } }"
            )
        others = sorted((v for v in versions if v != candidate), key=_version_order)
        serving = serving or (others[-1] if others else "")
        if not serving or serving not in versions:
            raise BenchError(
                f"--serving-version: {model} serves {', '.join(versions)}; need a version other "
                f"than the candidate {candidate} to compare with"
            )
        if rounds < 1:
            raise BenchError(f"--gate-rounds: expected >= 1, got {rounds}")
        runs: dict[str, list[BenchReport]] = {serving: [], candidate: []}
        for index in range(rounds):
            for version in (serving, candidate):
                say(f"{model}: round {index + 1}/{rounds}, version {version}")
                bar = progress(f"v{version}") if progress else None
                version_options = dataclasses.replace(options, version=version)
                runs[version].append(await run(version_options, bar, say))
        reports = {version: best_rounds(done) for version, done in runs.items()}
        comparison = compare(reports[serving], reports[candidate], threshold)
        ok = comparison.passed
        if not promote:
            verdict = "passed" if comparison.passed else "regressed"
            promoted, note = False, f"version {candidate} {verdict} (promotion not asked)"
        elif not comparison.passed:
            # the server may already route unversioned requests to the newest version
            # (version_policy latest): keep the serving one instead
            done, why, _ = _serve_only(api, model, serving)
            promoted = False
            note = f"version {candidate} NOT promoted: it regressed; " + (
                f"{model} pinned to version {serving}" if done else why
            )
        else:
            promoted, why, ok = _serve_only(api, model, candidate)
            note = f"version {candidate} promoted: {model} now serves it alone" if promoted else why
    finally:
        api.close()
    return GateResult(
        model,
        serving,
        candidate,
        reports[serving],
        reports[candidate],
        comparison,
        promoted,
        note,
        ok,
    )


def best_rounds(reports: list[BenchReport]) -> BenchReport:
    """One report whose cases are each the round with the highest throughput; the
    compatibility report of the last round."""
    best: dict[str, CaseResult] = {}
    for report in reports:
        for result in report.results:
            if result.key not in best or result.throughput > best[result.key].throughput:
                best[result.key] = result
    last = reports[-1]
    return BenchReport(last.target, last.options, list(best.values()), last.compat, last.started)


def _version_order(version: str) -> tuple[int, str]:
    return (int(version), "") if version.isdigit() else (-1, version)


def _serve_only(api: ServerApi, model: str, version: str) -> tuple[bool, str, bool]:
    """Load ``model`` with a version_policy serving ``version`` only: (done, why not, ok).
    A server without the load API is not a failure (the action is printed); a refused load
    is."""
    policy = {"specific": {"versions": [int(version) if version.isdigit() else version]}}
    try:
        config = api.model_config(model)
        config["version_policy"] = policy
        api.load_model(model, config)
    except Unsupported as exc:
        return (
            False,
            f"the server has no repository load API ({exc}): serve version {version} alone "
            f"by setting {model}'s version_policy to specific {{ versions: [{version}] }}",
            True,
        )
    except BenchError as exc:
        return False, f"loading {model} with version {version} alone failed: {exc}", False
    return True, "", True


async def watch(
    options: BenchOptions,
    threshold: float = 5.0,
    promote: bool = True,
    rounds: int = 2,
    interval: float = 5.0,
    count: int = 0,
    progress: Callable[[str], Progress] | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> list[GateResult]:
    """Poll the model's served versions every ``interval`` seconds and gate each version
    that appears above the ones seen before (hot reload: a new version folder in a polled
    repository); stop after ``count`` gates (0 = never)."""
    if len(options.models) != 1:
        raise BenchError("--gate-watch: give exactly one --model")
    if interval <= 0:
        raise BenchError(f"--poll-interval: expected seconds > 0, got {interval}")
    model = options.models[0]
    host, port = split_address(options.url)
    api = server_api(options.protocol, f"{host}:{port}", CompatLog())
    results: list[GateResult] = []
    try:
        seen = set(_versions(api, model))
        say(f"{model}: watching for versions above {max(seen, key=_version_order, default='-')}")
        while not count or len(results) < count:
            await asyncio.sleep(interval)  # polling a remote server: nothing to wait on
            versions = _versions(api, model)
            newest = max(seen, key=_version_order, default="")
            fresh = [v for v in versions if _version_order(v) > _version_order(newest)]
            seen.update(versions)
            if not fresh:
                continue
            candidate = max(fresh, key=_version_order)
            say(f"{model}: version {candidate} appeared")
            results.append(
                await version_gate(
                    options, candidate, "", threshold, promote, rounds, progress, say
                )
            )
            say(results[-1].note)
    finally:
        api.close()
    return results


def _versions(api: ServerApi, model: str) -> list[str]:
    return [str(v) for v in api.model_metadata(model).get("versions", [])]
