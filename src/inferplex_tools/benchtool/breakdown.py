"""The server-side breakdown of a measurement, from the V2 statistics extension.

``/v2/models/{m}/stats`` counters are cumulative: the bench reads them at the window
boundaries and reports the difference over the windows it used. Per request (as Triton
charges them): the time in the server (``success``), in the queue, and in compute input /
infer / output; per execution: the mean batch size (``inference_count / execution_count``).
The client's own share is its measured mean latency minus the server's request time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: breakdown figure -> the statistics phase it averages per request
_PER_REQUEST = {
    "server_request_us": "success",
    "queue_us": "queue",
    "compute_input_us": "compute_input",
    "compute_infer_us": "compute_infer",
    "compute_output_us": "compute_output",
}


def pick(statistics: list[dict[str, Any]], version: str) -> dict[str, Any] | None:
    """The statistics of ``version`` ("" = the only one, or the sum over all versions)."""
    if version:
        for stats in statistics:
            if str(stats["version"]) == version:
                return stats
        return None
    if len(statistics) == 1:
        return statistics[0]
    return _sum(statistics) if statistics else None


def _sum(statistics: list[dict[str, Any]]) -> dict[str, Any]:
    phases = statistics[0]["inference_stats"].keys()
    return {
        "name": statistics[0]["name"],
        "version": "",
        "inference_count": sum(s["inference_count"] for s in statistics),
        "execution_count": sum(s["execution_count"] for s in statistics),
        "inference_stats": {
            phase: {
                "count": sum(s["inference_stats"][phase]["count"] for s in statistics),
                "ns": sum(s["inference_stats"][phase]["ns"] for s in statistics),
            }
            for phase in phases
        },
    }


def breakdown(
    before: Mapping[str, Any], after: Mapping[str, Any], client_mean_ms: float | None = None
) -> dict[str, float | int]:
    """Figures over the interval between two statistics snapshots of one model version."""
    phases_before, phases_after = before["inference_stats"], after["inference_stats"]

    def delta(phase: str, key: str) -> int:
        return int(phases_after[phase][key]) - int(phases_before[phase][key])

    requests = delta("success", "count")
    result: dict[str, float | int] = {
        "requests": requests,
        "failures": delta("fail", "count"),
        "inferences": int(after["inference_count"]) - int(before["inference_count"]),
        "executions": int(after["execution_count"]) - int(before["execution_count"]),
    }
    for figure, phase in _PER_REQUEST.items():
        count = delta(phase, "count")
        result[figure] = round(delta(phase, "ns") / count / 1000, 2) if count else 0.0
    executions = result["executions"]
    result["batch_size"] = round(result["inferences"] / executions, 3) if executions else 0.0
    if client_mean_ms is not None and requests:
        result["client_overhead_us"] = round(client_mean_ms * 1000 - result["server_request_us"], 2)
    return result
