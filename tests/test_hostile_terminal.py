"""Untrusted names on the terminal: never read as rich markup, control characters shown.

Agent versions, rubric ids, criterion and check names and judge models come
from verdict and label files. ``sidecar diff``, ``calibrate``, ``gate`` and
``canary`` print them with rich, which reads ``[bold]``-style markup in plain
strings (``[/]`` with nothing open raises ``MarkupError``) and passes escape
sequences through to the terminal. Each hostile name must come out literally,
with its control characters escaped.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from sidecar.calibrate.stats import Confusion
from sidecar.cli import main
from sidecar.commands.canary import print_canary
from sidecar.drift.canary_set import CanaryReport, CriterionCanary

HOSTILE = [
    pytest.param("v[/]1", "v[/]1", id="closing-tag"),
    pytest.param("[bold]loud[/bold]", "[bold]loud[/bold]", id="markup"),
    pytest.param("[link=http://x]x", "[link=http://x]x", id="link"),
    pytest.param("a\x1b[2Jb", "a\\x1b[2Jb", id="ansi-clear"),
    pytest.param("ok\rforged", "ok\\rforged", id="carriage-return"),
]


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _verdict(trace: str, name: str, outcome: str, version: str) -> dict[str, Any]:
    return {
        "id": f"{trace}-{version}",
        "trace_id": trace,
        "rubric_id": name,
        "rubric_version": "1",
        "judge_model": name,
        "judge_model_version": version,
        "agent_version": name + version,
        "judged": True,
        "checks": [{"name": name, "outcome": "PASS", "gate": True}],
        "criteria": [{"name": name, "outcome": outcome, "gate": True}],
    }


@pytest.mark.parametrize(("name", "escaped"), HOSTILE)
def test_diff_prints_hostile_names_literally(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, escaped: str
) -> None:
    base = _write(tmp_path / "b.jsonl", [_verdict("t1", name, "PASS", "v1")])
    cand = _write(tmp_path / "c.jsonl", [_verdict("t1", name, "FAIL", name)])
    assert main(["diff", "--baseline", str(base), "--candidate", str(cand)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert "\r" not in out
    assert f"changed: {escaped} judge_model_version: v1 -> {escaped}" in out
    assert escaped[:6] in next(line for line in out.splitlines() if "criterion" in line)


@pytest.mark.parametrize(("name", "escaped"), HOSTILE)
def test_calibrate_and_gate_print_hostile_names_literally(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, escaped: str
) -> None:
    outcomes = ["PASS", "FAIL", "PASS", "FAIL"]
    labels = _write(
        tmp_path / "labels.jsonl",
        [
            {"case_id": f"t{i}", "criterion": name, "rater": "ann", "label": o}
            for i, o in enumerate(outcomes)
        ],
    )
    verdicts = _write(
        tmp_path / "verdicts.jsonl",
        [_verdict(f"t{i}", name, o, "v1") for i, o in enumerate(outcomes)],
    )
    assert main(["calibrate", "--labels", str(labels), "--verdicts", str(verdicts)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert "\r" not in out
    assert sum(escaped in line for line in out.splitlines()) >= 1
    main(["gate", "--verdicts", str(verdicts)])
    captured = capsys.readouterr()
    screen = captured.out + captured.err
    assert "\x1b" not in screen
    assert "\r" not in screen
    assert escaped in screen


@pytest.mark.parametrize(("name", "escaped"), HOSTILE)
def test_canary_report_prints_hostile_names_literally(name: str, escaped: str) -> None:
    criterion = CriterionCanary(
        criterion=name,
        gate=True,
        confusion=Confusion(tp=1, fp=1, fn=1, tn=1),
        judged=4,
        errors=0,
        flips=None,
        compared=0,
        threshold=0.6,
    )
    report = CanaryReport(
        rubric=name,
        rubric_version=name,
        rubric_hash="abc",
        judge_model=name,
        judge_model_versions=(name,),
        criteria=(criterion,),
        cases=4,
        max_error_rate=0.1,
        warnings=(f"warned about {name}",),
    )
    screen = io.StringIO()
    print_canary(report, Console(file=screen, width=300, force_terminal=True))
    out = screen.getvalue()
    assert "\x1b[2J" not in out
    assert "\r" not in out
    assert f"canary: rubric {escaped} v{escaped}" in out
    assert f"gated criterion '{escaped}'" in out or f"gated criterion {escaped!r}" in out


def test_an_error_line_quoting_a_hostile_value_shows_it_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "base\x1b[2J\rINFO sidecar: all good.jsonl"
    cand = _write(tmp_path / "c.jsonl", [_verdict("t1", "r", "PASS", "v1")])
    assert main(["diff", "--baseline", str(missing), "--candidate", str(cand)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err
    assert "\r" not in err
    assert "base\\x1b[2J\\rINFO sidecar: all good.jsonl" in err
