"""The promotion rule: a candidate becomes a new version only when it measured at least as
fast and close enough to its FP32 parent. Pure functions of the measurements."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from inferplex.errors import InvalidInputError
from inferplex_tools.optimize.measure import Agreement, Timing, speedup

Task = Literal["auto", "classification", "embedding"]


@dataclass(frozen=True)
class Thresholds:
    """What a candidate must reach to be promoted.

    ``min_speedup``: parent time / candidate time (``measure.speedup``) at every measured
    batch size (1.0: never slower). Accuracy, by task: with labels, at most
    ``max_accuracy_drop`` (0.01 = one point) below the parent; a classifier without labels
    agrees with the parent's top-1 on at least ``min_agreement`` of the rows; an embedder's
    mean cosine similarity is at least ``min_cosine``."""

    min_speedup: float = 1.0
    max_accuracy_drop: float = 0.01
    min_agreement: float = 0.99
    min_cosine: float = 0.98

    def __post_init__(self) -> None:
        for name, low, high in (
            ("min_speedup", 0.0, None),
            ("max_accuracy_drop", 0.0, 1.0),
            ("min_agreement", 0.0, 1.0),
            ("min_cosine", -1.0, 1.0),
        ):
            value = getattr(self, name)
            if value < low or (high is not None and value > high):
                bounds = f"at least {low:g}" if high is None else f"between {low:g} and {high:g}"
                raise InvalidInputError(f"{name} must be {bounds}, got {value:g}")


def resolve_task(task: Task, has_labels: bool) -> Literal["classification", "embedding"]:
    """``auto``: classification when the evaluation set has labels, else embedding."""
    if task == "auto":
        return "classification" if has_labels else "embedding"
    return task


def failures(
    timings: Mapping[int, tuple[Timing, Timing]],
    accuracy: Agreement,
    task: Literal["classification", "embedding"],
    thresholds: Thresholds,
) -> list[str]:
    """Every reason not to promote the candidate; empty when it may be promoted.

    ``timings``: per batch size, (parent, candidate)."""
    reasons = []
    for batch, (parent, candidate) in sorted(timings.items()):
        ratio = speedup(parent, candidate)
        if ratio < thresholds.min_speedup:
            slower = "slower than" if ratio < 1 else "not enough faster than"
            reasons.append(
                f"{slower} FP32 at batch {batch}: {ratio:.3f}x the speed "
                f"({candidate.median_s * 1e3:.3f} ms vs {parent.median_s * 1e3:.3f} ms; "
                f"needed >= {thresholds.min_speedup:.2f}x)"
            )
    drop = accuracy.accuracy_drop
    if task == "classification" and drop is not None:
        if drop > thresholds.max_accuracy_drop:
            reasons.append(
                f"less accurate: {accuracy.candidate_accuracy:.2%} vs "
                f"{accuracy.parent_accuracy:.2%} on the evaluation set "
                f"(drop {drop * 100:.2f} points; allowed "
                f"{thresholds.max_accuracy_drop * 100:.2f})"
            )
    elif task == "classification":
        agreement = accuracy.top1_agreement
        if agreement is None or agreement < thresholds.min_agreement:
            shown = "n/a (output of rank 1)" if agreement is None else f"{agreement:.2%}"
            reasons.append(
                f"top-1 agreement with FP32 {shown}; needed >= {thresholds.min_agreement:.2%}"
            )
    elif accuracy.cosine_mean < thresholds.min_cosine:
        reasons.append(
            f"cosine similarity to FP32 {accuracy.cosine_mean:.6f} (mean); needed >= "
            f"{thresholds.min_cosine:g}"
        )
    return reasons
