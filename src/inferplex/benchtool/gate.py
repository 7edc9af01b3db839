"""The version gate: benchmark a new version of a model against the version serving now,
and promote it only when no figure regressed beyond the threshold.

Both versions must be loaded (a ``version_policy`` that serves both, e.g. ``all`` or
``latest { num_versions: 2 }``). The two versions are measured in alternation, ``rounds``
times each, with the same workload (addressed by version:
``/v2/models/{m}/versions/{v}/infer``), and each case keeps its best round (highest
throughput): on a shared machine the least disturbed round is the fairest figure, and
alternating exposes both versions to the same drift. The comparison is
:func:`~inferplex.benchtool.compare.compare` with the serving version as the baseline.
Promotion is Triton's repository load with a configuration override whose
``version_policy`` serves the candidate only. A server without the repository load API gets
the promotion printed instead of done.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from inferplex.benchtool import BenchError
from inferplex.benchtool.compare import Comparison, compare
from inferplex.benchtool.compat import CompatLog
from inferplex.benchtool.control import ServerApi, Unsupported, server_api
from inferplex.benchtool.progress import Progress
from inferplex.benchtool.results import BenchReport, CaseResult
from inferplex.benchtool.sweep import BenchOptions, run, split_address


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
        if not comparison.passed:
            promoted, note = False, f"version {candidate} NOT promoted: it regressed"
        elif not promote:
            promoted, note = False, f"version {candidate} passed (promotion not asked)"
        else:
            promoted, note, ok = _promote(api, model, candidate)
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


def _promote(api: ServerApi, model: str, candidate: str) -> tuple[bool, str, bool]:
    """(promoted, note, ok): a server without the load API is not a failure; a refused
    load is."""
    policy = {"specific": {"versions": [int(candidate) if candidate.isdigit() else candidate]}}
    try:
        config = api.model_config(model)
        config["version_policy"] = policy
        api.load_model(model, config)
    except Unsupported as exc:
        return (
            False,
            f"version {candidate} passed; the server has no repository load API ({exc}): "
            f"promote it by setting {model}'s version_policy to specific {{ versions: "
            f"[{candidate}] }} (or making it the latest)",
            True,
        )
    except BenchError as exc:
        return False, f"version {candidate} passed but the promotion failed: {exc}", False
    return True, f"version {candidate} promoted: {model} now serves it alone", True
