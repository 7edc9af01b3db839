"""Reading routing.yaml: shapes accepted, and every mistake named with its field path."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferplex.errors import ConfigError
from inferplex.routing.config import ROUTING_FILE, parse_routing, read_routing

SPLIT = """
routes:
  digits:
    targets:
      - {model: digits, version: 1, weight: 90}
      - {model: digits, version: 2, weight: 10}
    sticky: user
    shadow: {model: digits_next, fraction: 0.5}
  classifier:
    variants:
      - {model: clf_fp32, label: fp32}
      - {model: clf_int8, label: int8}
    degrade: {max_queue: 8, p99_ms: 20}
"""


def test_a_full_file(tmp_path: Path) -> None:
    (tmp_path / ROUTING_FILE).write_text(SPLIT)
    routing = read_routing(tmp_path)
    assert routing is not None
    digits = routing.routes["digits"]
    assert digits.kind == "split"
    assert [(t.model, t.version, t.weight) for t in digits.targets] == [
        ("digits", "1", 90.0),
        ("digits", "2", 10.0),
    ]
    assert [t.name for t in digits.targets] == ["digits:1", "digits:2"]
    assert digits.sticky is not None and digits.sticky.parameter == "user"
    assert digits.shadow is not None and digits.shadow.fraction == 0.5
    classifier = routing.routes["classifier"]
    assert classifier.kind == "variants" and classifier.members[1].name == "int8"
    assert classifier.degrade is not None and classifier.degrade.max_queue == 8


def test_no_file_is_no_routes(tmp_path: Path) -> None:
    assert read_routing(tmp_path) is None


def test_sticky_true_uses_the_routing_key_parameter() -> None:
    routing = parse_routing(
        {"routes": {"r": {"targets": [{"model": "a"}, {"model": "b"}], "sticky": True}}}
    )
    sticky = routing.routes["r"].sticky
    assert sticky is not None and sticky.parameter == "routing_key"


@pytest.mark.parametrize(
    ("route", "message"),
    [
        ({"targets": [{"model": "a"}], "variants": [{"model": "b"}]}, "either 'targets'"),
        ({}, "either 'targets'"),
        ({"targets": [{"model": "a", "weight": 0}]}, "add up to 0"),
        ({"targets": [{"model": "a", "weight": -1}]}, "targets.0.weight"),
        ({"targets": [{"model": "a", "version": "two"}]}, "targets.0.version: version must be"),
        ({"targets": [{"model": "a"}, {"model": "a"}]}, "a appears twice"),
        ({"variants": [{"model": "a"}]}, "at least two"),
        ({"variants": [{"model": "a"}, {"model": "b"}], "sticky": True}, "'sticky' applies"),
        ({"targets": [{"model": "a"}], "degrade": {}}, "'degrade' applies"),
        ({"targets": [{"model": "a"}], "shadow": {"model": "s", "fraction": 2}}, "fraction"),
        ({"targets": [{"modle": "a"}]}, "targets.0.modle: Extra inputs are not permitted"),
    ],
)
def test_mistakes_are_named(route: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=r"routing\.yaml: routes\.r") as caught:
        parse_routing({"routes": {"r": route}})
    assert message in caught.value.message


def test_file_level_mistakes(tmp_path: Path) -> None:
    path = tmp_path / ROUTING_FILE
    path.write_text("routes: [\n")
    with pytest.raises(ConfigError, match="cannot read it"):
        read_routing(tmp_path)
    path.write_text("- a\n")
    with pytest.raises(ConfigError, match="expected a mapping with a 'routes' key"):
        read_routing(tmp_path)
    with pytest.raises(ConfigError, match="must be non-empty and have no '/'"):
        parse_routing({"routes": {"a/b": {"targets": [{"model": "m"}]}}})
