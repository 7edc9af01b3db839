"""The custom metric families Python models define (Triton's ``pb_utils.MetricFamily``), as
exposition families: read from the server's table of them (``backends/worker/model_metrics``)
at each scrape."""

from __future__ import annotations

from typing import cast

from inferplex.backends.worker.model_metrics import Histogram, ModelMetrics
from inferplex.metrics.exposition import Family, HistogramValue, Kind


def model_families(table: ModelMetrics) -> list[Family]:
    families: list[Family] = []
    for found in table.families():
        family = Family(found.name, cast(Kind, found.kind), found.description)
        for labels, value in found.values.items():
            if isinstance(value, Histogram):
                family.add_histogram(
                    dict(labels), HistogramValue(value.bounds, value.counts, value.sum)
                )
            else:
                family.add(dict(labels), value)
        families.append(family)
    return families
