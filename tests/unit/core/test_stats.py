"""Per-version statistics in Triton's shape."""

from __future__ import annotations

from inferplex.core.stats import ModelStats


def test_a_batch_charges_each_request_its_queue_time_and_the_batch_compute_times() -> None:
    stats = ModelStats("m", "1")
    stats.record_batch(3, 400, [200, 300], 10, 20, 5)
    stats.record_batch(3, 100, [50], 1, 2, 3)
    result = stats.to_dict()
    assert (result["inference_count"], result["execution_count"]) == (6, 2)
    phases = result["inference_stats"]
    assert phases["queue"] == {"count": 3, "ns": 350}
    assert phases["compute_input"] == {"count": 3, "ns": 21}
    assert phases["compute_infer"] == {"count": 3, "ns": 42}
    assert phases["compute_output"] == {"count": 3, "ns": 13}
    assert result["batch_stats"] == [
        {
            "batch_size": 3,
            "compute_input": {"count": 2, "ns": 11},
            "compute_infer": {"count": 2, "ns": 22},
            "compute_output": {"count": 2, "ns": 8},
        }
    ]


def test_requests_count_as_success_or_failure_and_mark_the_last_inference() -> None:
    stats = ModelStats("m", "1")
    stats.record_request(True, 100)
    stats.record_request(True, 50)
    stats.record_request(False, 7)
    phases = stats.to_dict()["inference_stats"]
    assert phases["success"] == {"count": 2, "ns": 150}
    assert phases["fail"] == {"count": 1, "ns": 7}
    assert stats.last_inference_ms > 0
