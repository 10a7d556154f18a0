"""``sidecar diff``: two verdict files compared per check and criterion, figures checked by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sidecar.cli import main
from sidecar.drift.verdict_diff import Kind, diff_verdicts
from sidecar.wire import validate
from sidecar.wire.verdicts import VerdictRecord

P, F, E, S = "PASS", "FAIL", "ERROR", "SKIPPED"


def record(
    trace: str,
    criteria: dict[str, str],
    checks: dict[str, str] | None = None,
    *,
    version: str = "v1",
    rubric_version: str = "3",
    key: str | None = None,
) -> dict[str, Any]:
    judged = any(o in (P, F) for o in criteria.values())
    data: dict[str, Any] = {
        "id": key or f"{trace}-{version}",
        "trace_id": trace,
        "rubric_id": "refund",
        "rubric_version": rubric_version,
        "judge_model": "gemini-2.5-flash",
        "agent": "refund-agent",
        "agent_version": "1.0",
        "judged": judged,
        "rubric_hash": "aaaaaaaaaaaa",
        "checks": [{"name": n, "outcome": o, "gate": True} for n, o in (checks or {}).items()],
        "criteria": [{"name": n, "outcome": o, "gate": True} for n, o in criteria.items()],
    }
    if judged:
        data["judge_model_version"] = version
    return data


# The small case. Criterion `correct` over traces t1..t7:
#
#   trace  baseline  candidate
#   t1     PASS      PASS        unchanged
#   t2     PASS      FAIL        flip PASS->FAIL
#   t3     FAIL      PASS        flip FAIL->PASS
#   t4     PASS      PASS        unchanged
#   t5     PASS      ERROR       other change PASS->ERROR
#   t6     FAIL      -           only in the baseline
#   t7     -         PASS        only in the candidate
#
# Paired cases: t1..t5 (5).
# Baseline over them: 4 PASS, 1 FAIL -> pass rate 4/5 = 0.8.
# Candidate over them: 3 PASS, 1 FAIL, 1 ERROR -> pass rate 3/(3+1) = 0.75 (ERROR never in
# the denominator); change -0.05.
#
# Wilson 95%, z = 1.959964, z^2 = 3.841459:
#   4 of 5: denominator 1 + z^2/5 = 1.768292; centre (0.8 + z^2/10) / 1.768292 = 0.669655;
#           half z * sqrt(0.8*0.2/5 + z^2/100) / 1.768292 = 1.959964 * 0.265357 / 1.768292
#           = 0.294121 -> [0.375535, 0.963776]
#   3 of 4: denominator 1 + z^2/4 = 1.960365; centre (0.75 + z^2/8) / 1.960365 = 0.627527;
#           half 1.959964 * sqrt(0.75*0.25/4 + z^2/64) / 1.960365 = 1.959964 * 0.326952
#           / 1.960365 = 0.326885 -> [0.300642, 0.954413]
# (statsmodels proportion_confint(method="wilson") gives the same to 4 places.)
#
# Check `allowed`: PASS on t1, t2, t4, t5 and FAIL on t3 in both files: 4/5 on both sides,
# no change. Criterion `polite` exists only in the candidate's t1 (added to the rubric):
# one result only in the candidate, nothing paired. Baseline t1 is repeated under the same
# idempotency key (at-least-once delivery): counted once.
ALLOWED = {"t1": P, "t2": P, "t3": F, "t4": P, "t5": P}
BASELINE = [
    record("t1", {"correct": P}, {"allowed": P}),
    record("t1", {"correct": P}, {"allowed": P}),
    record("t2", {"correct": P}, {"allowed": P}),
    record("t3", {"correct": F}, {"allowed": F}),
    record("t4", {"correct": P}, {"allowed": P}),
    record("t5", {"correct": P}, {"allowed": P}),
    record("t6", {"correct": F}, {"allowed": P}),
]
CANDIDATE = [
    record("t1", {"correct": P, "polite": P}, {"allowed": P}, version="v2", rubric_version="4"),
    record("t2", {"correct": F}, {"allowed": P}, version="v2", rubric_version="4"),
    record("t3", {"correct": P}, {"allowed": F}, version="v2", rubric_version="4"),
    record("t4", {"correct": P}, {"allowed": P}, version="v2", rubric_version="4"),
    record("t5", {"correct": E}, {"allowed": P}, version="v2", rubric_version="4"),
    record("t7", {"correct": P}, {"allowed": P}, version="v2", rubric_version="4"),
]


def records(data: list[dict[str, Any]]) -> list[VerdictRecord]:
    return [validate(VerdictRecord, d) for d in data]


def test_figures_of_the_small_case() -> None:
    report = diff_verdicts(records(BASELINE), records(CANDIDATE))
    assert report.cases.to_json() == {
        "baseline": 6,
        "candidate": 6,
        "paired": 5,
        "only_baseline": 1,
        "only_candidate": 1,
    }
    rows = {(r.kind, r.name): r for r in report.rows}
    assert list(rows) == [
        (Kind.CHECK, "allowed"),
        (Kind.CRITERION, "correct"),
        (Kind.CRITERION, "polite"),
    ]

    correct = rows[(Kind.CRITERION, "correct")]
    assert (correct.paired, correct.unchanged) == (5, 2)
    assert (correct.pass_to_fail, correct.fail_to_pass) == (1, 1)
    assert correct.other_changes == {"PASS->ERROR": 1}
    assert (correct.only_baseline, correct.only_candidate) == (1, 1)
    base, cand = correct.baseline, correct.candidate
    assert (base.tally.passes, base.tally.fails, base.tally.errors) == (4, 1, 0)
    assert (cand.tally.passes, cand.tally.fails, cand.tally.errors) == (3, 1, 1)
    assert base.pass_rate == pytest.approx(0.8)
    assert cand.pass_rate == pytest.approx(0.75)
    assert correct.pass_rate_change == pytest.approx(-0.05)
    assert base.interval is not None
    assert cand.interval is not None
    assert (base.interval.low, base.interval.high) == pytest.approx((0.375535, 0.963776), abs=1e-6)
    assert (cand.interval.low, cand.interval.high) == pytest.approx((0.300642, 0.954413), abs=1e-6)

    allowed = rows[(Kind.CHECK, "allowed")]
    assert (allowed.paired, allowed.unchanged, allowed.pass_to_fail, allowed.fail_to_pass) == (
        5,
        5,
        0,
        0,
    )
    assert allowed.baseline.pass_rate == allowed.candidate.pass_rate == pytest.approx(0.8)
    assert (allowed.only_baseline, allowed.only_candidate) == (1, 1)  # t6, t7

    polite = rows[(Kind.CRITERION, "polite")]
    assert (polite.paired, polite.only_baseline, polite.only_candidate) == (0, 0, 1)
    assert polite.baseline.pass_rate is None
    assert polite.pass_rate_change is None

    changed = {p.field: (p.baseline, p.candidate) for p in report.changed_provenance}
    assert changed == {
        "rubric_version": (("3",), ("4",)),
        "judge_model_version": (("v1",), ("v2",)),
    }
    assert report.warnings == ()


def test_error_and_skipped_transitions_are_counted_apart() -> None:
    before = [record(f"t{n}", {"c": o}) for n, o in enumerate([P, F, E, S, S, E])]
    after = [record(f"t{n}", {"c": o}, version="v2") for n, o in enumerate([E, S, P, F, S, E])]
    (row,) = diff_verdicts(records(before), records(after)).rows
    assert (row.pass_to_fail, row.fail_to_pass, row.unchanged) == (0, 0, 2)
    assert row.other_changes == {
        "ERROR->PASS": 1,
        "FAIL->SKIPPED": 1,
        "PASS->ERROR": 1,
        "SKIPPED->FAIL": 1,
    }
    # Over the pairs: baseline PASS 1, FAIL 1 (rate 0.5); candidate PASS 1, FAIL 1 (0.5).
    assert row.baseline.pass_rate == row.candidate.pass_rate == 0.5


def test_a_second_record_of_a_case_is_left_out_with_a_warning() -> None:
    baseline = [record("t1", {"c": P}), record("t1", {"c": F}, key="rerun")]
    report = diff_verdicts(records(baseline), records([record("t1", {"c": P}, version="v2")]))
    (row,) = report.rows
    assert (row.paired, row.unchanged) == (1, 1)
    assert report.warnings == (
        "baseline: 1 further verdict(s) of cases already in the file were left out "
        "(the first record of each (trace, rubric) is compared)",
    )


def write(path: Path, data: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in data), encoding="utf-8")
    return path


def test_command_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write(tmp_path / "base.jsonl", BASELINE)
    cand = write(tmp_path / "cand.jsonl", CANDIDATE)
    code = main(["diff", "--baseline", str(base), "--candidate", str(cand), "--json"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    document = json.loads(out)
    assert (document["baseline"], document["candidate"]) == (str(base), str(cand))
    assert document["confidence"] == 0.95
    correct = next(r for r in document["rows"] if r["name"] == "correct")
    assert correct == {
        "rubric": "refund",
        "kind": "criterion",
        "name": "correct",
        "paired": 5,
        "baseline": {
            "pass": 4,
            "fail": 1,
            "error": 0,
            "skipped": 0,
            "pass_rate": pytest.approx(0.8),
            "interval": pytest.approx([0.375535, 0.963776], abs=1e-6),
        },
        "candidate": {
            "pass": 3,
            "fail": 1,
            "error": 1,
            "skipped": 0,
            "pass_rate": pytest.approx(0.75),
            "interval": pytest.approx([0.300642, 0.954413], abs=1e-6),
        },
        "pass_rate_change": pytest.approx(-0.05),
        "pass_to_fail": 1,
        "fail_to_pass": 1,
        "other_changes": {"PASS->ERROR": 1},
        "unchanged": 2,
        "only_baseline": 1,
        "only_candidate": 1,
    }
    changed = [p for p in document["provenance"] if p["changed"]]
    assert [(p["field"], p["baseline"], p["candidate"]) for p in changed] == [
        ("rubric_version", ["3"], ["4"]),
        ("judge_model_version", ["v1"], ["v2"]),
    ]


def test_command_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write(tmp_path / "base.jsonl", BASELINE)
    cand = write(tmp_path / "cand.jsonl", CANDIDATE)
    assert main(["diff", "--baseline", str(base), "--candidate", str(cand)]) == 0
    out = capsys.readouterr().out
    assert "cases: 5 in both files, 1 only in the baseline, 1 only in the candidate" in out
    line = next(line for line in out.splitlines() if "correct" in line)
    for cell in ("0.800 [0.376, 0.964]", "0.750 [0.301, 0.954]", "-0.050", "PASS->ERROR 1"):
        assert cell in line
    assert "changed: refund judge_model_version: v1 -> v2" in out
    assert "unchanged: agent_version, judge_model, rubric_hash" in out
    assert "criteria: 2 flips, 1 other changes" in out
    assert "checks: 0 flips, 0 other changes" in out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param("", "base.jsonl: no verdict records", id="empty"),
        pytest.param("{not json\n", "base.jsonl:1: not valid JSON", id="not-json"),
        pytest.param('{"trace_id": "t1"}\n', "base.jsonl:1: field 'rubric_id'", id="missing-field"),
    ],
)
def test_bad_input_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    base = tmp_path / "base.jsonl"
    base.write_text(content)
    cand = write(tmp_path / "cand.jsonl", CANDIDATE)
    code = main(["diff", "--baseline", str(base), "--candidate", str(cand)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("sidecar diff: ")
    assert message in err


def test_missing_file_and_bad_confidence_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cand = write(tmp_path / "cand.jsonl", CANDIDATE)
    assert main(["diff", "--baseline", str(tmp_path / "nope"), "--candidate", str(cand)]) == 2
    assert "no such file" in capsys.readouterr().err
    args = ["diff", "--baseline", str(cand), "--candidate", str(cand), "--confidence", "1.5"]
    assert main(args) == 2
    assert "confidence must be between 0 and 1" in capsys.readouterr().err
