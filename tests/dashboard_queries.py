"""The PromQL queries of the committed Grafana dashboards, for the tests that check them.

``ALL_QUERIES`` lists every panel target of dashboards/*.json and
``ANNOTATION_EXPRS`` every annotation query; ``expand`` substitutes Grafana's
variables the way Grafana would, so that a plain Prometheus can run them.
tests/test_dashboards.py checks the queries statically and against an empty
Prometheus; tests/integration/test_prometheus_panels.py runs them against a
Prometheus scraping a live sidecar.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD_DIR = ROOT / "dashboards"
DASHBOARD_FILES = sorted(DASHBOARD_DIR.glob("*.json"))
RULE_FILES = sorted((ROOT / "deploy" / "prometheus" / "rules").glob("*.yaml"))

# Values for an instant query that stand in for what Grafana substitutes.
DEFAULT_VALUES = {
    "__rate_interval": "1m",
    "__range": "1h",
    "__interval": "15s",
    "rubric": ".*",
    "agent": ".*",
    "judge_model": ".*",
}


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


@dataclass(frozen=True, slots=True)
class PanelQuery:
    dashboard: str
    panel_id: int
    title: str
    ref_id: str
    expr: str
    instant: bool

    @property
    def id(self) -> str:
        return f"{self.dashboard}:{self.panel_id}:{self.ref_id}"


def panel_queries(path: Path) -> list[PanelQuery]:
    """Every panel target of one dashboard file, in panel order."""
    board = load(path)
    return [
        PanelQuery(
            path.stem, panel["id"], panel["title"], t["refId"], t["expr"], bool(t.get("instant"))
        )
        for panel in board["panels"]
        for t in panel.get("targets", [])
    ]


def annotation_exprs(path: Path) -> list[tuple[str, str]]:
    """(dashboard:annotation name, expr) for each query annotation of one dashboard file."""
    return [
        (f"{path.stem}:{ann['name']}", ann["expr"])
        for ann in load(path)["annotations"]["list"]
        if "expr" in ann
    ]


def expand(expr: str, values: dict[str, str] | None = None) -> str:
    """Substitute Grafana variables ($name, ${name}) the way Grafana would."""
    table = {**DEFAULT_VALUES, **(values or {})}

    def sub(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return table[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", sub, expr)


ALL_QUERIES = [q for path in DASHBOARD_FILES for q in panel_queries(path)]
ANNOTATION_EXPRS = [a for path in DASHBOARD_FILES for a in annotation_exprs(path)]
