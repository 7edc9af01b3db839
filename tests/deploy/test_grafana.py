"""deploy/grafana: every dashboard query and alert rule parses (promtool), names only metrics
the server really exports (scraped from the live test server), evaluates without error on a
real Prometheus, and the alerts fire when they should (promtool test rules)."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import requests
import yaml

from inferplex_tools.benchtool.launch import RunningServer
from tests.support.prometheus import binary, query, running_prometheus, wait_for_series

GRAFANA = Path(__file__).resolve().parents[2] / "deploy" / "grafana"
DASHBOARD = GRAFANA / "inferplex-dashboard.json"
ALERTS = GRAFANA / "alerts.yml"

#: Grafana's template variables, as a dashboard would expand them
VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$model": ".*"}
#: PromQL words that look like metric names but are not
KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
    "and", "or", "unless", "offset", "inf", "nan",
}  # fmt: skip


def expand(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    return expr


def panel_queries(panels: list[dict[str, Any]]) -> Iterator[tuple[str, str]]:
    for panel in panels:
        yield from panel_queries(panel.get("panels", []))
        for target in panel.get("targets", []):
            yield panel["title"], expand(target["expr"])


def dashboard_queries() -> list[tuple[str, str]]:
    document = json.loads(DASHBOARD.read_text())
    queries = list(panel_queries(document["panels"]))
    for variable in document["templating"]["list"]:
        if variable["type"] == "query":
            # label_values(metric, label): the metric is what must exist
            match = re.fullmatch(r"label_values\((\w+),\s*\w+\)", variable["query"]["query"])
            assert match, f"variable {variable['name']}: unexpected query {variable['query']}"
            queries.append((f"variable {variable['name']}", match.group(1)))
    return queries


def alert_queries() -> list[tuple[str, str]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [(rule["alert"], rule["expr"]) for group in groups for rule in group["rules"]]


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (strings, label matchers, ranges and
    grouping label lists removed; function and aggregation names are followed by '(')."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}", " ", expr)
    expr = re.sub(r"\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        before = expr[match.start() - 1] if match.start() else " "
        if before.isdigit() or before == ".":  # the exponent of a number such as 1e-9
            continue
        if expr[match.end() :].lstrip().startswith("(") or match.group(0) in KEYWORDS:
            continue
        names.add(match.group(0))
    return names


def exported_names(server: RunningServer) -> set[str]:
    """Every series name the server exports (histograms: _bucket, _sum, _count)."""
    text = requests.get(f"http://{server.metrics_url}/metrics", timeout=10).text
    names = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE):
        names.update(
            {f"{name}_bucket", f"{name}_sum", f"{name}_count"} if kind == "histogram" else {name}
        )
    return names


def test_the_metric_name_extraction() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (model, le) (rate(a_bucket{model=~"x|y"}[5m]))) '
        "/ on (model) group_left b_total > 1e-9 and count(c == 0) or vector(0)"
    )
    assert metric_names(expr) == {"a_bucket", "b_total", "c"}


def test_every_query_names_only_metrics_the_server_exports(server: RunningServer) -> None:
    queries = dashboard_queries() + alert_queries()
    assert len(queries) > 20
    wanted = set().union(*(metric_names(expr) for _, expr in queries))
    # window gauges appear after the server's first one-second sample: poll for them
    deadline = time.monotonic() + 15
    while not wanted <= (exported := exported_names(server)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for where, expr in queries:
        names = metric_names(expr)
        assert names, f"{where}: no metric found in {expr!r}"
        assert names <= exported, f"{where}: not exported: {sorted(names - exported)}"


def test_promtool_parses_every_query_and_checks_the_rules(tmp_path: Path) -> None:
    promtool = binary("promtool")
    rules = [
        {"record": f"dashboard:query_{i}", "expr": expr}
        for i, (_, expr) in enumerate(dashboard_queries())
    ]
    recording = tmp_path / "dashboard_rules.yml"
    recording.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    for path in (recording, ALERTS):
        result = subprocess.run(
            [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_every_query_evaluates_on_a_real_prometheus(server: RunningServer, tmp_path: Path) -> None:
    with running_prometheus([server.metrics_url], tmp_path) as url:
        assert wait_for_series(url, 'up{job="inferplex"} == 1')
        for where, expr in dashboard_queries() + alert_queries():
            try:
                query(url, expr)
            except AssertionError as exc:  # Prometheus' error, e.g. bad vector matching
                raise AssertionError(f"{where}: {exc}") from None


ALERT_TESTS = """
rule_files: [{alerts}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'nv_inference_request_success{{model="a",version="1"}}'
        values: '0+90x20'
      - series: 'nv_inference_request_failure{{model="a",version="1"}}'
        values: '0+10x20'
      - series: 'nv_inference_request_success{{model="b",version="1"}}'
        values: '0+100x20'
      - series: 'nv_inference_request_failure{{model="b",version="1"}}'
        values: '0+0x20'
      - series: 'nv_inference_pending_request_count{{model="a",version="1"}}'
        values: '100x20'
      - series: 'inferplex_model_busy_ratio{{model="a",version="1"}}'
        values: '0.97x20'
      - series: 'nv_inference_pending_request_count{{model="b",version="1"}}'
        values: '100x20'
      - series: 'inferplex_model_busy_ratio{{model="b",version="1"}}'
        values: '0.2x20'
      # model a: every request between 0.5 and 1 s, so p99 is near 1 s
      - series: 'inferplex_request_duration_seconds_bucket{{model="a",version="1",le="0.5"}}'
        values: '0+0x20'
      - series: 'inferplex_request_duration_seconds_bucket{{model="a",version="1",le="1.0"}}'
        values: '0+100x20'
      - series: 'inferplex_request_duration_seconds_bucket{{model="a",version="1",le="+Inf"}}'
        values: '0+100x20'
      - series: 'inferplex_model_state{{model="c",state="UNAVAILABLE"}}'
        values: '1x20'
      - series: 'inferplex_model_state{{model="a",state="READY"}}'
        values: '1x20'
    alert_rule_test:
      - eval_time: 15m
        alertname: InferplexHighErrorRate
        exp_alerts:
          - exp_labels: {{severity: warning, model: a}}
            exp_annotations:
              summary: "a: 10% of requests fail"
              description: More than 5% of the model's requests failed over the last 5 minutes.
      - eval_time: 15m
        alertname: InferplexQueueSaturated
        exp_alerts:
          - exp_labels: {{severity: warning, model: a}}
            exp_annotations:
              summary: "a: 100 requests queued with every instance busy"
              description: >-
                The queue keeps growing while the model's instances are saturated: add
                instances, raise max_batch_size or shed load.
      - eval_time: 15m
        alertname: InferplexP99OverTarget
        exp_alerts:
          - exp_labels: {{severity: warning, model: a}}
            exp_annotations:
              summary: "a: p99 latency 995ms over the 500 ms target"
              description: >-
                The model's 99th percentile request latency inside the server is above target.
      - eval_time: 15m
        alertname: InferplexModelUnavailable
        exp_alerts:
          - exp_labels: {{severity: critical, model: c}}
            exp_annotations:
              summary: "c is UNAVAILABLE"
              description: The model failed to load or was unloaded; the repository index says why.
"""


def test_the_alerts_fire_when_they_should(tmp_path: Path) -> None:
    spec = tmp_path / "alerts_test.yml"
    spec.write_text(ALERT_TESTS.format(alerts=json.dumps(str(ALERTS))))
    result = subprocess.run(
        [binary("promtool"), "test", "rules", str(spec)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
