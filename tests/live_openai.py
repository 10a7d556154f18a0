"""Shared by the live OpenAI-agent tests: replay a recording, read the verdicts.

A recording (``tests.agents.openai_traces``) is written as OTLP/JSON files,
traces and logs apart as a Collector's file exporter writes them, and handed
to ``sidecar replay`` with the bundled rubrics: the sidecar reads what the
real instrumentation emitted, through its real entry point.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sidecar.cli import main
from sidecar.commands.demo import demo_data
from tests.agents.openai_agent import BY_NAME, SCENARIOS
from tests.agents.openai_traces import Run

_, DEMO_RUBRICS = demo_data()
NAMES = tuple(s.name for s in SCENARIOS)
TOOL_CHECKS = ("allowed_tools", "order_looked_up", "refund_args", "tool_budget")


@dataclass(frozen=True)
class Replayed:
    records: list[dict[str, Any]]
    stderr: str


def replay_run(
    run: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str], *, logs: bool = False
) -> Replayed:
    """``sidecar replay`` over the run's traces file (and its logs file when ``logs``)."""
    traces = tmp_path / f"{run.scenario}.traces.jsonl"
    traces.write_text("".join(line + "\n" for line in run.traces), encoding="utf-8")
    paths = [traces]
    if logs:
        assert run.logs, f"{run.scenario}: the mode emitted no log records"
        path = tmp_path / f"{run.scenario}.logs.jsonl"
        path.write_text("".join(line + "\n" for line in run.logs), encoding="utf-8")
        paths.append(path)
    capsys.readouterr()
    main(["replay", *map(str, paths), "--rubrics", str(DEMO_RUBRICS)])
    out, err = capsys.readouterr()
    records = [json.loads(line) for line in out.splitlines()]
    assert records, err
    return Replayed(records, err)


def outcomes(record: dict[str, Any], outcome: str) -> set[str]:
    return {c["name"] for c in record["checks"] if c["outcome"] == outcome}


def verdict(record: dict[str, Any]) -> tuple[str, frozenset[str], frozenset[str]]:
    """(outcome, failed checks, errored checks): what the tests compare across modes."""
    return (
        record["outcome"],
        frozenset(outcomes(record, "FAIL")),
        frozenset(outcomes(record, "ERROR")),
    )


def expected_verdict(name: str) -> tuple[str, frozenset[str], frozenset[str]]:
    failures = BY_NAME[name].expected_failures
    return ("unacceptable" if failures else "acceptable", failures, frozenset())


def assert_no_wrong_verdict(name: str, records: Sequence[dict[str, Any]]) -> None:
    """Content off: each check is ERROR or what the full evidence makes it; never a wrong PASS."""
    expected = BY_NAME[name].expected_failures
    for record in records:
        assert record["outcome"] != "acceptable", (name, record["checks"])
        assert outcomes(record, "FAIL") <= expected, (name, record["checks"])
        assert not (outcomes(record, "PASS") & expected), (name, record["checks"])
