"""The server adds up the custom metric updates of every worker, and /metrics shows them."""

from __future__ import annotations

from inferplex.backends.worker.model_metrics import Histogram, ModelMetrics
from inferplex.metrics.exposition import render
from inferplex.metrics.model_families import model_families

LABELS = (("model", "m"),)


def test_updates_from_several_workers_add_up() -> None:
    table = ModelMetrics()
    table.apply([("counter", "c", "requests", LABELS, 2.0)])
    table.apply([("counter", "c", "requests", LABELS, 3.0)])  # another instance
    table.apply([("gauge", "g", "level", LABELS, 10.0, -1.0)])
    table.apply([("gauge", "g", "level", LABELS, None, 4.0)])
    table.apply([("histogram", "h", "sizes", (), (1.0, 10.0), [1, 0, 2], 30.5)])
    table.apply([("histogram", "h", "sizes", (), (1.0, 10.0), [0, 1, 0], 5.0)])
    values = {f.name: f.values for f in table.families()}
    assert values["c"] == {LABELS: 5.0}
    assert values["g"] == {LABELS: 13.0}
    assert values["h"] == {(): Histogram((1.0, 10.0), [1, 1, 2], 35.5)}


def test_an_update_of_another_kind_is_dropped() -> None:
    table = ModelMetrics()
    table.apply([("counter", "c", "requests", (), 1.0)])
    table.apply([("gauge", "c", "requests", (), 7.0, 0.0)])
    assert table.families()[0].values == {(): 1.0}


def test_the_families_render_for_prometheus() -> None:
    table = ModelMetrics()
    table.apply([("counter", "c", "requests", LABELS, 2.0)])
    table.apply([("histogram", "h", "sizes", (), (1.0,), [1, 1], 3.0)])
    text = render(model_families(table)).decode()
    assert text.splitlines() == [
        "# HELP c requests",
        "# TYPE c counter",
        'c{model="m"} 2.0',
        "# HELP h sizes",
        "# TYPE h histogram",
        'h_bucket{le="1.0"} 1',
        'h_bucket{le="+Inf"} 2',
        "h_sum 3.0",
        "h_count 2",
    ]
