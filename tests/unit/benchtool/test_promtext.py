"""The Prometheus text parser used for recorded scrapes."""

from __future__ import annotations

import math

import pytest

from inferplex_tools.benchtool.promtext import parse

TEXT = r"""# HELP nv_inference_count Inferences performed
# TYPE nv_inference_count counter
nv_inference_count{model="add_sub",version="1"} 42.0
process_cpu_seconds 1.5 1700000000000
odd{path="a\"b\\c",empty=""} +Inf
h_bucket{le="0.1", model="m"} NaN
"""


def test_samples_labels_and_special_values() -> None:
    samples = parse(TEXT)
    assert samples[0] == ("nv_inference_count", {"model": "add_sub", "version": "1"}, 42.0)
    assert samples[1] == ("process_cpu_seconds", {}, 1.5)
    assert samples[2][1] == {"path": 'a"b\\c', "empty": ""} and samples[2][2] == math.inf
    assert samples[3][1] == {"le": "0.1", "model": "m"} and math.isnan(samples[3][2])


def test_a_broken_line_is_named() -> None:
    with pytest.raises(ValueError, match="metrics line 2"):
        parse("ok 1\nbroken{model=unquoted} 1\n")
