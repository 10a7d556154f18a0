"""sidecar gate: Wilson lower bounds, hard gates, the ERROR rate, and the command's exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from statsmodels.stats.proportion import proportion_confint

from sidecar import cli
from sidecar.calibrate.release_gate import GatePolicy, evaluate_gate
from sidecar.model import Outcome
from sidecar.wire.verdicts import CheckRecord, CriterionRecord, VerdictRecord

P, F, E, S = Outcome.PASS, Outcome.FAIL, Outcome.ERROR, Outcome.SKIPPED


def run(
    criteria: list[list[tuple[str, Outcome, bool]]],
    checks: list[list[tuple[str, Outcome, bool]]] | None = None,
) -> list[VerdictRecord]:
    checks = checks or [[] for _ in criteria]
    return [
        VerdictRecord(
            id=f"v{i}",
            trace_id=f"t{i}",
            rubric_id="refund",
            rubric_version="3",
            judge_model="j",
            criteria=tuple(CriterionRecord(name=n, outcome=o, gate=g) for n, o, g in crit),
            checks=tuple(CheckRecord(name=n, outcome=o, gate=g) for n, o, g in chk),
        )
        for i, (crit, chk) in enumerate(zip(criteria, checks, strict=True))
    ]


def outcomes(
    name: str, passes: int, fails: int = 0, errors: int = 0, gate: bool = True
) -> list[list[tuple[str, Outcome, bool]]]:
    return [[(name, o, gate)] for o in [P] * passes + [F] * fails + [E] * errors]


@pytest.mark.parametrize(
    ("verdicts", "policy", "passed", "reason"),
    [
        pytest.param(
            run(outcomes("amount", 95, 5)), GatePolicy(), True, None, id="95-of-100-passes-0.8"
        ),
        pytest.param(
            run(outcomes("amount", 95, 5)),
            GatePolicy(min_lower_bound=0.9),
            False,
            "criterion 'amount': pass rate 95/100 = 0.950, lower bound 0.888 at 95% < 0.9",
            id="95-of-100-fails-0.9",
        ),
        pytest.param(
            run(outcomes("amount", 95, 5)),
            GatePolicy(min_lower_bound=0.99, criterion_min={"amount": 0.85}),
            True,
            None,
            id="per-criterion-threshold-overrides",
        ),
        pytest.param(
            run(outcomes("tone", 1, 9, gate=False)),
            GatePolicy(),
            True,
            None,
            id="advisory-never-blocks",
        ),
        pytest.param(
            run(outcomes("amount", 0, 0, 3)),
            GatePolicy(max_error_rate=1.0),
            False,
            "criterion 'amount': no PASS/FAIL verdicts (3 ERROR, 0 SKIPPED)",
            id="nothing-judged",
        ),
        pytest.param(
            run(outcomes("amount", 100, 0, 4)),
            GatePolicy(),
            False,
            "ERROR rate 4/104 = 0.038 > 0.03",
            id="error-rate",
        ),
        pytest.param(
            run(outcomes("amount", 100, 0, 3)), GatePolicy(), True, None, id="error-rate-at-limit"
        ),
        pytest.param(
            run(
                outcomes("amount", 100), [[("tools", F if i == 7 else P, True)] for i in range(100)]
            ),
            GatePolicy(),
            False,
            "check 'tools' (refund): 1 FAIL",
            id="one-hard-gate-failure",
        ),
        pytest.param(
            run(outcomes("amount", 100), [[("fast", F, False)] for _ in range(100)]),
            GatePolicy(),
            True,
            None,
            id="advisory-check-failures",
        ),
    ],
)
def test_evaluate_gate(
    verdicts: list[VerdictRecord], policy: GatePolicy, passed: bool, reason: str | None
) -> None:
    report = evaluate_gate(verdicts, policy)
    assert report.passed is passed
    if reason is None:
        assert report.reasons == ()
    else:
        assert reason in report.reasons


def test_lower_bound_is_wilson_and_errors_stay_out_of_the_denominator() -> None:
    verdicts = run([*outcomes("amount", 45, 5, 2), [("amount", S, True)]])
    (row,) = evaluate_gate(verdicts, GatePolicy(max_error_rate=1.0)).criteria
    low, high = proportion_confint(45, 50, alpha=0.05, method="wilson")
    assert (row.tally.n, row.tally.passes, row.tally.errors, row.tally.skipped) == (50, 45, 2, 1)
    assert row.pass_rate == 0.9
    assert row.lower_bound == pytest.approx(low, abs=1e-12)
    assert row.upper_bound == pytest.approx(high, abs=1e-12)
    assert round(row.lower_bound or 0, 4) == 0.7864


def test_duplicates_count_once() -> None:
    verdicts = run(outcomes("amount", 3))
    report = evaluate_gate([*verdicts, verdicts[0]])
    assert report.duplicates == 1
    assert report.criteria[0].tally.passes == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"confidence": 1.5}, "confidence", id="confidence"),
        pytest.param({"max_error_rate": -0.1}, "max error rate", id="error-rate"),
        pytest.param({"criterion_min": {"x": 2.0}}, "minimum for 'x'", id="criterion-min"),
    ],
)
def test_policy_validation(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GatePolicy(**kwargs)


def test_unknown_criterion_threshold_is_an_error() -> None:
    with pytest.raises(ValueError, match="no criterion named 'amont' in the run"):
        evaluate_gate(run(outcomes("amount", 3)), GatePolicy(criterion_min={"amont": 0.5}))


# -- the command -------------------------------------------------------------


def _records(passes: int, fails: int, check_fail: bool = False) -> list[dict[str, Any]]:
    return [
        {
            "id": f"v{i}",
            "trace_id": f"t{i}",
            "rubric_id": "refund",
            "rubric_version": "3",
            "judge_model": "gemini-2.5-flash",
            "outcome": "acceptable",
            "checks": [
                {
                    "name": "tools",
                    "outcome": "FAIL" if check_fail and i == 0 else "PASS",
                    "gate": True,
                }
            ],
            "criteria": [
                {"name": "amount", "outcome": "PASS" if i < passes else "FAIL", "gate": True}
            ],
        }
        for i in range(passes + fails)
    ]


def _file(tmp_path: Path, records: list[dict[str, Any]]) -> str:
    path = tmp_path / "verdicts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return str(path)


def test_command_json_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["gate", "--verdicts", _file(tmp_path, _records(95, 5)), "--json"])
    assert code == 0
    document = json.loads(capsys.readouterr().out)
    assert document["passed"] is True
    assert document["error_rate"] == 0.0
    (criterion,) = document["criteria"]
    assert {"criterion", "n", "passes", "pass_rate", "lower_bound"} <= set(criterion)
    assert (criterion["n"], criterion["passes"], criterion["pass_rate"]) == (100, 95, 0.95)
    assert round(criterion["lower_bound"], 4) == 0.8882


@pytest.mark.parametrize(
    ("records", "args", "reason"),
    [
        pytest.param(
            _records(95, 5),
            ["--min-lower-bound", "0.9"],
            "lower bound 0.888 at 95% < 0.9",
            id="bound",
        ),
        pytest.param(
            _records(95, 5), ["--criterion-min", "amount=0.9"], "< 0.9", id="criterion-min"
        ),
        pytest.param(
            _records(100, 0, check_fail=True), [], "check 'tools' (refund): 1 FAIL", id="check"
        ),
    ],
)
def test_command_fails_with_reason(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    records: list[dict[str, Any]],
    args: list[str],
    reason: str,
) -> None:
    code = cli.main(["gate", "--verdicts", _file(tmp_path, records), *args])
    assert code == 1
    out = capsys.readouterr().out
    assert "gate failed" in out
    assert reason in out


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        pytest.param(None, [], "no such file", id="missing-file"),
        pytest.param("", [], "no verdict records", id="empty"),
        pytest.param(
            '{"trace_id": "t"}\n\n[]\n', [], "verdicts.jsonl:1: field 'rubric_id'", id="bad-record"
        ),
        pytest.param("{bad\n", [], "verdicts.jsonl:1: not valid JSON", id="bad-json"),
        pytest.param(
            _records(1, 0),
            ["--confidence", "95"],
            "confidence must be between 0 and 1",
            id="confidence",
        ),
        pytest.param(
            _records(1, 0),
            ["--criterion-min", "nope=0.5"],
            "no criterion named 'nope'",
            id="unknown",
        ),
    ],
)
def test_command_usage_errors(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: str | list[dict[str, Any]] | None,
    args: list[str],
    message: str,
) -> None:
    path = tmp_path / "verdicts.jsonl"
    if isinstance(content, list):
        _file(tmp_path, content)
    elif content is not None:
        path.write_text(content, encoding="utf-8")
    code = cli.main(["gate", "--verdicts", str(path), *args])
    assert code == 2
    assert message in capsys.readouterr().err


def test_command_rejects_malformed_criterion_min(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["gate", "--verdicts", "x", "--criterion-min", "amount"])
    assert exit_info.value.code == 2
    assert "expected NAME=X" in capsys.readouterr().err
