"""Grafana dashboards (dashboards/*.json) and their provisioning files.

Static checks: schema version, the ``${datasource}`` variable on every panel
and query, unique ids, a grid that does not overlap, variables that exist and
are used, every metric name known (sidecar's metrics, ``up`` and the recording
rules) and every label matcher valid for its metric. When Debian's
``prometheus`` binary is installed, every query is also sent to a real,
empty Prometheus so that a PromQL syntax error fails here rather than in
Grafana.

The queries themselves come from tests/dashboard_queries.py, which the
end-to-end panel test (tests/integration/test_prometheus_panels.py) shares.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sidecar.evaluate.decision import Decision
from tests import realparts
from tests.dashboard_queries import (
    ALL_QUERIES,
    ANNOTATION_EXPRS,
    DASHBOARD_DIR,
    DASHBOARD_FILES,
    ROOT,
    RULE_FILES,
    PanelQuery,
    expand,
    load,
    panel_queries,
)

# Metric -> its labels, as sidecar exports them.
SIDECAR_METRICS: dict[str, set[str]] = {
    "sidecar_cases_total": {
        "rubric",
        "rubric_version",
        "judge_model",
        "agent",
        "agent_version",
        "outcome",
        "scope",
    },
    "sidecar_check_results_total": {"rubric", "rubric_version", "check", "outcome", "scope"},
    "sidecar_trace_decisions_total": {"decision"},
    "sidecar_drift_evalue": {"rubric", "criterion", "stream"},
    "sidecar_drift_attribution": {"rubric", "criterion", "cause"},
    "sidecar_drift_alarms_total": {"rubric", "criterion", "stream", "attribution"},
    "sidecar_drift_evalue_threshold": set(),
    "sidecar_shadow_kappa": {"rubric", "criterion", "judge_model", "shadow_model"},
    "sidecar_shadow_disagreement": {"rubric", "criterion", "judge_model", "shadow_model"},
    "sidecar_shadow_disagreement_evalue": {"rubric", "criterion", "judge_model", "shadow_model"},
    "sidecar_criterion_verdicts_total": {
        "rubric",
        "rubric_version",
        "judge_model",
        "judge_model_version",
        "criterion",
        "gate",
        "outcome",
        "scope",
    },
    "sidecar_judge_errors_total": {"judge_model", "reason"},
    "sidecar_judge_request_duration_seconds_bucket": {"judge_model", "le"},
    "sidecar_judge_request_duration_seconds_count": {"judge_model"},
    "sidecar_judge_request_duration_seconds_sum": {"judge_model"},
    "sidecar_judge_tokens_total": {"judge_model", "kind"},
    "sidecar_judge_cost_usd_total": {"judge_model"},
    "sidecar_judge_breaker_open": {"judge_model"},
    "sidecar_judge_model_version_info": {"judge_model", "judge_model_version"},
    "sidecar_judge_queue_depth": set(),
    "sidecar_sampling_decisions_total": {"rubric", "decision", "reason"},
    "sidecar_injection_suspected_total": {"rubric"},
    "sidecar_review_cases_total": {"rubric", "reason"},
    "sidecar_kafka_records_total": {"result"},
    "sidecar_dead_letters_total": {"reason"},
    "sidecar_spans_total": set(),
    "sidecar_traces_decided_total": {"reason"},
    "sidecar_evictions_total": {"kind"},
    "sidecar_open_traces": set(),
    "sidecar_late_spans_total": set(),
    "sidecar_orphan_traces_total": set(),
    "sidecar_consumer_lag": {"partition"},
    "sidecar_duplicate_verdicts_total": set(),
    "sidecar_verdict_cache_requests_total": {"result"},
    "sidecar_judge_human_agreement": {
        "rubric",
        "rubric_version",
        "judge_model",
        "criterion",
        "statistic",
    },
    "sidecar_human_labels_total": {"rubric", "criterion"},
    "sidecar_canary_agreement": {
        "rubric",
        "rubric_version",
        "judge_model",
        "judge_model_version",
        "criterion",
        "statistic",
    },
    "sidecar_rubric_info": {"rubric", "rubric_version", "judge_model"},
    "sidecar_build_info": {"version"},
    "sidecar_open_conversations": set(),
    "sidecar_open_conversations_limit": set(),
    "sidecar_conversation_length_turns_bucket": {"le"},
    "sidecar_conversation_verdict_seconds_bucket": {"le"},
    "sidecar_conversations_decided_total": {"reason"},
    "sidecar_conversations_reopened_total": set(),
    "sidecar_conversations_forgotten_total": set(),
    "sidecar_conversation_turns_total": {"result"},
    "up": set(),
}
# Prometheus attaches these to every scraped series.
TARGET_LABELS = {"job", "instance", "__name__", "mode"}  # mode: on every backfill series

GRAFANA_BUILTINS = {"__rate_interval", "__range", "__interval", "__range_s", "__interval_ms"}

PROMQL_WORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "offset",
    "bool",
}


def recording_rule_names() -> set[str]:
    names: set[str] = set()
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
            names.update(r["record"] for r in group["rules"] if "record" in r)
    return names


def _strip_strings(expr: str) -> str:
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)


def selectors(expr: str) -> Iterator[tuple[str, list[str]]]:
    """(metric, label names used in its matchers) for each metric{...} selector."""
    for match in re.finditer(r"([a-zA-Z_:][\w:]*)\s*\{([^}]*)\}", expr):
        labels = re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", _strip_strings(match.group(2)))
        yield match.group(1), labels


def metric_names(expr: str) -> set[str]:
    """Identifiers in a PromQL expression that are metric names (loose parser)."""
    text = _strip_strings(expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\$\{?\w+\}?", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w.:])([a-zA-Z_:][\w:]*)(\s*\()?", text):
        name, call = match.group(1), match.group(2)
        if call or name in PROMQL_WORDS or name in {"inf", "nan", "Inf", "NaN"}:
            continue
        names.add(name)
    return names


def balanced(expr: str) -> bool:
    text = _strip_strings(expr)
    if text.count('"') % 2:
        return False
    pairs = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    for ch in text:
        if ch in "([{":
            stack.append(ch)
        elif ch in pairs and (not stack or stack.pop() != pairs[ch]):
            return False
    return not stack


# ------------------------------------------------------------------ structure


def test_the_three_dashboards_exist() -> None:
    assert {p.name for p in DASHBOARD_FILES} == {
        "quality.json",
        "judge-health.json",
        "pipeline.json",
    }


def test_generated_json_is_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, str(DASHBOARD_DIR / "generate.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_dashboard_uids_unique() -> None:
    uids = [load(p)["uid"] for p in DASHBOARD_FILES]
    assert len(uids) == len(set(uids))


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.stem)
def test_dashboard_header(path: Path) -> None:
    board = load(path)
    assert board["schemaVersion"] >= 39
    assert board["title"].startswith("sidecar / ")
    assert "sidecar" in board["tags"]
    assert board["uid"]
    assert len(board["uid"]) <= 40


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.stem)
def test_datasource_is_a_prometheus_variable(path: Path) -> None:
    variables = load(path)["templating"]["list"]
    ds = [v for v in variables if v["name"] == "datasource"]
    assert len(ds) == 1
    assert ds[0]["type"] == "datasource"
    assert ds[0]["query"] == "prometheus"


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.stem)
def test_every_panel_and_query_uses_the_datasource_variable(path: Path) -> None:
    board = load(path)
    for panel in board["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        for t in panel["targets"]:
            assert t["datasource"]["uid"] == "${datasource}", panel["title"]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            assert variable["datasource"]["uid"] == "${datasource}"
    for ann in board["annotations"]["list"]:
        if "expr" in ann:
            assert ann["datasource"]["uid"] == "${datasource}"


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.stem)
def test_panel_ids_unique_and_ref_ids_unique_per_panel(path: Path) -> None:
    panels = load(path)["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    for panel in panels:
        refs = [t["refId"] for t in panel.get("targets", [])]
        assert len(refs) == len(set(refs)), panel["title"]


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.stem)
def test_grid_fits_and_does_not_overlap(path: Path) -> None:
    taken: set[tuple[int, int]] = set()
    for panel in load(path)["panels"]:
        g = panel["gridPos"]
        assert g["x"] >= 0, panel["title"]
        assert g["x"] + g["w"] <= 24, panel["title"]
        cells = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.stem)
def test_panels_have_units_and_descriptions(path: Path) -> None:
    for panel in load(path)["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["fieldConfig"]["defaults"].get("unit"), panel["title"]
        assert panel.get("description"), panel["title"]


REQUIRED_VARIABLES = {
    "quality": {"datasource", "rubric", "agent", "judge_model", "trace_backend"},
    "judge-health": {"datasource", "rubric", "judge_model"},
    "pipeline": {"datasource", "rubric"},
}


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.stem)
def test_variables_declared_and_used(path: Path) -> None:
    board = load(path)
    declared = {v["name"] for v in board["templating"]["list"]}
    assert declared == REQUIRED_VARIABLES[path.stem]
    exprs = [q.expr for q in panel_queries(path)]
    # Trace links use variables too (trace_backend); Grafana's own (__value) are not declared.
    urls = [link["url"] for link in link_urls(board)]
    found = {m for e in [*exprs, *urls] for m in re.findall(r"\$\{?(\w+)\}?", e)}
    used = {m for m in found if not m.startswith("__") or m in GRAFANA_BUILTINS}
    assert used - GRAFANA_BUILTINS <= declared, "query uses an undeclared variable"
    for name in declared - {"datasource"}:
        assert name in used, f"variable {name} filters no panel"
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", variable["definition"])
        assert match, variable["definition"]
        selector, label = match.groups()
        (metric,) = metric_names(selector)
        assert label in SIDECAR_METRICS[metric], f"{metric} has no label {label}"
        assert variable["query"]["query"] == variable["definition"]


def test_quality_splits_by_judge_model_and_rubric_version_next_to_agent_version() -> None:
    queries = panel_queries(DASHBOARD_DIR / "quality.json")
    by_clauses = " ".join(q.expr for q in queries)
    assert "by (agent, agent_version)" in by_clauses
    assert "by (rubric, rubric_version, judge_model)" in by_clauses
    assert "by (rubric, criterion, rubric_version, judge_model)" in by_clauses


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.stem)
def test_version_change_annotations(path: Path) -> None:
    names = [a["name"] for a in load(path)["annotations"]["list"] if "expr" in a]
    assert names, "no version-change annotation"
    if path.stem == "quality":
        assert {"Rubric or judge model change", "Agent version first seen"} <= set(names)


# ------------------------------------------------------------------ queries


@pytest.mark.parametrize("query", ALL_QUERIES, ids=lambda q: q.id)
def test_query_is_balanced(query: PanelQuery) -> None:
    assert balanced(query.expr), query.expr


@pytest.mark.parametrize("query", ALL_QUERIES, ids=lambda q: q.id)
def test_query_uses_known_metrics(query: PanelQuery) -> None:
    known = SIDECAR_METRICS.keys() | recording_rule_names()
    names = metric_names(query.expr)
    assert names, f"no metric in {query.expr}"
    assert names <= known, f"unknown metric(s) {names - known}"


@pytest.mark.parametrize("query", ALL_QUERIES, ids=lambda q: q.id)
def test_query_matchers_use_labels_the_metric_has(query: PanelQuery) -> None:
    records = recording_rule_names()
    for metric, labels in selectors(query.expr):
        if metric in records:
            continue
        allowed = SIDECAR_METRICS[metric] | TARGET_LABELS
        assert set(labels) <= allowed, f"{metric} has no label(s) {set(labels) - allowed}"


@pytest.mark.parametrize(("name", "expr"), ANNOTATION_EXPRS, ids=[n for n, _ in ANNOTATION_EXPRS])
def test_annotation_queries_use_known_metrics(name: str, expr: str) -> None:
    assert balanced(expr)
    assert metric_names(expr) <= SIDECAR_METRICS.keys()
    for metric, labels in selectors(expr):
        assert set(labels) <= SIDECAR_METRICS[metric] | TARGET_LABELS


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (rubric) (rate(sidecar_cases_total{outcome="x"}[5m]))', {"sidecar_cases_total"}),
        ('sum(up{job="sidecar"})', {"up"}),
        ('a:b:c{x="y"} / on (x) group_left b_total offset 10m', {"a:b:c", "b_total"}),
        ("histogram_quantile(0.95, sum by (le) (rate(h_bucket[$__rate_interval])))", {"h_bucket"}),
    ],
    ids=["aggregation", "up", "recording-rule-and-offset", "histogram"],
)
def test_metric_name_extraction(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_expand_substitutes_grafana_variables() -> None:
    assert expand('rate(m{rubric=~"$rubric"}[$__rate_interval])') == 'rate(m{rubric=~".*"}[1m])'
    assert expand('x{a=~"${agent}"}', {"agent": "bot"}) == 'x{a=~"bot"}'


# ------------------------------------------------------------------ real Prometheus


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("prometheus")
    config = work / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 15s\n", encoding="utf-8")
    port = _free_port()
    proc = subprocess.Popen(
        [
            realparts.tool("prometheus"),
            f"--config.file={config}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("prometheus did not become ready")
            time.sleep(0.1)  # polling a starting server, not waiting for time
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def query_prometheus(url: str, expr: str) -> dict[str, Any]:
    """Instant query; returns the decoded body, errors included (HTTP 400/422)."""
    data = urllib.parse.urlencode({"query": expr}).encode()
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query", data=data, timeout=10) as resp:
            body: dict[str, Any] = json.load(resp)
    except urllib.error.HTTPError as exc:
        body = json.load(exc)
    return body


@pytest.mark.parametrize("query", ALL_QUERIES, ids=lambda q: q.id)
def test_query_is_accepted_by_prometheus(prometheus_url: str, query: PanelQuery) -> None:
    body = query_prometheus(prometheus_url, expand(query.expr))
    assert body["status"] == "success", f"{body.get('error')}: {query.expr}"


@pytest.mark.parametrize(("name", "expr"), ANNOTATION_EXPRS, ids=[n for n, _ in ANNOTATION_EXPRS])
def test_annotation_query_is_accepted_by_prometheus(
    prometheus_url: str, name: str, expr: str
) -> None:
    body = query_prometheus(prometheus_url, expand(expr))
    assert body["status"] == "success", f"{body.get('error')}: {expr}"


# ------------------------------------------------------------------ provisioning


def test_dashboard_provisioning_file() -> None:
    data = yaml.safe_load(
        (DASHBOARD_DIR / "provisioning" / "dashboards.yaml").read_text(encoding="utf-8")
    )
    assert data["apiVersion"] == 1
    (provider,) = data["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"].startswith("/")


def test_datasource_provisioning_file() -> None:
    data = yaml.safe_load(
        (DASHBOARD_DIR / "provisioning" / "datasources.yaml").read_text(encoding="utf-8")
    )
    assert data["apiVersion"] == 1
    prometheus = [d for d in data["datasources"] if d["type"] == "prometheus"]
    assert len(prometheus) == 1
    assert prometheus[0]["url"].startswith("http")
    # $__rate_interval needs the scrape interval to cover at least four scrapes.
    assert prometheus[0]["jsonData"]["timeInterval"] == "15s"


def test_compose_provisions_these_files() -> None:
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text(encoding="utf-8"))
    volumes = compose["services"]["grafana"]["volumes"]
    provider = yaml.safe_load(
        (DASHBOARD_DIR / "provisioning" / "dashboards.yaml").read_text(encoding="utf-8")
    )
    path = provider["providers"][0]["options"]["path"]
    assert f"../dashboards:{path}:ro" in volumes
    assert any(v.startswith("../dashboards/provisioning/datasources.yaml:") for v in volumes)
    assert any(v.startswith("../dashboards/provisioning/dashboards.yaml:") for v in volumes)


# -- exemplars and trace links ---------------------------------------------------------------


def link_urls(board: dict[str, Any]) -> list[dict[str, Any]]:
    """Every data link of every field override of the board's panels."""
    return [
        link
        for panel in board["panels"]
        for override in panel.get("fieldConfig", {}).get("overrides", [])
        for prop in override["properties"]
        if prop["id"] == "links"
        for link in prop["value"]
    ]


def trace_id_links(panel: dict[str, Any]) -> list[dict[str, Any]]:
    (override,) = [
        o
        for o in panel["fieldConfig"]["overrides"]
        if o["matcher"] == {"id": "byName", "options": "trace_id"}
    ]
    (links,) = [p["value"] for p in override["properties"] if p["id"] == "links"]
    return list(links)


def explore_query(url: str) -> tuple[str, dict[str, Any]]:
    """The data source and query an Explore link opens (variables left as Grafana sees them)."""
    parsed = urllib.parse.urlparse(url)
    assert parsed.path == "/explore"
    (panes,) = urllib.parse.parse_qs(parsed.query)["panes"]
    (pane,) = json.loads(panes).values()
    (query,) = pane["queries"]
    assert query["datasource"]["uid"] == pane["datasource"]
    return pane["datasource"], query


PASS_AND_FAILURE_PANELS = {
    "Cases per minute by outcome",
    "Outcome shares",
    "Acceptable share by scope",
    "Acceptable share by agent version",
    "Acceptable share by rubric version and judge model",
    "Errored share by rubric version and judge model",
    "Criterion pass rate by rubric version and judge model",
    "Criterion ERROR rate",
    "Check pass rate by rubric version",
    "Check ERROR rate",
    "Recent failing traces",
}


def test_pass_rate_and_failure_panels_show_exemplars_linked_to_the_trace() -> None:
    board = load(DASHBOARD_DIR / "quality.json")
    panels = {p["title"]: p for p in board["panels"]}
    assert set(PASS_AND_FAILURE_PANELS) <= set(panels)
    for title in PASS_AND_FAILURE_PANELS:
        panel = panels[title]
        assert all(t["exemplar"] is True for t in panel["targets"]), title
        chosen, tempo, jaeger = trace_id_links(panel)
        # The first link goes where the trace_backend variable says, by trace id.
        source, query = explore_query(chosen["url"])
        assert (source, query["query"]) == ("${trace_backend}", "${__value.raw}"), title
        assert "${trace_backend}" in chosen["title"]
        source, query = explore_query(tempo["url"])
        assert source == "tempo"
        assert query == {
            "refId": "A",
            "datasource": {"uid": "tempo"},
            "queryType": "traceql",
            "query": '{ trace:id = "${__value.raw}" }',
        }
        source, query = explore_query(jaeger["url"])
        assert (source, query["queryType"], query["service"]) == ("jaeger", "search", "sidecar")
        assert "eval.outcome=unacceptable" in query["tags"]
    # Panels about other things do not pretend to link to traces.
    for title, panel in panels.items():
        if title not in PASS_AND_FAILURE_PANELS and panel["type"] != "row":
            assert not any(t.get("exemplar") for t in panel["targets"]), title


def test_the_trace_backend_variable_names_tempo_or_jaeger() -> None:
    board = load(DASHBOARD_DIR / "quality.json")
    (variable,) = [v for v in board["templating"]["list"] if v["name"] == "trace_backend"]
    assert variable["type"] == "custom"
    assert [o["value"] for o in variable["options"]] == ["tempo", "jaeger"]
    assert variable["current"]["value"] in {"tempo", "jaeger"}


def test_recent_failing_traces_lists_unacceptable_exemplars_newest_first() -> None:
    board = load(DASHBOARD_DIR / "quality.json")
    (panel,) = [p for p in board["panels"] if p["title"] == "Recent failing traces"]
    assert panel["type"] == "table"
    (target,) = panel["targets"]
    assert 'outcome="unacceptable"' in target["expr"]
    assert metric_names(target["expr"]) == {"sidecar_cases_total"}
    kept = next(t for t in panel["transformations"] if t["id"] == "filterFieldsByName")
    assert {"trace_id", "span_id", "Time"} <= set(kept["options"]["include"]["names"])


def test_the_pipeline_funnel_shows_every_decision() -> None:
    board = load(DASHBOARD_DIR / "pipeline.json")
    panels = {p["title"]: p for p in board["panels"]}
    funnel = panels["Trace decisions in the range (funnel)"]
    (target,) = funnel["targets"]
    assert metric_names(target["expr"]) == {"sidecar_trace_decisions_total"}
    assert "by (decision)" in target["expr"]
    for decision in Decision:
        assert decision.value in funnel["description"], decision


def test_exemplars_link_to_the_trace_backend_in_provisioning() -> None:
    data = yaml.safe_load(
        (DASHBOARD_DIR / "provisioning" / "datasources.yaml").read_text(encoding="utf-8")
    )
    (prometheus,) = [d for d in data["datasources"] if d["type"] == "prometheus"]
    destinations = prometheus["jsonData"]["exemplarTraceIdDestinations"]
    uids = {d["uid"] for d in data["datasources"]}
    assert destinations
    for destination in destinations:
        assert destination["name"] == "trace_id"
        assert destination["datasourceUid"] in uids
