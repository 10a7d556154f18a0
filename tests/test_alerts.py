"""Prometheus recording and alerting rules (deploy/prometheus).

promtool (Debian's prometheus package, scripts/install-prometheus) checks the
rule files and runs their unit tests. The rest checks what promtool cannot:
every alert carries a runbook that exists, and every alert has a unit test in
which it fires and one in which it stays silent.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import realparts

ROOT = Path(__file__).resolve().parents[1]
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
RULE_FILES = sorted((PROMETHEUS_DIR / "rules").glob("*.yaml"))
TEST_FILES = sorted((PROMETHEUS_DIR / "tests").glob("*.yaml"))
OPERATIONS = ROOT / "docs" / "operations.md"


def _rules() -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
            rules.extend(group["rules"])
    return rules


ALERTS = [r for r in _rules() if "alert" in r]
RECORDS = [r for r in _rules() if "record" in r]


def _unit_tests() -> list[dict[str, Any]]:
    return [yaml.safe_load(p.read_text(encoding="utf-8")) for p in TEST_FILES]


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [realparts.tool("promtool"), *args],
        cwd=PROMETHEUS_DIR,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def github_anchor(heading: str) -> str:
    """The fragment GitHub gives a Markdown heading."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _doc_anchors() -> set[str]:
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*$", OPERATIONS.read_text(encoding="utf-8"), re.M)
    return {github_anchor(h) for h in headings}


def test_rule_files_exist() -> None:
    assert [p.name for p in RULE_FILES] == ["alerts.yaml", "recording.yaml"]
    assert TEST_FILES, "no promtool unit tests in deploy/prometheus/tests"


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_promtool_check_rules(path: Path) -> None:
    result = _promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: p.name)
def test_promtool_unit_tests(path: Path) -> None:
    result = _promtool("test", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_check_example_config() -> None:
    result = _promtool("check", "config", "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("rule", ALERTS, ids=lambda r: r["alert"])
def test_alert_has_severity_and_runbook(rule: dict[str, Any]) -> None:
    assert rule["labels"]["severity"] in {"warning", "critical"}
    annotations = rule["annotations"]
    assert {"summary", "description", "runbook_url"} <= annotations.keys()
    page, _, anchor = annotations["runbook_url"].partition("#")
    assert page == "docs/operations.md"
    assert anchor == rule["alert"].lower(), "runbook anchor is the alert name's heading"
    assert anchor in _doc_anchors(), f"docs/operations.md has no heading for #{anchor}"


def test_alert_names_unique() -> None:
    names = [r["alert"] for r in ALERTS]
    assert len(names) == len(set(names))


REQUIRED_ALERTS = [
    "SidecarPassRateDrop",
    "SidecarAgentDrift",
    "SidecarJudgeDrift",
    "SidecarJudgeErrorRateHigh",
    "SidecarJudgeBreakerOpen",
    "SidecarJudgeUnavailable",
    "SidecarConsumerLagGrowing",
    "SidecarDeadLetters",
    "SidecarEvictions",
    "SidecarDown",
    "SidecarAbsent",
    "SidecarJudgeHumanAgreementLow",
]


@pytest.mark.parametrize("name", REQUIRED_ALERTS)
def test_required_alert_defined(name: str) -> None:
    assert name in {r["alert"] for r in ALERTS}


@pytest.mark.parametrize("rule", ALERTS, ids=lambda r: r["alert"])
def test_alert_unit_tested_firing_and_silent(rule: dict[str, Any]) -> None:
    cases = [
        case
        for doc in _unit_tests()
        for test in doc["tests"]
        for case in test.get("alert_rule_test", [])
        if case["alertname"] == rule["alert"]
    ]
    assert any(case.get("exp_alerts") for case in cases), "no unit test in which it fires"
    assert any(not case.get("exp_alerts") for case in cases), (
        "no unit test in which it stays silent"
    )


@pytest.mark.parametrize("rule", RECORDS, ids=lambda r: r["record"])
def test_recording_rule_is_tested_or_used(rule: dict[str, Any]) -> None:
    tested = {
        case["expr"]
        for doc in _unit_tests()
        for test in doc["tests"]
        for case in test.get("promql_expr_test", [])
    }
    used_by_rules = " ".join(r["expr"] for r in _rules())
    name = rule["record"]
    assert any(name in expr for expr in tested) or name in used_by_rules


@pytest.mark.parametrize("rule", RECORDS, ids=lambda r: r["record"])
def test_recording_rule_name_follows_convention(rule: dict[str, Any]) -> None:
    level, metric, window = rule["record"].split(":")
    assert level
    assert metric.startswith("sidecar_")
    assert window in {"rate5m", "rate1h", "baseline7d"}


@pytest.mark.parametrize(
    ("record", "window"),
    [
        ("rubric_criterion:sidecar_criterion_pass_ratio:rate5m", "5m"),
        ("rubric_criterion:sidecar_criterion_pass_ratio:rate1h", "1h"),
        ("rubric_criterion:sidecar_criterion_error_ratio:rate5m", "5m"),
        ("rubric_criterion:sidecar_criterion_error_ratio:rate1h", "1h"),
    ],
)
def test_pass_and_error_ratio_recorded_per_rubric_criterion(record: str, window: str) -> None:
    rule = next(r for r in RECORDS if r["record"] == record)
    assert f"rate{window}" in rule["expr"]
    assert "by (rubric, criterion)" in rule["expr"]
