"""Generate the sidecar Grafana dashboards (quality, judge health, pipeline).

The JSON files beside this script are its output and are what Grafana loads;
edit this script, then run it:

    python dashboards/generate.py           # rewrite the JSON files
    python dashboards/generate.py --check   # exit 1 if a file is out of date

Three layers, top to bottom: PromQL helpers that return strings; one builder
per panel type (``timeseries``, ``stat``, ``bargauge``, ``table``,
``breaker_timeline``) that writes Grafana's JSON model as plain dicts; and the
dashboards as content (which panel shows what: title, description,
``(expr, legend)`` queries, unit, thresholds, width).

The builders spell out every option, so the JSON moves only when this script
does. grafana-foundation-sdk was tried for them (0.0.21, November 2026): it
wrote the same panels in as many lines, added its own defaults to every panel
and schemaVersion 42, warns that its classic-dashboard builder is deprecated
in favour of the v2 schema, and on PyPI an unpinned install resolves to a
January 2026 build for Grafana 10.1 that lacks methods the port needs.

Conventions every panel follows (tests/test_dashboards.py enforces them):
- the data source is the ``${datasource}`` variable;
- every query is a PromQL ``expr`` in ``targets``, built only from sidecar's
  metric names, ``up`` and the recording rules in deploy/prometheus/rules;
- shares never count ERROR or SKIPPED in a pass-rate denominator, and an absent
  numerator series (no PASS yet) reads as 0 where the denominator exists;
- pass-rate and failure panels ask for exemplars (``exemplar: true``), and the
  ``trace_id`` of each exemplar links to the trace (:func:`trace_links`): in the
  trace data source named by the ``trace_backend`` variable (``tempo`` or
  ``jaeger``, the data source uid), by TraceQL in Tempo, by tag search in Jaeger.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCHEMA_VERSION = 39
DS = {"type": "prometheus", "uid": "${datasource}"}
RATE = "$__rate_interval"
RANGE = "$__range"

# Grafana's JSON model, kept as plain dicts: what is written is what Grafana reads.
Board = dict[str, Any]
Panel = dict[str, Any]
Target = dict[str, Any]
Query = tuple[str, str]  # (PromQL expr, legend format)
Steps = list[tuple[str, float | None]]

# Label filters per metric family; each uses only labels that family has, and mode, which
# every series of a `sidecar backfill` carries: history never mixes into live figures.
LIVE = 'mode!="backfill"'
CASES = f'rubric=~"$rubric", agent=~"$agent", judge_model=~"$judge_model", {LIVE}'
CRITERIA = f'rubric=~"$rubric", judge_model=~"$judge_model", {LIVE}'
RUBRIC = f'rubric=~"$rubric", {LIVE}'
JUDGE = 'judge_model=~"$judge_model"'

# Threshold steps (color, from value); None is the base step.
GREEN: Steps = [("green", None)]
GOOD_HIGH: Steps = [("red", None), ("orange", 0.8), ("green", 0.95)]
ERROR_LOW: Steps = [("green", None), ("orange", 0.01), ("red", 0.03)]
ERROR_ALERT: Steps = [("transparent", None), ("red", 0.03)]  # a line at the alert's 3%
KAPPA: Steps = [("red", None), ("orange", 0.4), ("green", 0.6)]


# ---------------------------------------------------------------- PromQL


def agg(by: Iterable[str]) -> str:
    labels = ", ".join(by)
    return f"sum by ({labels})" if labels else "sum"


def sel(metric: str, *matchers: str) -> str:
    inner = ", ".join(m for m in matchers if m)
    return f"{metric}{{{inner}}}" if inner else metric


def rate(metric: str, *matchers: str, by: Iterable[str] = (), window: str = RATE) -> str:
    return f"{agg(by)} (rate({sel(metric, *matchers)}[{window}]))"


def per_minute(metric: str, *matchers: str, by: Iterable[str] = ()) -> str:
    return f"{rate(metric, *matchers, by=by)} * 60"


def quantile(q: float, metric: str, *matchers: str, by: Iterable[str] = ()) -> str:
    """The ``q`` quantile of a histogram's ``_bucket`` series, per ``by``."""
    return f"histogram_quantile({q}, {rate(metric, *matchers, by=[*by, 'le'])})"


def in_range(metric: str, *matchers: str, by: Iterable[str]) -> str:
    """The increase over the dashboard's time range, for stats and tables."""
    return f"{agg(by)} (increase({sel(metric, *matchers)}[{RANGE}]))"


def share(
    metric: str,
    filters: str,
    label: str,
    num: str,
    den: str,
    by: Iterable[str] = (),
    fn: str = "rate",
    window: str = RATE,
) -> str:
    """sum(label=~num) / sum(label=~den), with an absent numerator read as 0."""
    by = tuple(by)

    def part(values: str) -> str:
        matcher = f'{label}=~"{values}"'
        return f"{agg(by)} ({fn}({sel(metric, filters, matcher)}[{window}]))"

    return f"({part(num)} or 0 * {part(den)}) / {part(den)}"


def pass_share(
    metric: str, filters: str, by: Iterable[str], fn: str = "rate", window: str = RATE
) -> str:
    return share(metric, filters, "outcome", "PASS", "PASS|FAIL", by, fn, window)


def error_share(
    metric: str, filters: str, by: Iterable[str], fn: str = "rate", window: str = RATE
) -> str:
    return share(metric, filters, "outcome", "ERROR", "PASS|FAIL|ERROR", by, fn, window)


def case_share(outcome: str, by: Iterable[str], fn: str = "rate", window: str = RATE) -> str:
    # Acceptable share leaves errored cases out, like every pass rate here.
    den = (
        "acceptable|unacceptable" if outcome == "acceptable" else "acceptable|unacceptable|errored"
    )
    return share("sidecar_cases_total", CASES, "outcome", outcome, den, by, fn, window)


def human_agreement(statistic: str) -> str:
    matcher = f'statistic="{statistic}"'
    by = "rubric, rubric_version, judge_model, criterion"
    return f"max by ({by}) ({sel('sidecar_judge_human_agreement', CRITERIA, matcher)})"


def canary(statistic: str) -> str:
    matcher = f'statistic="{statistic}"'
    by = "rubric, criterion, judge_model, judge_model_version"
    return f"max by ({by}) ({sel('sidecar_canary_agreement', CRITERIA, matcher)})"


def first_seen(metric: str, matchers: str, by: Iterable[str]) -> str:
    """Label sets present now but not 10 minutes ago: a new version appeared."""
    by_clause = f"max by ({', '.join(by)})"
    return f"{by_clause} ({sel(metric, matchers)}) unless {by_clause} ({sel(metric, matchers)} offset 10m)"


# ---------------------------------------------------------------- panels


@dataclass(frozen=True, slots=True)
class Cell:
    """A panel and its size on Grafana's 24-column grid; ``layout`` places it."""

    panel: Panel
    w: int
    h: int


def target(
    expr: str, legend: str = "", ref: str = "A", instant: bool = False, table: bool = False
) -> Target:
    t: Target = {
        "refId": ref,
        "datasource": DS,
        "editorMode": "code",
        "expr": expr,
        "legendFormat": legend or "__auto",
        "range": not instant,
        "instant": instant,
    }
    if table:
        t["format"] = "table"
    return t


def targets(queries: tuple[Query, ...], instant: bool) -> list[Target]:
    """One target per (expr, legend), with refIds A, B, ... in order."""
    return [target(e, legend, chr(ord("A") + i), instant) for i, (e, legend) in enumerate(queries)]


def field_defaults(
    unit: str,
    steps: Steps,
    color: str = "thresholds",
    lo: float | None = None,
    hi: float | None = None,
) -> dict[str, Any]:
    d: dict[str, Any] = {"unit": unit, "color": {"mode": color}}
    if lo is not None:
        d["min"] = lo
    if hi is not None:
        d["max"] = hi
    d["thresholds"] = {"mode": "absolute", "steps": [{"color": c, "value": v} for c, v in steps]}
    return d


def panel(
    kind: str,
    title: str,
    description: str,
    tgts: list[Target],
    defaults: dict[str, Any],
    options: dict[str, Any],
    w: int,
    h: int,
    **extra: Any,
) -> Cell:
    """The fields every panel has; ``extra`` goes after the targets."""
    return Cell(
        {
            "type": kind,
            "title": title,
            "description": description,
            "datasource": DS,
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": options,
            "targets": tgts,
            **extra,
        },
        w,
        h,
    )


LAST_VALUE = {"calcs": ["lastNotNull"], "fields": "", "values": False}


def timeseries(
    title: str,
    description: str,
    *queries: Query,
    unit: str = "short",
    lo: float | None = 0,
    hi: float | None = None,
    steps: Steps | None = None,
    stack: bool = False,
    w: int = 12,
    h: int = 8,
) -> Cell:
    """Range queries as lines, legend as a table on the right; ``steps`` shows as dashed lines."""
    d = field_defaults(unit, steps or GREEN, "palette-classic", lo, hi)
    d["custom"] = {
        "drawStyle": "line",
        "lineWidth": 1,
        "fillOpacity": 25 if stack else 5,
        "showPoints": "never",
        "spanNulls": False,
        "stacking": {"mode": "normal" if stack else "none", "group": "A"},
        # Threshold lines mark alert thresholds on the graph.
        "thresholdsStyle": {"mode": "dashed" if steps is not None else "off"},
    }
    options = {
        "legend": {
            "displayMode": "table",
            "placement": "right",
            "showLegend": True,
            "calcs": ["lastNotNull", "mean"],
        },
        "tooltip": {"mode": "multi", "sort": "desc"},
    }
    return panel("timeseries", title, description, targets(queries, False), d, options, w, h)


def stat(
    title: str,
    description: str,
    *queries: Query,
    unit: str = "short",
    steps: Steps | None = None,
    w: int = 6,
    h: int = 5,
) -> Cell:
    """Instant queries, one number per series, colored by ``steps`` (blue without)."""
    options = {
        "reduceOptions": LAST_VALUE,
        "colorMode": "value",
        "graphMode": "none",
        "justifyMode": "auto",
        "orientation": "auto",
        "textMode": "auto",
        "wideLayout": True,
    }
    d = field_defaults(unit, steps or [("blue", None)])
    return panel("stat", title, description, targets(queries, True), d, options, w, h)


def bargauge(
    title: str,
    description: str,
    *queries: Query,
    unit: str,
    steps: Steps,
    lo: float | None = 0,
    hi: float | None = 1,
    w: int = 12,
    h: int = 8,
) -> Cell:
    """Instant queries as horizontal bars colored by ``steps``."""
    options = {
        "reduceOptions": LAST_VALUE,
        "displayMode": "gradient",
        "orientation": "horizontal",
        "showUnfilled": True,
        "valueMode": "color",
        "namePlacement": "auto",
        "sizing": "auto",
    }
    d = field_defaults(unit, steps, lo=lo, hi=hi)
    return panel("bargauge", title, description, targets(queries, True), d, options, w, h)


def table(
    title: str, description: str, expr: str, value_name: str, w: int = 12, h: int = 7
) -> Cell:
    """One instant query as a table, its value column renamed to ``value_name``."""
    options = {
        "showHeader": True,
        "cellHeight": "sm",
        "footer": {"show": False, "reducer": ["sum"], "fields": ""},
    }
    organize = {"excludeByName": {"Time": True}, "renameByName": {"Value": value_name}}
    return panel(
        "table",
        title,
        description,
        [target(expr, instant=True, table=True)],
        field_defaults("short", GREEN, "palette-classic"),
        options,
        w,
        h,
        transformations=[{"id": "organize", "options": organize}],
    )


def breaker_timeline(
    title: str, description: str, *queries: Query, w: int = 12, h: int = 8
) -> Cell:
    """State timeline of a 0/1 series read as a circuit breaker: 0 closed, 1 open."""
    d = field_defaults("short", [("green", None), ("red", 1)])
    d["mappings"] = [
        {
            "type": "value",
            "options": {
                "0": {"text": "closed", "color": "green", "index": 0},
                "1": {"text": "open", "color": "red", "index": 1},
            },
        }
    ]
    options = {
        "mergeValues": True,
        "showValue": "auto",
        "alignValue": "left",
        "rowHeight": 0.9,
        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
        "tooltip": {"mode": "single", "sort": "none"},
    }
    return panel("state-timeline", title, description, targets(queries, False), d, options, w, h)


# The trace data source of the links: its uid, which is also its type (tempo or jaeger).
TRACE_BACKEND = "${trace_backend}"
TRACE_ID = "${__value.raw}"


def explore(datasource: str, query: dict[str, Any]) -> str:
    """A Grafana Explore URL running ``query`` in ``datasource``; ``${...}`` left for Grafana."""
    pane = {
        "trace": {
            "datasource": datasource,
            "queries": [{"refId": "A", "datasource": {"uid": datasource}, **query}],
            "range": {"from": "now-24h", "to": "now"},
        }
    }
    encoded = urllib.parse.quote(json.dumps(pane, separators=(",", ":")), safe="")
    # Grafana fills the variables in before following the link: keep them readable to it.
    encoded = re.sub(r"%24%7B([\w.]+)%7D", r"${\1}", encoded)
    return f"/explore?schemaVersion=1&panes={encoded}"


def trace_links(rubric_label: bool = True) -> list[dict[str, Any]]:
    """Links on an exemplar's ``trace_id``: to the trace, in the backend the variable picks."""
    tags = "eval.outcome=unacceptable"
    if rubric_label:
        tags += " eval.rubric.id=${__field.labels.rubric}"
    links = [
        # Trace-id lookup: Tempo's TraceQL editor and Jaeger both take a bare trace id.
        ("Trace in ${trace_backend}", TRACE_BACKEND, {"queryType": "traceql", "query": TRACE_ID}),
        (
            "Tempo: TraceQL",
            "tempo",
            {"queryType": "traceql", "query": '{ trace:id = "' + TRACE_ID + '" }'},
        ),
        (
            "Jaeger: failing verdict spans (tag search)",
            "jaeger",
            {"queryType": "search", "service": "sidecar", "tags": tags},
        ),
    ]
    return [
        {"title": title, "url": explore(ds, query), "targetBlank": True}
        for title, ds, query in links
    ]


def with_exemplars(cell: Cell, rubric_label: bool = True) -> Cell:
    """Ask every target for exemplars and link their ``trace_id`` to the trace."""
    for t in cell.panel["targets"]:
        t["exemplar"] = True
    cell.panel["fieldConfig"]["overrides"].append(
        {
            "matcher": {"id": "byName", "options": "trace_id"},
            "properties": [{"id": "links", "value": trace_links(rubric_label)}],
        }
    )
    return cell


def sum_increase_unacceptable() -> str:
    failed = sel("sidecar_cases_total", CASES, 'outcome="unacceptable"')
    return f"{agg(['rubric'])} (increase({failed}[{RATE}]))"


def recent_failing_traces(title: str, description: str, expr: str, w: int = 24) -> Cell:
    """The exemplars of a failure counter as a table: newest first, trace ids linked."""
    t = target(expr, "{{rubric}}")
    t["exemplar"] = True
    options = {
        "showHeader": True,
        "cellHeight": "sm",
        "footer": {"show": False, "reducer": ["sum"], "fields": ""},
        "sortBy": [{"displayName": "Time", "desc": True}],
    }
    keep = ["Time", "rubric", "trace_id", "span_id"]
    cell = panel(
        "table",
        title,
        description,
        [t],
        field_defaults("short", GREEN, "palette-classic"),
        options,
        w,
        8,
        transformations=[
            # The exemplar frame is the one with trace ids; the series frame drops out.
            {"id": "filterFieldsByName", "options": {"include": {"names": keep}}},
            {"id": "merge", "options": {}},
            {"id": "sortBy", "options": {"sort": [{"field": "Time", "desc": True}]}},
        ],
    )
    cell.panel["fieldConfig"]["overrides"].append(
        {
            "matcher": {"id": "byName", "options": "trace_id"},
            "properties": [{"id": "links", "value": trace_links()}],
        }
    )
    return cell


def row(title: str) -> Cell:
    return Cell({"type": "row", "title": title, "collapsed": False, "panels": []}, 24, 1)


def layout(cells: list[Cell]) -> list[Panel]:
    """Give panels ids and grid positions: left to right, wrapping at 24 columns."""
    x = y = row_h = 0
    out: list[Panel] = []
    for pid, cell in enumerate(cells, start=1):
        is_row = cell.panel["type"] == "row"
        if is_row or x + cell.w > 24:
            x, y, row_h = 0, y + row_h, 0
        grid = {"h": cell.h, "w": cell.w, "x": x, "y": y}
        out.append({"id": pid, "gridPos": grid, **cell.panel})
        x, row_h = x + cell.w, max(row_h, cell.h)
        if is_row:
            x, y, row_h = 0, y + cell.h, 0
    return out


# ---------------------------------------------------------------- dashboards


def datasource_var() -> dict[str, Any]:
    return {
        "type": "datasource",
        "name": "datasource",
        "label": "Data source",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "refresh": 1,
        "regex": "",
        "options": [],
    }


def query_var(name: str, label: str, query: str) -> dict[str, Any]:
    """A multi-value variable from a ``label_values`` query, "All" meaning ``.*``."""
    return {
        "type": "query",
        "name": name,
        "label": label,
        "datasource": DS,
        "definition": query,
        "query": {
            "qryType": 1,
            "query": query,
            "refId": "PrometheusVariableQueryEditor-VariableQuery",
        },
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "options": [],
        "regex": "",
        "sort": 1,
        "hide": 0,
    }


RUBRIC_VAR = query_var("rubric", "Rubric", "label_values(sidecar_rubric_info, rubric)")
AGENT_VAR = query_var(
    "agent", "Agent", 'label_values(sidecar_cases_total{rubric=~"$rubric"}, agent)'
)
JUDGE_VAR = query_var(
    "judge_model",
    "Judge model",
    'label_values(sidecar_rubric_info{rubric=~"$rubric"}, judge_model)',
)


def trace_backend_var() -> dict[str, Any]:
    """Where trace links go: the uid of the Tempo or Jaeger data source (tempo, jaeger)."""
    options = [
        {"selected": name == "jaeger", "text": name, "value": name} for name in ("tempo", "jaeger")
    ]
    return {
        "type": "custom",
        "name": "trace_backend",
        "label": "Trace backend",
        "description": "Data source uid of the trace backend the exemplar links open (tempo or jaeger).",
        "query": "tempo,jaeger",
        "current": {"selected": True, "text": "jaeger", "value": "jaeger"},
        "options": options,
        "includeAll": False,
        "multi": False,
        "hide": 0,
    }


TRACE_BACKEND_VAR = trace_backend_var()


def annotation(name: str, color: str, expr: str, title: str, tags: str) -> dict[str, Any]:
    return {
        "name": name,
        "datasource": DS,
        "enable": True,
        "hide": False,
        "iconColor": color,
        "expr": expr,
        "step": "1m",
        "titleFormat": title,
        "tagKeys": tags,
        "textFormat": "",
        "useValueForTime": False,
    }


BUILTIN_ANNOTATION = {
    "builtIn": 1,
    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
    "enable": True,
    "hide": True,
    "iconColor": "rgba(0, 211, 255, 1)",
    "name": "Annotations & Alerts",
    "type": "dashboard",
}

RUBRIC_CHANGE, JUDGE_MODEL_VERSION, AGENT_VERSION, SIDECAR_DEPLOYED = (
    annotation(
        "Rubric or judge model change",
        "orange",
        first_seen("sidecar_rubric_info", RUBRIC, ["rubric", "rubric_version", "judge_model"]),
        "Rubric {{rubric}} v{{rubric_version}} judged by {{judge_model}}",
        "rubric,rubric_version,judge_model",
    ),
    # The alias stays, the model behind it moves: what the model service says served it.
    annotation(
        "Judge model version change",
        "red",
        first_seen(
            "sidecar_judge_model_version_info", JUDGE, ["judge_model", "judge_model_version"]
        ),
        "Judge {{judge_model}} served by {{judge_model_version}}",
        "judge_model,judge_model_version",
    ),
    annotation(
        "Agent version first seen",
        "purple",
        first_seen("sidecar_cases_total", 'agent=~"$agent"', ["agent", "agent_version"]),
        "Agent {{agent}} {{agent_version}}",
        "agent,agent_version",
    ),
    annotation(
        "sidecar deployed",
        "blue",
        first_seen("sidecar_build_info", "", ["version"]),
        "sidecar {{version}}",
        "version",
    ),
)


def dashboard(
    uid: str,
    title: str,
    description: str,
    variables: list[dict[str, Any]],
    cells: list[Cell],
    annotations: list[dict[str, Any]],
) -> Board:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["sidecar"],
        "editable": False,
        "graphTooltip": 1,
        "timezone": "browser",
        "time": {"from": "now-24h", "to": "now"},
        "refresh": "1m",
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "weekStart": "",
        "links": [
            {
                "type": "dashboards",
                "title": "sidecar",
                "tags": ["sidecar"],
                "asDropdown": False,
                "includeVars": True,
                "keepTime": True,
                "icon": "external link",
                "targetBlank": False,
                "tooltip": "",
                "url": "",
            }
        ],
        "annotations": {"list": [BUILTIN_ANNOTATION, *annotations]},
        "templating": {"list": [datasource_var(), *variables]},
        "panels": layout(cells),
    }


# Pass-rate and failure panels of the quality dashboard: exemplars on, trace ids linked.
EXEMPLAR_PANELS = frozenset(
    {
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
    }
)


def quality() -> Board:
    version_split = ["rubric", "rubric_version", "judge_model"]
    criterion_split = ["rubric", "criterion", "rubric_version", "judge_model"]
    panels: list[Cell] = [
        row("Outcomes"),
        stat(
            "Acceptable share",
            "Acceptable / (acceptable + unacceptable) cases over the selected range. Errored cases are left out; see the next panel.",
            (case_share("acceptable", ["rubric"], "increase", RANGE), "{{rubric}}"),
            unit="percentunit",
            steps=GOOD_HIGH,
            w=8,
        ),
        stat(
            "Errored share",
            "Cases whose outcome could not be decided (a gating check or criterion ended in ERROR), over the selected range.",
            (case_share("errored", ["rubric"], "increase", RANGE), "{{rubric}}"),
            unit="percentunit",
            steps=ERROR_LOW,
            w=8,
        ),
        stat(
            "Cases evaluated",
            "(trace, rubric) cases evaluated over the selected range.",
            (
                in_range("sidecar_cases_total", CASES, by=["rubric"]),
                "{{rubric}}",
            ),
            unit="short",
            w=8,
        ),
        timeseries(
            "Cases per minute by outcome",
            "Evaluated cases per minute, stacked by outcome, per rubric.",
            (
                per_minute("sidecar_cases_total", CASES, by=["rubric", "outcome"]),
                "{{rubric}} {{outcome}}",
            ),
            unit="cpm",
            stack=True,
        ),
        timeseries(
            "Outcome shares",
            "Share of each outcome among all cases of a rubric (errored included here, so the three add up to 100%).",
            (
                f"{rate('sidecar_cases_total', CASES, by=['rubric', 'outcome'])}"
                f" / on (rubric) group_left {rate('sidecar_cases_total', CASES, by=['rubric'])}",
                "{{rubric}} {{outcome}}",
            ),
            unit="percentunit",
            hi=1,
        ),
        timeseries(
            "Acceptable share by scope",
            "Acceptable / (acceptable + unacceptable) per rubric and scope: trace (one run) or conversation (all turns of a session). A conversation can fail where each of its turns passes, and the other way round.",
            (case_share("acceptable", ["rubric", "scope"]), "{{rubric}} {{scope}}"),
            unit="percentunit",
            hi=1,
            steps=GOOD_HIGH,
        ),
        timeseries(
            "Cases per minute by scope",
            "Evaluated cases per minute, trace verdicts and conversation verdicts apart.",
            (per_minute("sidecar_cases_total", CASES, by=["scope"]), "{{scope}}"),
            unit="cpm",
            stack=True,
        ),
        row("Drift: agent versions beside rubric versions and judge models"),
        timeseries(
            "Acceptable share by agent version",
            "Agent drift: one line per agent version. Compare with the panel on the right: a step there (rubric or judge change) explains a step here that no agent release does.",
            (case_share("acceptable", ["agent", "agent_version"]), "{{agent}} {{agent_version}}"),
            unit="percentunit",
            hi=1,
            steps=GOOD_HIGH,
        ),
        timeseries(
            "Judge canary: agreement with people on a fixed set",
            "Judge drift without new labels: the last run of each rubric's canary set (labelled traces re-judged on a schedule), kappa (solid) and raw agreement against the human labels, per criterion and the model version that served the run. It moves only when the judge or the rubric does; compare with the agent line on the left. Red under 0.4: the SidecarCanaryKappaLow alert's default threshold.",
            (
                canary("kappa"),
                "kappa {{rubric}}/{{criterion}} {{judge_model}} @ {{judge_model_version}}",
            ),
            (
                canary("agreement"),
                "agreement {{rubric}}/{{criterion}} {{judge_model}} @ {{judge_model_version}}",
            ),
            unit="short",
            lo=-1,
            hi=1,
            steps=KAPPA,
        ),
        timeseries(
            "Cases per minute by agent version",
            "Traffic per agent version: shows when a release rolled out and how much weight each line on the left carries.",
            (
                per_minute("sidecar_cases_total", CASES, by=["agent", "agent_version"]),
                "{{agent}} {{agent_version}}",
            ),
            unit="cpm",
            stack=True,
        ),
        timeseries(
            "Judge canary: error and flip rates",
            "Last canary run: share of ERROR verdicts (alert over 3%) and share of cases whose PASS/FAIL changed since the same case was last judged (alert over 10%). The traces are fixed, so flips are the judge's.",
            (
                canary("error_rate"),
                "errors {{rubric}}/{{criterion}} {{judge_model}} @ {{judge_model_version}}",
            ),
            (
                canary("flip_rate"),
                "flips {{rubric}}/{{criterion}} {{judge_model}} @ {{judge_model_version}}",
            ),
            unit="percentunit",
            hi=1,
            steps=ERROR_ALERT,
        ),
        timeseries(
            "Drift: evidence, decision and canary agreement",
            "Who drifted, the agent or the judge. Evidence (log10 of the e-value) per gated check or criterion: stream agent is the pass rate falling from its baseline, stream judge is the judge's disagreement with the human labels on the canary cases rising; an alarm is raised where a line crosses the alarm level (log10 of 2/alpha), and the evidence stays valid however often it is looked at. Decision: 1 on the cause of the latest alarm (agent, judge or none), held for the guard window; alerts SidecarAgentDrift and SidecarJudgeDrift fire on it. Canary kappa beside it: a judge decision comes with the canary agreement falling.",
            (
                f"max by (rubric, criterion, stream) (log10({sel('sidecar_drift_evalue', RUBRIC)}))",
                "evidence {{stream}} {{rubric}}/{{criterion}}",
            ),
            ("log10(max(sidecar_drift_evalue_threshold))", "alarm level"),
            (
                f"max by (rubric, criterion, cause) ({sel('sidecar_drift_attribution', RUBRIC)}) == 1",
                "decision {{cause}} {{rubric}}/{{criterion}}",
            ),
            (
                canary("kappa"),
                "canary kappa {{rubric}}/{{criterion}} {{judge_model}} @ {{judge_model_version}}",
            ),
            unit="short",
            lo=None,
        ),
        stat(
            "Drift alarms by cause",
            "Drift alarms raised over the selected range, by attribution: agent (page the agent's owners), judge (the grader moved: check the judge model version and the rubric) or none.",
            (
                f"sum by (attribution) (increase({sel('sidecar_drift_alarms_total', RUBRIC)}[{RANGE}]))",
                "{{attribution}}",
            ),
            unit="short",
            w=12,
        ),
        timeseries(
            "Acceptable share by rubric version and judge model",
            "Judge drift: one line per (rubric version, judge model). A new line starting with a different level means the measuring stick changed, not the agent.",
            (
                case_share("acceptable", version_split),
                "{{rubric}} v{{rubric_version}} {{judge_model}}",
            ),
            unit="percentunit",
            hi=1,
            steps=GOOD_HIGH,
        ),
        timeseries(
            "Errored share by rubric version and judge model",
            "Cases that ended in ERROR, per rubric version and judge model. A rise after a judge change points at the judge, not the agent.",
            (
                case_share("errored", version_split),
                "{{rubric}} v{{rubric_version}} {{judge_model}}",
            ),
            unit="percentunit",
            steps=ERROR_LOW,
        ),
        row("Criteria (LLM judge)"),
        timeseries(
            "Criterion pass rate by rubric version and judge model",
            "PASS / (PASS + FAIL) per criterion. ERROR and SKIPPED (not sampled) never count.",
            (
                pass_share("sidecar_criterion_verdicts_total", CRITERIA, criterion_split),
                "{{rubric}}/{{criterion}} v{{rubric_version}} {{judge_model}}",
            ),
            unit="percentunit",
            hi=1,
        ),
        timeseries(
            "Criterion ERROR rate",
            "ERROR / (PASS + FAIL + ERROR) per criterion and judge model. The dashed line is the 3% alert threshold.",
            (
                error_share(
                    "sidecar_criterion_verdicts_total",
                    CRITERIA,
                    ["rubric", "criterion", "judge_model"],
                ),
                "{{rubric}}/{{criterion}} {{judge_model}}",
            ),
            unit="percentunit",
            steps=ERROR_ALERT,
        ),
        bargauge(
            "Criterion pass rate over the range",
            "PASS / (PASS + FAIL) per criterion over the selected range.",
            (
                pass_share(
                    "sidecar_criterion_verdicts_total",
                    CRITERIA,
                    ["rubric", "criterion"],
                    "increase",
                    RANGE,
                ),
                "{{rubric}}/{{criterion}}",
            ),
            unit="percentunit",
            steps=GOOD_HIGH,
        ),
        timeseries(
            "Hourly pass rate against the 7-day baseline",
            "The SidecarPassRateDrop alert's inputs (recording rules): hourly pass rate per criterion and its volume-weighted 7-day baseline.",
            (
                f"rubric_criterion:sidecar_criterion_pass_ratio:rate1h{{{RUBRIC}}}",
                "{{rubric}}/{{criterion}} last hour",
            ),
            (
                f"rubric_criterion:sidecar_criterion_pass_ratio:baseline7d{{{RUBRIC}}}",
                "{{rubric}}/{{criterion}} 7-day baseline",
            ),
            unit="percentunit",
            hi=1,
        ),
        row("Deterministic checks"),
        timeseries(
            "Check pass rate by rubric version",
            "PASS / (PASS + FAIL) per check. Checks run on every matching trace, so this moves with the agent, never with the judge.",
            (
                pass_share(
                    "sidecar_check_results_total", RUBRIC, ["rubric", "check", "rubric_version"]
                ),
                "{{rubric}}/{{check}} v{{rubric_version}}",
            ),
            unit="percentunit",
            hi=1,
        ),
        timeseries(
            "Check ERROR rate",
            "Checks that could not decide from the evidence (e.g. content capture off), as a share of all check results.",
            (
                error_share("sidecar_check_results_total", RUBRIC, ["rubric", "check"]),
                "{{rubric}}/{{check}}",
            ),
            unit="percentunit",
        ),
        bargauge(
            "Check pass rate over the range",
            "PASS / (PASS + FAIL) per check over the selected range.",
            (
                pass_share(
                    "sidecar_check_results_total",
                    RUBRIC,
                    ["rubric", "check"],
                    "increase",
                    RANGE,
                ),
                "{{rubric}}/{{check}}",
            ),
            unit="percentunit",
            steps=GOOD_HIGH,
            w=24,
        ),
        row("Versions"),
        table(
            "Loaded rubrics and judge models",
            "What the running replicas evaluate with right now.",
            f"max by (rubric, rubric_version, judge_model) ({sel('sidecar_rubric_info', RUBRIC, JUDGE)})",
            "Loaded",
        ),
        table(
            "Agent versions in the range",
            "Cases per agent version over the selected range.",
            in_range("sidecar_cases_total", CASES, by=["agent", "agent_version"]),
            "Cases",
        ),
    ]
    panels = [with_exemplars(c) if c.panel["title"] in EXEMPLAR_PANELS else c for c in panels]
    failing = recent_failing_traces(
        "Recent failing traces",
        "The latest unacceptable case of each series, as the exemplars of sidecar_cases_total carry it: when, which rubric, the trace id and the verdict span id. Click a trace id to open the trace in the backend the trace_backend variable names (Tempo by TraceQL, Jaeger by trace id), or the failing verdict spans by tag search in Jaeger.",
        sum_increase_unacceptable(),
    )
    outcomes_end = next(
        i for i, c in enumerate(panels) if c.panel["title"] == "Cases per minute by scope"
    )
    panels.insert(outcomes_end + 1, failing)
    return dashboard(
        "sidecar-quality",
        "sidecar / Quality",
        "Verdict outcomes, criterion and check pass rates, with agent drift beside judge drift; exemplars link failing verdicts to their traces.",
        [RUBRIC_VAR, AGENT_VAR, JUDGE_VAR, TRACE_BACKEND_VAR],
        panels,
        [RUBRIC_CHANGE, JUDGE_MODEL_VERSION, AGENT_VERSION, SIDECAR_DEPLOYED],
    )


def judge_health() -> Board:
    def latency(q: float) -> str:
        return quantile(
            q, "sidecar_judge_request_duration_seconds_bucket", JUDGE, by=["judge_model"]
        )

    cost_range = in_range("sidecar_judge_cost_usd_total", JUDGE, by=["judge_model"])
    requests_range = in_range(
        "sidecar_judge_request_duration_seconds_count", JUDGE, by=["judge_model"]
    )
    panels: list[Cell] = [
        row("Errors and availability"),
        stat(
            "Criterion ERROR share",
            "ERROR / (PASS + FAIL + ERROR) of criterion verdicts over the selected range. Above 3% the pass rates are not trustworthy.",
            (
                error_share(
                    "sidecar_criterion_verdicts_total",
                    CRITERIA,
                    ["judge_model"],
                    "increase",
                    RANGE,
                ),
                "{{judge_model}}",
            ),
            unit="percentunit",
            steps=ERROR_LOW,
            w=8,
        ),
        stat(
            "Judge cost in the range",
            "US dollars spent on judge calls over the selected range, from the configured price table.",
            (cost_range, "{{judge_model}}"),
            unit="currencyUSD",
            w=8,
        ),
        stat(
            "Cost per judge request",
            "Average cost of one judge request over the selected range.",
            (f"{cost_range} / {requests_range}", "{{judge_model}}"),
            unit="currencyUSD",
            w=8,
        ),
        timeseries(
            "Criterion ERROR share by judge model",
            "ERROR / (PASS + FAIL + ERROR) per judge model. Dashed line: the 3% alert threshold.",
            (
                error_share("sidecar_criterion_verdicts_total", CRITERIA, ["judge_model"]),
                "{{judge_model}}",
            ),
            unit="percentunit",
            steps=ERROR_ALERT,
        ),
        timeseries(
            "Judge errors per minute by reason",
            "Failed judge calls by reason (timeout, blocked, unparsable output, transport, ...).",
            (
                per_minute("sidecar_judge_errors_total", JUDGE, by=["judge_model", "reason"]),
                "{{judge_model}} {{reason}}",
            ),
            unit="cpm",
            stack=True,
        ),
        breaker_timeline(
            "Circuit breaker",
            "Open means sidecar stopped calling this judge model after repeated failures.",
            (
                f"max by (judge_model) ({sel('sidecar_judge_breaker_open', JUDGE)})",
                "{{judge_model}}",
            ),
        ),
        timeseries(
            "Judge queue depth",
            "Cases waiting for the judge, per replica. When the queue is full the replica pauses its partitions (back-pressure) and consumer lag grows.",
            ("sum by (instance) (sidecar_judge_queue_depth)", "{{instance}}"),
            unit="short",
        ),
        row("Latency and volume"),
        timeseries(
            "Judge request latency",
            "p50, p95 and p99 of one judge HTTP request, per model.",
            (latency(0.5), "p50 {{judge_model}}"),
            (latency(0.95), "p95 {{judge_model}}"),
            (latency(0.99), "p99 {{judge_model}}"),
            unit="s",
        ),
        timeseries(
            "Judge requests per minute",
            "Judge HTTP requests per minute, per model.",
            (
                per_minute(
                    "sidecar_judge_request_duration_seconds_count", JUDGE, by=["judge_model"]
                ),
                "{{judge_model}}",
            ),
            unit="cpm",
        ),
        timeseries(
            "Tokens per minute",
            "Judge tokens per minute by model and kind (input, output): compare with your tokens-per-minute quota.",
            (
                per_minute("sidecar_judge_tokens_total", JUDGE, by=["judge_model", "kind"]),
                "{{judge_model}} {{kind}}",
            ),
            unit="short",
            stack=True,
        ),
        timeseries(
            "Judge cost per hour",
            "US dollars per hour at the current rate, per model.",
            (
                f"{rate('sidecar_judge_cost_usd_total', JUDGE, by=['judge_model'])} * 3600",
                "{{judge_model}}",
            ),
            unit="currencyUSD",
        ),
        timeseries(
            "Verdict cache hit ratio",
            "Judge verdicts served from the cache (same rubric version, judge model and data) instead of a new call.",
            (
                share("sidecar_verdict_cache_requests_total", "", "result", "hit", "hit|miss"),
                "hit ratio",
            ),
            unit="percentunit",
            hi=1,
        ),
        row("Model versions behind the judge models"),
        timeseries(
            "Criterion pass rate by judge model version",
            "PASS / (PASS + FAIL) per criterion and the model version that served the verdicts (what the model service reports, e.g. Gemini's modelVersion). A new line at a different level with no rubric change: the model behind the alias moved.",
            (
                pass_share(
                    "sidecar_criterion_verdicts_total",
                    CRITERIA,
                    ["rubric", "criterion", "judge_model", "judge_model_version"],
                ),
                "{{rubric}}/{{criterion}} {{judge_model}} @ {{judge_model_version}}",
            ),
            unit="percentunit",
            hi=1,
        ),
        table(
            "Model versions serving now",
            "The model version that last answered for each judge model, per replica (unknown: the service did not say).",
            f"max by (judge_model, judge_model_version) ({sel('sidecar_judge_model_version_info', JUDGE)})",
            "Serving",
        ),
        row("Injection screening and human review"),
        timeseries(
            "Injection-suspected share of cases",
            "Cases whose data looked like an attempt to instruct the grader, as a share of all cases of the rubric.",
            (
                f"({rate('sidecar_injection_suspected_total', RUBRIC, by=['rubric'])}"
                f" or 0 * {rate('sidecar_cases_total', RUBRIC, by=['rubric'])})"
                f" / {rate('sidecar_cases_total', RUBRIC, by=['rubric'])}",
                "{{rubric}}",
            ),
            unit="percentunit",
        ),
        timeseries(
            "Review cases per minute by reason",
            "Cases routed to human review, by reason.",
            (
                per_minute("sidecar_review_cases_total", RUBRIC, by=["rubric", "reason"]),
                "{{rubric}} {{reason}}",
            ),
            unit="cpm",
            stack=True,
        ),
        row("Judge against people"),
        timeseries(
            "Judge-human agreement (Cohen's kappa)",
            "Chance-corrected agreement between the judge and human labels per criterion. Below 0.4 (red) the criterion should not gate anything.",
            (
                human_agreement("kappa"),
                "{{rubric}}/{{criterion}} v{{rubric_version}} {{judge_model}}",
            ),
            unit="short",
            lo=-1,
            hi=1,
            steps=KAPPA,
        ),
        timeseries(
            "Judge-human raw agreement",
            "Share of human-labelled cases where the judge gave the same verdict (not corrected for chance).",
            (
                human_agreement("agreement"),
                "{{rubric}}/{{criterion}} v{{rubric_version}} {{judge_model}}",
            ),
            unit="percentunit",
            hi=1,
        ),
        bargauge(
            "Human labels in the range",
            "Human labels received per criterion over the selected range; kappa on a handful of labels means little.",
            (
                in_range("sidecar_human_labels_total", RUBRIC, by=["rubric", "criterion"]),
                "{{rubric}}/{{criterion}}",
            ),
            unit="short",
            steps=[("orange", None), ("green", 30)],
            hi=None,
            w=24,
        ),
        row("Shadow judge (a model under test beside the rubric's judge)"),
        timeseries(
            "Shadow judge agreement (Cohen's kappa)",
            "judge.shadow re-judges a share of the judged cases with another model and never changes a verdict. Kappa between the rubric's judge and the shadow model per criterion, over the latest judge.shadow.window compared cases: what switching models would do to the numbers.",
            (
                f"max by (rubric, criterion, judge_model, shadow_model) ({sel('sidecar_shadow_kappa', RUBRIC)})",
                "{{rubric}}/{{criterion}} {{judge_model}} vs {{shadow_model}}",
            ),
            unit="short",
            lo=-1,
            hi=1,
            steps=KAPPA,
        ),
        timeseries(
            "Shadow judge disagreement and its evidence",
            "Share of compared cases where the two models differ, beside the detector's e-value; the alarm (SidecarShadowJudgeDisagrees) is at 2/alpha.",
            (
                f"max by (rubric, criterion, shadow_model) ({sel('sidecar_shadow_disagreement', RUBRIC)})",
                "disagreement {{rubric}}/{{criterion}} {{shadow_model}}",
            ),
            (
                f"max by (rubric, criterion, shadow_model) ({sel('sidecar_shadow_disagreement_evalue', RUBRIC)})",
                "e-value {{rubric}}/{{criterion}} {{shadow_model}}",
            ),
            unit="short",
        ),
    ]
    return dashboard(
        "sidecar-judge-health",
        "sidecar / Judge health",
        "Is the judge trustworthy right now: errors, breaker, latency, tokens and cost, cache, injection screening, agreement with people.",
        [RUBRIC_VAR, JUDGE_VAR],
        panels,
        [RUBRIC_CHANGE, JUDGE_MODEL_VERSION],
    )


def pipeline() -> Board:
    lag = "max by (partition) (sidecar_consumer_lag)"
    decisions = "sidecar_trace_decisions_total"
    panels: list[Cell] = [
        row("Health"),
        stat(
            "Replicas up",
            'Scrape targets with job="sidecar" that answered the last scrape.',
            ('sum(up{job="sidecar"})', "up"),
            unit="short",
            steps=[("red", None), ("green", 1)],
        ),
        stat(
            "Consumer lag",
            "Records behind the end of otlp_spans, all partitions together.",
            (f"sum({lag})", "lag"),
            unit="short",
            steps=[("green", None), ("orange", 1000), ("red", 10000)],
        ),
        stat(
            "Open traces",
            "Traces being assembled, all replicas together.",
            ("sum(sidecar_open_traces)", "open"),
            unit="short",
        ),
        stat(
            "Dead-lettered in the range",
            "Records sent to the dead-letter topic over the selected range.",
            (f"sum(increase(sidecar_dead_letters_total[{RANGE}]))", "dead letters"),
            unit="short",
            steps=[("green", None), ("orange", 1)],
        ),
        row("Why traces were (not) evaluated"),
        bargauge(
            "Trace decisions in the range (funnel)",
            "Every trace read ends on exactly one path, so the bars add up to the traces read: evaluated (the judge answered), judge_failed, breaker_open, internal_error, fragment, not_captured, over_budget, sampled_out, judge_off, checks_only, conversation, no_rubric, evicted, revoked; dead_lettered counts input records that could not be read.",
            (f"sort_desc({agg(['decision'])} (increase({decisions}[{RANGE}])))", "{{decision}}"),
            unit="short",
            steps=[("blue", None)],
            hi=None,
        ),
        timeseries(
            "Trace decisions per minute",
            "The same decisions over time, stacked: a rise of sampled_out, over_budget or breaker_open explains a drop in evaluated traces.",
            (per_minute(decisions, by=["decision"]), "{{decision}}"),
            unit="cpm",
            stack=True,
        ),
        row("Throughput"),
        timeseries(
            "Kafka records per second",
            "Records consumed from otlp_spans, by result (ok or dead_letter).",
            (rate("sidecar_kafka_records_total", by=["result"]), "{{result}}"),
            unit="cps",
            stack=True,
        ),
        timeseries(
            "Spans per second",
            "Spans decoded from the records.",
            (rate("sidecar_spans_total"), "spans"),
            unit="cps",
        ),
        timeseries(
            "Traces decided per second by reason",
            "complete: root ended and decision_wait passed; max_age: root never ended in time; evicted/span_limit: a bound forced an early decision; shutdown/flush: decided while stopping.",
            (rate("sidecar_traces_decided_total", by=["reason"]), "{{reason}}"),
            unit="cps",
            stack=True,
        ),
        timeseries(
            "Open traces per replica",
            "Traces in the assembler, per replica. Flat at assembler.max_open_traces means evictions.",
            ("sum by (instance) (sidecar_open_traces)", "{{instance}}"),
            unit="short",
        ),
        row("Loss and bounds"),
        timeseries(
            "Evictions per minute by bound",
            "Traces decided early because a bound was hit (open_traces or spans_per_trace). Their verdicts are flagged truncated.",
            (per_minute("sidecar_evictions_total", by=["kind"]), "{{kind}}"),
            unit="cpm",
            stack=True,
        ),
        timeseries(
            "Late spans and orphan traces per minute",
            "Late: spans for a trace already decided (ignored). Orphan: traces decided without their root span (check partition_traces_by_id).",
            (per_minute("sidecar_late_spans_total"), "late spans"),
            (per_minute("sidecar_orphan_traces_total"), "orphan traces"),
            unit="cpm",
        ),
        timeseries(
            "Dead-lettered records per minute by reason",
            "Records that could not be decoded, sent to the dead-letter topic with the reason in a header.",
            (per_minute("sidecar_dead_letters_total", by=["reason"]), "{{reason}}"),
            unit="cpm",
            stack=True,
        ),
        timeseries(
            "Duplicate verdicts per minute",
            "Verdicts emitted again for an idempotency key seen before: redelivery after a crash or rebalance (at-least-once).",
            (per_minute("sidecar_duplicate_verdicts_total"), "duplicates"),
            unit="cpm",
        ),
        row("Conversations"),
        timeseries(
            "Open conversations per replica, share of the bound",
            "Open conversations / max_open_conversations per replica. At 1 the least recently active conversation is decided early (flagged decided_early); the SidecarOpenConversationsNearBound alert fires above 0.9.",
            (
                "max by (instance) (sidecar_open_conversations / sidecar_open_conversations_limit)",
                "{{instance}}",
            ),
            unit="percentunit",
            hi=1,
            steps=[("transparent", None), ("orange", 0.9)],
        ),
        timeseries(
            "Turns per conversation",
            "Median and 90th percentile of the turns of decided conversations.",
            (quantile(0.5, "sidecar_conversation_length_turns_bucket"), "p50"),
            (quantile(0.9, "sidecar_conversation_length_turns_bucket"), "p90"),
            unit="short",
        ),
        timeseries(
            "Conversations decided per minute by reason",
            "idle: idle_timeout_s passed after the last turn; turn_limit: max_turns reached; max_age: max_age_s passed; evicted: the open-conversation bound forced an early decision.",
            (per_minute("sidecar_conversations_decided_total", by=["reason"]), "{{reason}}"),
            unit="cpm",
            stack=True,
        ),
        timeseries(
            "Re-opened and forgotten conversations per minute",
            "Re-opened: a late turn arrived for a decided conversation; its next verdict is revision n+1. Forgotten: decided conversations dropped from memory (decided_memory).",
            (per_minute("sidecar_conversations_reopened_total"), "re-opened"),
            (per_minute("sidecar_conversations_forgotten_total"), "forgotten"),
            unit="cpm",
        ),
        timeseries(
            "Turn records per minute by result",
            "published / no_key: the trace stage (no_key: a conversation rubric applies but the trace has no conversation id); accepted / duplicate / malformed / unknown_rubric: the conversation stage.",
            (per_minute("sidecar_conversation_turns_total", by=["result"]), "{{result}}"),
            unit="cpm",
            stack=True,
        ),
        timeseries(
            "Conversation verdict time after the decision",
            "From deciding a conversation to its verdict emitted (checks, judge, delivery); the idle timeout is not in it.",
            (quantile(0.9, "sidecar_conversation_verdict_seconds_bucket"), "p90"),
            unit="s",
        ),
        row("Kafka and sampling"),
        timeseries(
            "Consumer lag per partition",
            "Records behind the end of each otlp_spans partition. Dashed line: the 1000-record level of the lag alert.",
            (lag, "partition {{partition}}"),
            unit="short",
            steps=[("transparent", None), ("orange", 1000)],
        ),
        timeseries(
            "Sampling decisions per minute by reason",
            "Why each matching trace was or was not sent to the judge (ratio, always-judge rules, budget).",
            (
                per_minute(
                    "sidecar_sampling_decisions_total",
                    RUBRIC,
                    by=["rubric", "decision", "reason"],
                ),
                "{{rubric}} {{decision}} {{reason}}",
            ),
            unit="cpm",
            stack=True,
        ),
        timeseries(
            "Judged share per rubric",
            "Share of matching traces sent to the judge; compare with the rubric's judge_ratio.",
            (
                share(
                    "sidecar_sampling_decisions_total",
                    RUBRIC,
                    "decision",
                    "judge",
                    "judge|skip",
                    ["rubric"],
                ),
                "{{rubric}}",
            ),
            unit="percentunit",
            hi=1,
        ),
        table(
            "sidecar versions running",
            "Replicas per sidecar version.",
            "count by (version) (sidecar_build_info)",
            "Replicas",
        ),
    ]
    return dashboard(
        "sidecar-pipeline",
        "sidecar / Pipeline",
        "Kafka in, trace assembly, bounds and losses, sampling.",
        [RUBRIC_VAR],
        panels,
        [SIDECAR_DEPLOYED],
    )


DASHBOARDS = {"quality.json": quality, "judge-health.json": judge_health, "pipeline.json": pipeline}


def render(build: Callable[[], Board]) -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="fail if a JSON file differs from the generated one"
    )
    args = parser.parse_args(argv)
    stale = []
    for name, build in DASHBOARDS.items():
        path = HERE / name
        text = render(build)
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print(
            f"out of date (run python dashboards/generate.py): {', '.join(stale)}", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
