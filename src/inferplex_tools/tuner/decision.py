"""Whether the search's winner replaces the model's current configuration.

The winner and the current configuration are compared as measured in the same rung (same
window length). A gain is only believed above ``min_gain``: by default the bench's own
stability tolerance (a measurement's windows agree within ±10 %), so a smaller difference
is within the noise of the measurements being compared.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferplex_tools.tuner.pareto import Point

#: the least relative throughput gain that replaces the current configuration (the bench's
#: default stability tolerance, ``BenchOptions.stability``)
MIN_GAIN = 0.1


@dataclass(frozen=True)
class Decision:
    """``write``: the winner replaces the current configuration; ``reason``: why (printed)."""

    write: bool
    reason: str


def decide(
    best: Point, current: Point | None, target_ms: float | None, min_gain: float = MIN_GAIN
) -> Decision:
    """Replace the current configuration only when the winner differs from it and beats it:
    meets a p99 target the current one misses, or has more than ``min_gain`` more
    throughput; ``current`` None: it has no measurement to compare with."""
    if current is None:
        return Decision(True, f"{best.key} wins; the current configuration was not measured")
    if best.key == current.key:
        return Decision(False, f"the current configuration ({current.key}) is the best: kept")
    if target_ms is not None and current.p99_ms > target_ms:
        return Decision(
            True,
            f"the current configuration ({current.key}) misses p99 <= {target_ms:g} ms "
            f"({current.p99_ms:.3f} ms); {best.key} meets it",
        )
    gain = best.throughput / current.throughput - 1 if current.throughput > 0 else float("inf")
    if gain > min_gain:
        return Decision(
            True,
            f"{best.key} beats the current configuration ({current.key}) by {gain:+.1%} "
            f"throughput (margin {min_gain:.0%})",
        )
    return Decision(
        False,
        f"{best.key} does not beat the current configuration ({current.key}) by more than "
        f"the {min_gain:.0%} margin ({gain:+.1%} throughput): the current one is kept",
    )
