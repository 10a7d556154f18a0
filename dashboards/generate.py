"""Generate the sidecar Grafana dashboards (quality, judge health, pipeline).

The JSON files beside this script are its output and are what Grafana loads;
edit this script, then run it:

    python dashboards/generate.py           # rewrite the JSON files
    python dashboards/generate.py --check   # exit 1 if a file is out of date

Conventions every panel follows (tests/test_dashboards.py enforces them):
- the data source is the ``${datasource}`` variable;
- every query is a PromQL ``expr`` in ``targets``, built only from sidecar's
  metric names, ``up`` and the recording rules in deploy/prometheus/rules;
- shares never count ERROR or SKIPPED in a pass-rate denominator, and an absent
  numerator series (no PASS yet) reads as 0 where the denominator exists.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCHEMA_VERSION = 39
DS = {"type": "prometheus", "uid": "${datasource}"}
RATE = "$__rate_interval"
RANGE = "$__range"

Panel = dict[str, Any]

# Label filters per metric family; each uses only labels that family has.
CASES = 'rubric=~"$rubric", agent=~"$agent", judge_model=~"$judge_model"'
CRITERIA = 'rubric=~"$rubric", judge_model=~"$judge_model"'
RUBRIC = 'rubric=~"$rubric"'
JUDGE = 'judge_model=~"$judge_model"'

GOOD_HIGH = [("red", None), ("orange", 0.8), ("green", 0.95)]
ERROR_LOW = [("green", None), ("orange", 0.01), ("red", 0.03)]
KAPPA = [("red", None), ("orange", 0.4), ("green", 0.6)]


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


def first_seen(metric: str, matchers: str, by: Iterable[str]) -> str:
    """Label sets present now but not 10 minutes ago: a new version appeared."""
    by_clause = f"max by ({', '.join(by)})"
    return f"{by_clause} ({sel(metric, matchers)}) unless {by_clause} ({sel(metric, matchers)} offset 10m)"


# ---------------------------------------------------------------- panels


def target(
    expr: str, legend: str = "", ref: str = "A", instant: bool = False, table: bool = False
) -> dict[str, Any]:
    t: dict[str, Any] = {
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


def targets(*pairs: tuple[str, str], instant: bool = False) -> list[dict[str, Any]]:
    return [target(e, legend, chr(ord("A") + i), instant) for i, (e, legend) in enumerate(pairs)]


def thresholds(steps: list[tuple[str, float | None]]) -> dict[str, Any]:
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for c, v in steps]}


def defaults(
    unit: str, lo: float | None, hi: float | None, steps: list[tuple[str, float | None]] | None
) -> dict[str, Any]:
    d: dict[str, Any] = {
        "unit": unit,
        "color": {"mode": "palette-classic" if steps is None else "thresholds"},
    }
    if lo is not None:
        d["min"] = lo
    if hi is not None:
        d["max"] = hi
    d["thresholds"] = thresholds(steps or [("green", None)])
    return d


def timeseries(
    title: str,
    description: str,
    tgts: list[dict[str, Any]],
    unit: str = "short",
    lo: float | None = 0,
    hi: float | None = None,
    steps: list[tuple[str, float | None]] | None = None,
    stack: bool = False,
    w: int = 12,
    h: int = 8,
) -> Panel:
    d = defaults(unit, lo, hi, None)
    if steps is not None:
        d["thresholds"] = thresholds(steps)
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
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DS,
        "fieldConfig": {"defaults": d, "overrides": []},
        "options": {
            "legend": {
                "displayMode": "table",
                "placement": "right",
                "showLegend": True,
                "calcs": ["lastNotNull", "mean"],
            },
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": tgts,
        "_size": (w, h),
    }


def stat(
    title: str,
    description: str,
    tgts: list[dict[str, Any]],
    unit: str = "short",
    steps: list[tuple[str, float | None]] | None = None,
    w: int = 6,
    h: int = 5,
) -> Panel:
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DS,
        "fieldConfig": {
            "defaults": defaults(unit, None, None, steps or [("blue", None)]),
            "overrides": [],
        },
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "none",
            "justifyMode": "auto",
            "orientation": "auto",
            "textMode": "auto",
            "wideLayout": True,
        },
        "targets": tgts,
        "_size": (w, h),
    }


def bargauge(
    title: str,
    description: str,
    tgts: list[dict[str, Any]],
    unit: str,
    steps: list[tuple[str, float | None]],
    lo: float | None = 0,
    hi: float | None = 1,
    w: int = 12,
    h: int = 8,
) -> Panel:
    return {
        "type": "bargauge",
        "title": title,
        "description": description,
        "datasource": DS,
        "fieldConfig": {"defaults": defaults(unit, lo, hi, steps), "overrides": []},
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "displayMode": "gradient",
            "orientation": "horizontal",
            "showUnfilled": True,
            "valueMode": "color",
            "namePlacement": "auto",
            "sizing": "auto",
        },
        "targets": tgts,
        "_size": (w, h),
    }


def table(
    title: str, description: str, expr: str, value_name: str, w: int = 12, h: int = 7
) -> Panel:
    return {
        "type": "table",
        "title": title,
        "description": description,
        "datasource": DS,
        "fieldConfig": {"defaults": defaults("short", None, None, None), "overrides": []},
        "options": {
            "showHeader": True,
            "cellHeight": "sm",
            "footer": {"show": False, "reducer": ["sum"], "fields": ""},
        },
        "targets": [target(expr, instant=True, table=True)],
        "transformations": [
            {
                "id": "organize",
                "options": {"excludeByName": {"Time": True}, "renameByName": {"Value": value_name}},
            }
        ],
        "_size": (w, h),
    }


def state_timeline(
    title: str, description: str, tgts: list[dict[str, Any]], w: int = 12, h: int = 8
) -> Panel:
    d = defaults("short", None, None, [("green", None), ("red", 1)])
    d["mappings"] = [
        {
            "type": "value",
            "options": {
                "0": {"text": "closed", "color": "green", "index": 0},
                "1": {"text": "open", "color": "red", "index": 1},
            },
        }
    ]
    return {
        "type": "state-timeline",
        "title": title,
        "description": description,
        "datasource": DS,
        "fieldConfig": {"defaults": d, "overrides": []},
        "options": {
            "mergeValues": True,
            "showValue": "auto",
            "alignValue": "left",
            "rowHeight": 0.9,
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "single", "sort": "none"},
        },
        "targets": tgts,
        "_size": (w, h),
    }


def row(title: str) -> Panel:
    return {"type": "row", "title": title, "collapsed": False, "panels": [], "_size": (24, 1)}


def layout(panels: list[Panel]) -> list[Panel]:
    """Give panels ids and grid positions: left to right, wrapping at 24 columns."""
    x = y = row_h = 0
    out: list[Panel] = []
    for pid, panel in enumerate(panels, start=1):
        w, h = panel.pop("_size")
        if panel["type"] == "row" or x + w > 24:
            x, y, row_h = 0, y + row_h, 0
        panel = {"id": pid, "gridPos": {"h": h, "w": w, "x": x, "y": y}, **panel}
        out.append(panel)
        x, row_h = x + w, max(row_h, h)
        if panel["type"] == "row":
            x, y, row_h = 0, y + h, 0
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

VERSION_ANNOTATIONS = [
    annotation(
        "Rubric or judge model change",
        "orange",
        first_seen("sidecar_rubric_info", RUBRIC, ["rubric", "rubric_version", "judge_model"]),
        "Rubric {{rubric}} v{{rubric_version}} judged by {{judge_model}}",
        "rubric,rubric_version,judge_model",
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
]


def dashboard(
    uid: str,
    title: str,
    description: str,
    variables: list[dict[str, Any]],
    panels: list[Panel],
    annotations: list[dict[str, Any]],
) -> dict[str, Any]:
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
        "panels": layout(panels),
    }


def quality() -> dict[str, Any]:
    version_split = ["rubric", "rubric_version", "judge_model"]
    criterion_split = ["rubric", "criterion", "rubric_version", "judge_model"]
    panels = [
        row("Outcomes"),
        stat(
            "Acceptable share",
            "Acceptable / (acceptable + unacceptable) cases over the selected range. Errored cases are left out; see the next panel.",
            [
                target(
                    case_share("acceptable", ["rubric"], "increase", RANGE),
                    "{{rubric}}",
                    instant=True,
                )
            ],
            "percentunit",
            GOOD_HIGH,
            w=8,
        ),
        stat(
            "Errored share",
            "Cases whose outcome could not be decided (a gating check or criterion ended in ERROR), over the selected range.",
            [
                target(
                    case_share("errored", ["rubric"], "increase", RANGE), "{{rubric}}", instant=True
                )
            ],
            "percentunit",
            ERROR_LOW,
            w=8,
        ),
        stat(
            "Cases evaluated",
            "(trace, rubric) cases evaluated over the selected range.",
            [
                target(
                    f"{agg(['rubric'])} (increase({sel('sidecar_cases_total', CASES)}[{RANGE}]))",
                    "{{rubric}}",
                    instant=True,
                )
            ],
            "short",
            w=8,
        ),
        timeseries(
            "Cases per minute by outcome",
            "Evaluated cases per minute, stacked by outcome, per rubric.",
            targets(
                (
                    per_minute("sidecar_cases_total", CASES, by=["rubric", "outcome"]),
                    "{{rubric}} {{outcome}}",
                )
            ),
            "cpm",
            stack=True,
        ),
        timeseries(
            "Outcome shares",
            "Share of each outcome among all cases of a rubric (errored included here, so the three add up to 100%).",
            targets(
                (
                    f"{rate('sidecar_cases_total', CASES, by=['rubric', 'outcome'])}"
                    f" / on (rubric) group_left {rate('sidecar_cases_total', CASES, by=['rubric'])}",
                    "{{rubric}} {{outcome}}",
                )
            ),
            "percentunit",
            hi=1,
        ),
        row("Drift: agent versions beside rubric versions and judge models"),
        timeseries(
            "Acceptable share by agent version",
            "Agent drift: one line per agent version. Compare with the panel on the right: a step there (rubric or judge change) explains a step here that no agent release does.",
            targets(
                (
                    case_share("acceptable", ["agent", "agent_version"]),
                    "{{agent}} {{agent_version}}",
                )
            ),
            "percentunit",
            hi=1,
            steps=GOOD_HIGH,
        ),
        timeseries(
            "Acceptable share by rubric version and judge model",
            "Judge drift: one line per (rubric version, judge model). A new line starting with a different level means the measuring stick changed, not the agent.",
            targets(
                (
                    case_share("acceptable", version_split),
                    "{{rubric}} v{{rubric_version}} {{judge_model}}",
                )
            ),
            "percentunit",
            hi=1,
            steps=GOOD_HIGH,
        ),
        timeseries(
            "Cases per minute by agent version",
            "Traffic per agent version: shows when a release rolled out and how much weight each line on the left carries.",
            targets(
                (
                    per_minute("sidecar_cases_total", CASES, by=["agent", "agent_version"]),
                    "{{agent}} {{agent_version}}",
                )
            ),
            "cpm",
            stack=True,
        ),
        timeseries(
            "Errored share by rubric version and judge model",
            "Cases that ended in ERROR, per rubric version and judge model. A rise after a judge change points at the judge, not the agent.",
            targets(
                (
                    case_share("errored", version_split),
                    "{{rubric}} v{{rubric_version}} {{judge_model}}",
                )
            ),
            "percentunit",
            steps=ERROR_LOW,
        ),
        row("Criteria (LLM judge)"),
        timeseries(
            "Criterion pass rate by rubric version and judge model",
            "PASS / (PASS + FAIL) per criterion. ERROR and SKIPPED (not sampled) never count.",
            targets(
                (
                    pass_share("sidecar_criterion_verdicts_total", CRITERIA, criterion_split),
                    "{{rubric}}/{{criterion}} v{{rubric_version}} {{judge_model}}",
                )
            ),
            "percentunit",
            hi=1,
        ),
        timeseries(
            "Criterion ERROR rate",
            "ERROR / (PASS + FAIL + ERROR) per criterion and judge model. The dashed line is the 3% alert threshold.",
            targets(
                (
                    error_share(
                        "sidecar_criterion_verdicts_total",
                        CRITERIA,
                        ["rubric", "criterion", "judge_model"],
                    ),
                    "{{rubric}}/{{criterion}} {{judge_model}}",
                )
            ),
            "percentunit",
            steps=[("transparent", None), ("red", 0.03)],
        ),
        bargauge(
            "Criterion pass rate over the range",
            "PASS / (PASS + FAIL) per criterion over the selected range.",
            [
                target(
                    pass_share(
                        "sidecar_criterion_verdicts_total",
                        CRITERIA,
                        ["rubric", "criterion"],
                        "increase",
                        RANGE,
                    ),
                    "{{rubric}}/{{criterion}}",
                    instant=True,
                )
            ],
            "percentunit",
            GOOD_HIGH,
        ),
        timeseries(
            "Hourly pass rate against the 7-day baseline",
            "The SidecarPassRateDrop alert's inputs (recording rules): hourly pass rate per criterion and its volume-weighted 7-day baseline.",
            targets(
                (
                    f"rubric_criterion:sidecar_criterion_pass_ratio:rate1h{{{RUBRIC}}}",
                    "{{rubric}}/{{criterion}} last hour",
                ),
                (
                    f"rubric_criterion:sidecar_criterion_pass_ratio:baseline7d{{{RUBRIC}}}",
                    "{{rubric}}/{{criterion}} 7-day baseline",
                ),
            ),
            "percentunit",
            hi=1,
        ),
        row("Deterministic checks"),
        timeseries(
            "Check pass rate by rubric version",
            "PASS / (PASS + FAIL) per check. Checks run on every matching trace, so this moves with the agent, never with the judge.",
            targets(
                (
                    pass_share(
                        "sidecar_check_results_total", RUBRIC, ["rubric", "check", "rubric_version"]
                    ),
                    "{{rubric}}/{{check}} v{{rubric_version}}",
                )
            ),
            "percentunit",
            hi=1,
        ),
        timeseries(
            "Check ERROR rate",
            "Checks that could not decide from the evidence (e.g. content capture off), as a share of all check results.",
            targets(
                (
                    error_share("sidecar_check_results_total", RUBRIC, ["rubric", "check"]),
                    "{{rubric}}/{{check}}",
                )
            ),
            "percentunit",
        ),
        bargauge(
            "Check pass rate over the range",
            "PASS / (PASS + FAIL) per check over the selected range.",
            [
                target(
                    pass_share(
                        "sidecar_check_results_total",
                        RUBRIC,
                        ["rubric", "check"],
                        "increase",
                        RANGE,
                    ),
                    "{{rubric}}/{{check}}",
                    instant=True,
                )
            ],
            "percentunit",
            GOOD_HIGH,
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
            f"{agg(['agent', 'agent_version'])} (increase({sel('sidecar_cases_total', CASES)}[{RANGE}]))",
            "Cases",
        ),
    ]
    return dashboard(
        "sidecar-quality",
        "sidecar / Quality",
        "Verdict outcomes, criterion and check pass rates, with agent drift beside judge drift.",
        [RUBRIC_VAR, AGENT_VAR, JUDGE_VAR],
        panels,
        VERSION_ANNOTATIONS,
    )


def judge_health() -> dict[str, Any]:
    def quantile(q: str) -> str:
        return (
            f"histogram_quantile({q}, sum by (judge_model, le) "
            f"(rate({sel('sidecar_judge_request_duration_seconds_bucket', JUDGE)}[{RATE}])))"
        )

    cost_range = (
        f"{agg(['judge_model'])} (increase({sel('sidecar_judge_cost_usd_total', JUDGE)}[{RANGE}]))"
    )
    requests_range = f"{agg(['judge_model'])} (increase({sel('sidecar_judge_request_duration_seconds_count', JUDGE)}[{RANGE}]))"
    panels = [
        row("Errors and availability"),
        stat(
            "Criterion ERROR share",
            "ERROR / (PASS + FAIL + ERROR) of criterion verdicts over the selected range. Above 3% the pass rates are not trustworthy.",
            [
                target(
                    error_share(
                        "sidecar_criterion_verdicts_total",
                        CRITERIA,
                        ["judge_model"],
                        "increase",
                        RANGE,
                    ),
                    "{{judge_model}}",
                    instant=True,
                )
            ],
            "percentunit",
            ERROR_LOW,
            w=8,
        ),
        stat(
            "Judge cost in the range",
            "US dollars spent on judge calls over the selected range, from the configured price table.",
            [target(cost_range, "{{judge_model}}", instant=True)],
            "currencyUSD",
            w=8,
        ),
        stat(
            "Cost per judge request",
            "Average cost of one judge request over the selected range.",
            [target(f"{cost_range} / {requests_range}", "{{judge_model}}", instant=True)],
            "currencyUSD",
            w=8,
        ),
        timeseries(
            "Criterion ERROR share by judge model",
            "ERROR / (PASS + FAIL + ERROR) per judge model. Dashed line: the 3% alert threshold.",
            targets(
                (
                    error_share("sidecar_criterion_verdicts_total", CRITERIA, ["judge_model"]),
                    "{{judge_model}}",
                )
            ),
            "percentunit",
            steps=[("transparent", None), ("red", 0.03)],
        ),
        timeseries(
            "Judge errors per minute by reason",
            "Failed judge calls by reason (timeout, blocked, unparsable output, transport, ...).",
            targets(
                (
                    per_minute("sidecar_judge_errors_total", JUDGE, by=["judge_model", "reason"]),
                    "{{judge_model}} {{reason}}",
                )
            ),
            "cpm",
            stack=True,
        ),
        state_timeline(
            "Circuit breaker",
            "Open means sidecar stopped calling this judge model after repeated failures.",
            targets(
                (
                    f"max by (judge_model) ({sel('sidecar_judge_breaker_open', JUDGE)})",
                    "{{judge_model}}",
                )
            ),
        ),
        timeseries(
            "Judge queue depth",
            "Cases waiting for the judge, per replica. When the queue is full the replica pauses its partitions (back-pressure) and consumer lag grows.",
            targets(("sum by (instance) (sidecar_judge_queue_depth)", "{{instance}}")),
            "short",
        ),
        row("Latency and volume"),
        timeseries(
            "Judge request latency",
            "p50, p95 and p99 of one judge HTTP request, per model.",
            targets(
                (quantile("0.5"), "p50 {{judge_model}}"),
                (quantile("0.95"), "p95 {{judge_model}}"),
                (quantile("0.99"), "p99 {{judge_model}}"),
            ),
            "s",
        ),
        timeseries(
            "Judge requests per minute",
            "Judge HTTP requests per minute, per model.",
            targets(
                (
                    per_minute(
                        "sidecar_judge_request_duration_seconds_count", JUDGE, by=["judge_model"]
                    ),
                    "{{judge_model}}",
                )
            ),
            "cpm",
        ),
        timeseries(
            "Tokens per minute",
            "Judge tokens per minute by model and kind (input, output): compare with your tokens-per-minute quota.",
            targets(
                (
                    per_minute("sidecar_judge_tokens_total", JUDGE, by=["judge_model", "kind"]),
                    "{{judge_model}} {{kind}}",
                )
            ),
            "short",
            stack=True,
        ),
        timeseries(
            "Judge cost per hour",
            "US dollars per hour at the current rate, per model.",
            targets(
                (
                    f"{rate('sidecar_judge_cost_usd_total', JUDGE, by=['judge_model'])} * 3600",
                    "{{judge_model}}",
                )
            ),
            "currencyUSD",
        ),
        timeseries(
            "Verdict cache hit ratio",
            "Judge verdicts served from the cache (same rubric version, judge model and data) instead of a new call.",
            targets(
                (
                    share("sidecar_verdict_cache_requests_total", "", "result", "hit", "hit|miss"),
                    "hit ratio",
                )
            ),
            "percentunit",
            hi=1,
        ),
        row("Injection screening and human review"),
        timeseries(
            "Injection-suspected share of cases",
            "Cases whose data looked like an attempt to instruct the grader, as a share of all cases of the rubric.",
            targets(
                (
                    f"({rate('sidecar_injection_suspected_total', RUBRIC, by=['rubric'])}"
                    f" or 0 * {rate('sidecar_cases_total', RUBRIC, by=['rubric'])})"
                    f" / {rate('sidecar_cases_total', RUBRIC, by=['rubric'])}",
                    "{{rubric}}",
                )
            ),
            "percentunit",
        ),
        timeseries(
            "Review cases per minute by reason",
            "Cases routed to human review, by reason.",
            targets(
                (
                    per_minute("sidecar_review_cases_total", RUBRIC, by=["rubric", "reason"]),
                    "{{rubric}} {{reason}}",
                )
            ),
            "cpm",
            stack=True,
        ),
        row("Judge against people"),
        timeseries(
            "Judge-human agreement (Cohen's kappa)",
            "Chance-corrected agreement between the judge and human labels per criterion. Below 0.4 (red) the criterion should not gate anything.",
            targets(
                (
                    human_agreement("kappa"),
                    "{{rubric}}/{{criterion}} v{{rubric_version}} {{judge_model}}",
                )
            ),
            "short",
            lo=-1,
            hi=1,
            steps=[("red", None), ("orange", 0.4), ("green", 0.6)],
        ),
        timeseries(
            "Judge-human raw agreement",
            "Share of human-labelled cases where the judge gave the same verdict (not corrected for chance).",
            targets(
                (
                    human_agreement("agreement"),
                    "{{rubric}}/{{criterion}} v{{rubric_version}} {{judge_model}}",
                )
            ),
            "percentunit",
            hi=1,
        ),
        bargauge(
            "Human labels in the range",
            "Human labels received per criterion over the selected range; kappa on a handful of labels means little.",
            [
                target(
                    f"{agg(['rubric', 'criterion'])} (increase({sel('sidecar_human_labels_total', RUBRIC)}[{RANGE}]))",
                    "{{rubric}}/{{criterion}}",
                    instant=True,
                )
            ],
            "short",
            [("orange", None), ("green", 30)],
            hi=None,
            w=24,
        ),
    ]
    return dashboard(
        "sidecar-judge-health",
        "sidecar / Judge health",
        "Is the judge trustworthy right now: errors, breaker, latency, tokens and cost, cache, injection screening, agreement with people.",
        [RUBRIC_VAR, JUDGE_VAR],
        panels,
        VERSION_ANNOTATIONS[:1],
    )


def pipeline() -> dict[str, Any]:
    lag = "max by (partition) (sidecar_consumer_lag)"
    panels = [
        row("Health"),
        stat(
            "Replicas up",
            'Scrape targets with job="sidecar" that answered the last scrape.',
            [target('sum(up{job="sidecar"})', "up", instant=True)],
            "short",
            [("red", None), ("green", 1)],
        ),
        stat(
            "Consumer lag",
            "Records behind the end of otlp_spans, all partitions together.",
            [target(f"sum({lag})", "lag", instant=True)],
            "short",
            [("green", None), ("orange", 1000), ("red", 10000)],
        ),
        stat(
            "Open traces",
            "Traces being assembled, all replicas together.",
            [target("sum(sidecar_open_traces)", "open", instant=True)],
            "short",
        ),
        stat(
            "Dead-lettered in the range",
            "Records sent to the dead-letter topic over the selected range.",
            [
                target(
                    f"sum(increase(sidecar_dead_letters_total[{RANGE}]))",
                    "dead letters",
                    instant=True,
                )
            ],
            "short",
            [("green", None), ("orange", 1)],
        ),
        row("Throughput"),
        timeseries(
            "Kafka records per second",
            "Records consumed from otlp_spans, by result (ok or dead_letter).",
            targets((rate("sidecar_kafka_records_total", by=["result"]), "{{result}}")),
            "cps",
            stack=True,
        ),
        timeseries(
            "Spans per second",
            "Spans decoded from the records.",
            targets((rate("sidecar_spans_total"), "spans")),
            "cps",
        ),
        timeseries(
            "Traces decided per second by reason",
            "complete: root ended and decision_wait passed; max_age: root never ended in time; evicted/span_limit: a bound forced an early decision; shutdown/flush: decided while stopping.",
            targets((rate("sidecar_traces_decided_total", by=["reason"]), "{{reason}}")),
            "cps",
            stack=True,
        ),
        timeseries(
            "Open traces per replica",
            "Traces in the assembler, per replica. Flat at assembler.max_open_traces means evictions.",
            targets(("sum by (instance) (sidecar_open_traces)", "{{instance}}")),
            "short",
        ),
        row("Loss and bounds"),
        timeseries(
            "Evictions per minute by bound",
            "Traces decided early because a bound was hit (open_traces or spans_per_trace). Their verdicts are flagged truncated.",
            targets((per_minute("sidecar_evictions_total", by=["kind"]), "{{kind}}")),
            "cpm",
            stack=True,
        ),
        timeseries(
            "Late spans and orphan traces per minute",
            "Late: spans for a trace already decided (ignored). Orphan: traces decided without their root span (check partition_traces_by_id).",
            targets(
                (per_minute("sidecar_late_spans_total"), "late spans"),
                (per_minute("sidecar_orphan_traces_total"), "orphan traces"),
            ),
            "cpm",
        ),
        timeseries(
            "Dead-lettered records per minute by reason",
            "Records that could not be decoded, sent to the dead-letter topic with the reason in a header.",
            targets((per_minute("sidecar_dead_letters_total", by=["reason"]), "{{reason}}")),
            "cpm",
            stack=True,
        ),
        timeseries(
            "Duplicate verdicts per minute",
            "Verdicts emitted again for an idempotency key seen before: redelivery after a crash or rebalance (at-least-once).",
            targets((per_minute("sidecar_duplicate_verdicts_total"), "duplicates")),
            "cpm",
        ),
        row("Kafka and sampling"),
        timeseries(
            "Consumer lag per partition",
            "Records behind the end of each otlp_spans partition. Dashed line: the 1000-record level of the lag alert.",
            targets((lag, "partition {{partition}}")),
            "short",
            steps=[("transparent", None), ("orange", 1000)],
        ),
        timeseries(
            "Sampling decisions per minute by reason",
            "Why each matching trace was or was not sent to the judge (ratio, always-judge rules, budget).",
            targets(
                (
                    per_minute(
                        "sidecar_sampling_decisions_total",
                        RUBRIC,
                        by=["rubric", "decision", "reason"],
                    ),
                    "{{rubric}} {{decision}} {{reason}}",
                )
            ),
            "cpm",
            stack=True,
        ),
        timeseries(
            "Judged share per rubric",
            "Share of matching traces sent to the judge; compare with the rubric's judge_ratio.",
            targets(
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
                )
            ),
            "percentunit",
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
        VERSION_ANNOTATIONS[2:],
    )


DASHBOARDS = {"quality.json": quality, "judge-health.json": judge_health, "pipeline.json": pipeline}


def render(build: Any) -> str:
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
