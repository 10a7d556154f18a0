"""sidecar calibrate: human reference labels, the report, rubric write-back, the command.

Reading the input files is tested in test_calibrate_inputs.py.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from sklearn.metrics import cohen_kappa_score

from sidecar import cli
from sidecar.calibrate.agreement import (
    Item,
    Part,
    Resolution,
    build_items,
    calibrate,
    inter_rater,
    resolve,
    split_part,
)
from sidecar.calibrate.report import calibration_markdown, confusion_png, image_name
from sidecar.calibrate.rubric_write import update_rubric_text, write_back
from sidecar.errors import RubricError
from sidecar.evaluate.rubric import parse_rubric
from sidecar.model import Outcome
from sidecar.wire.labels import HumanLabel
from sidecar.wire.verdicts import CriterionRecord, VerdictRecord

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
P, F, E, S = Outcome.PASS, Outcome.FAIL, Outcome.ERROR, Outcome.SKIPPED
ISSUE_KEYS = {
    "criterion",
    "n",
    "kappa",
    "agreement",
    "balanced_accuracy",
    "balanced_f1",
    "tp",
    "fp",
    "fn",
    "tn",
    "errors",
    "fit_to_gate",
    "inter_rater_kappa",
}


def label(case: str, rater: str, value: Outcome, criterion: str = "c") -> HumanLabel:
    return HumanLabel(case_id=case, criterion=criterion, rater=rater, label=value)


def R(name: str, outcome: Outcome) -> CriterionRecord:
    return CriterionRecord(name=name, outcome=outcome)


def verdict(case: str, outcome: Outcome, criterion: str = "c", judge: str = "j") -> VerdictRecord:
    return VerdictRecord(
        id=f"{case}/{judge}",
        trace_id=case,
        rubric_id="r",
        rubric_version="1",
        judge_model=judge,
        criteria=(R(criterion, outcome),),
    )


def jsonl(rows: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(row) + "\n" for row in rows]


# -- reference labels and inter-rater agreement ------------------------------


@pytest.mark.parametrize(
    ("labels", "adjudicated", "reference", "resolution"),
    [
        pytest.param({"a": P}, None, P, Resolution.SINGLE, id="single-rater"),
        pytest.param({"a": F, "b": F}, None, F, Resolution.UNANIMOUS, id="unanimous"),
        pytest.param({"a": P, "b": F}, F, F, Resolution.ADJUDICATED, id="adjudicated"),
        pytest.param({"a": P, "b": P}, F, F, Resolution.ADJUDICATED, id="adjudication-wins"),
        pytest.param({"a": P, "b": F, "c": P}, None, P, Resolution.MAJORITY, id="majority"),
        pytest.param({"a": P, "b": F}, None, None, Resolution.TIE, id="tie"),
        pytest.param({}, P, P, Resolution.ADJUDICATED, id="adjudication-only"),
    ],
)
def test_resolve(
    labels: dict[str, Outcome],
    adjudicated: Outcome | None,
    reference: Outcome | None,
    resolution: Resolution,
) -> None:
    assert resolve(labels, adjudicated) == (reference, resolution)


def _items(table: dict[str, dict[str, Outcome]]) -> list[Item]:
    return build_items(
        label(case, rater, value) for case, by in table.items() for rater, value in by.items()
    )


def test_inter_rater_two_raters_is_cohen_kappa() -> None:
    a = [P, P, F, F, P, F, P, P]
    b = [P, F, F, F, P, P, P, P]
    items = _items(
        {f"c{i}": {"ann": x, "bob": y} for i, (x, y) in enumerate(zip(a, b, strict=True))}
    )
    got = inter_rater(items)
    assert got.kappa == pytest.approx(cohen_kappa_score(a, b))
    assert (got.raters, got.items, got.pairs, got.note) == (2, 8, 1, None)


def test_inter_rater_three_raters_is_mean_of_pairs() -> None:
    a = [P, P, F, F, P, F, P, P, F, P]
    b = [P, F, F, F, P, P, P, P, F, F]
    c = [P, P, F, P, P, F, F, P, F, P]
    items = _items(
        {
            f"c{i}": {"ann": x, "bob": y, "cy": z}
            for i, (x, y, z) in enumerate(zip(a, b, c, strict=True))
        }
    )
    expected = (cohen_kappa_score(a, b) + cohen_kappa_score(a, c) + cohen_kappa_score(b, c)) / 3
    got = inter_rater(items)
    assert got.kappa == pytest.approx(expected)
    assert got.pairs == 3


@pytest.mark.parametrize(
    ("table", "note"),
    [
        pytest.param({"x": {"ann": P}, "y": {"ann": F}}, "fewer than two raters", id="one-rater"),
        pytest.param({"x": {"ann": P}, "y": {"bob": F}}, "share no item", id="no-overlap"),
        pytest.param(
            {"x": {"ann": P, "bob": P}, "y": {"ann": P, "bob": P}}, "one class only", id="one-class"
        ),
        pytest.param({}, "fewer than two raters", id="no-labels"),
    ],
)
def test_inter_rater_degenerate(table: dict[str, dict[str, Outcome]], note: str) -> None:
    got = inter_rater(_items(table))
    assert got.kappa is None
    assert got.note is not None
    assert note in got.note


# -- the report --------------------------------------------------------------


def test_calibrate_counts_errors_and_unresolved() -> None:
    labels = [
        label("a", "x", P),
        label("a", "y", P),
        label("b", "x", F),
        label("b", "y", F),
        label("c", "x", P),
        label("c", "y", F),  # tie, adjudicated below
        label("d", "x", P),
        label("d", "y", F),  # tie, not adjudicated: no reference
        label("e", "x", P),
        label("e", "y", P),  # judge ERROR
        label("f", "x", F),
        label("f", "y", F),  # judge SKIPPED
        label("g", "x", P),
        label("g", "y", P),  # no verdict
    ]
    verdicts = [
        verdict("a", P),
        verdict("b", F),
        verdict("c", P),
        verdict("d", P),
        verdict("e", E),
        verdict("f", S),
        verdict("a", F),  # a duplicate record: ignored, the first counts
        verdict("z", P, criterion="other"),
    ]
    report = calibrate(labels, verdicts, {("c", "c"): F})
    (row,) = report.rows
    c = row.confusion
    assert (c.tp, c.fp, c.fn, c.tn) == (1, 1, 0, 1)
    assert (row.items, row.errors, row.skipped, row.missing_verdict, row.no_reference) == (
        7,
        1,
        1,
        1,
        1,
    )
    assert [(d.case_id, d.resolution) for d in row.unresolved] == [("d", Resolution.TIE)]
    assert report.duplicates == 1
    assert any("judged but never labelled: other" in w for w in report.warnings)
    assert any("tuning and reporting use the same cases" in w for w in report.warnings)
    data = row.to_json()
    assert set(data) >= ISSUE_KEYS
    assert data["errors"] == 1
    assert data["false_pass"] == 1


@pytest.mark.parametrize(
    ("labels", "verdicts", "note"),
    [
        pytest.param([label("a", "x", P)], [verdict("a", P)], "a single item", id="single-item"),
        pytest.param(
            [label(k, "x", P) for k in "abc"],
            [verdict(k, P) for k in "abc"],
            "kappa is undefined",
            id="all-pass",
        ),
        pytest.param(
            [label("a", "x", P)], [verdict("a", E)], "no items with both", id="only-errors"
        ),
    ],
)
def test_calibrate_degenerate_rows_have_no_nan(
    labels: list[HumanLabel], verdicts: list[VerdictRecord], note: str
) -> None:
    report = calibrate(labels, verdicts)
    (row,) = report.rows
    assert not row.fit_to_gate
    assert any(note in n for n in row.notes)
    text = json.dumps(report.to_json(), allow_nan=False)  # raises on NaN or infinity
    for value in json.loads(text)["criteria"][0].values():
        assert not (isinstance(value, float) and math.isnan(value))


def test_fit_to_gate_uses_threshold() -> None:
    # kappa 0.5 exactly: fit at 0.5, not at 0.6.
    labels = [label(f"c{i}", "x", v) for i, v in enumerate([P, P, P, P, F, F, F, F])]
    verdicts = [verdict(f"c{i}", v) for i, v in enumerate([P, P, P, F, F, F, F, P])]
    assert calibrate(labels, verdicts, kappa_threshold=0.5).rows[0].fit_to_gate
    assert not calibrate(labels, verdicts, kappa_threshold=0.6).rows[0].fit_to_gate


def test_one_row_per_judge_model() -> None:
    labels = [label(f"c{i}", "x", v) for i, v in enumerate([P, F, P, F])]
    verdicts = [verdict(f"c{i}", v, judge="good") for i, v in enumerate([P, F, P, F])]
    verdicts += [verdict(f"c{i}", v, judge="bad") for i, v in enumerate([F, P, F, P])]
    rows = {row.judge_model: row for row in calibrate(labels, verdicts).rows}
    assert rows["good"].kappa == 1.0
    assert rows["bad"].kappa == -1.0


def test_split_is_deterministic_and_reported() -> None:
    cases = [f"case-{i}" for i in range(400)]
    parts = [split_part(c) for c in cases]
    assert parts == [split_part(c) for c in cases]
    held = parts.count(Part.HELD_OUT)
    assert 150 < held < 250  # about half
    assert split_part("case-0") == split_part("case-0", 0.5)
    assert all(split_part(c, 0.999999) == Part.HELD_OUT for c in cases[:50])

    labels = [label(c, "x", P if i % 3 else F) for i, c in enumerate(cases)]
    verdicts = [verdict(c, P if i % 4 else F) for i, c in enumerate(cases)]
    report = calibrate(labels, verdicts, split=True)
    assert [row.part for row in report.rows] == [Part.CALIBRATION, Part.HELD_OUT]
    assert sum(row.items for row in report.rows) == 400
    assert report.rows[1].items == held
    assert report.decisive_rows() == [report.rows[1]]
    assert not any("same cases" in w for w in report.warnings)


def test_labels_matching_no_verdict_are_warned_about() -> None:
    # Labels keyed by something other than the verdicts' trace ids give n=0 everywhere.
    labels = [label(case, "r1", P) for case in ("a", "b", "x", "y")]
    report = calibrate(labels, [verdict("a", P), verdict("b", F)])
    (warning,) = [w for w in report.warnings if "match no verdict record" in w]
    assert warning.startswith("2 of 4 labelled case(s) match no verdict record (first: 'x')")
    matched = calibrate(labels[:2], [verdict("a", P), verdict("b", F)])
    assert not any("match no verdict record" in w for w in matched.warnings)


def test_split_warns_when_held_out_part_is_empty() -> None:
    report = calibrate([label("a", "x", P)], [verdict("a", P)], split=True, held_out_share=1e-9)
    assert any("held-out part is empty" in w for w in report.warnings)


def _llmbar(name: str) -> tuple[list[HumanLabel], list[VerdictRecord]]:
    path = DATA / name
    if not path.is_file():
        pytest.skip(
            f"LLMBar data not present at {path} (shared/data is only in the development workspace)"
        )
    items = json.loads(path.read_text(encoding="utf-8"))
    labels = [
        label(str(i), "expert", P if item["label"] == 1 else F) for i, item in enumerate(items)
    ]
    verdicts = [
        verdict(
            str(i), P if item["results"][0]["swap = False"]["winner"] == "1" else F, judge="gpt-4"
        )
        for i, item in enumerate(items)
    ]
    return labels, verdicts


def test_llmbar_natural_gpt4_without_swap() -> None:
    labels, verdicts = _llmbar("llmbar_natural_gpt4_vanilla_result.json")
    (row,) = calibrate(labels, verdicts).rows
    c = row.confusion
    assert (c.tp, c.fn, c.tn, c.fp) == (40, 2, 55, 3)
    assert row.kappa is not None
    assert round(row.kappa, 4) == 0.8977  # not the 0.268 stored upstream
    assert round(c.balanced_accuracy or 0, 4) == 0.9503
    assert round(c.balanced_f1 or 0, 4) == 0.9501
    assert row.fit_to_gate
    assert row.inter_rater.kappa is None  # one expert label per item


# -- pictures and Markdown ---------------------------------------------------


def test_report_markdown_and_png() -> None:
    labels = [label("a", "x", P), label("a", "y", F), label("b", "x", F), label("b", "y", F)]
    report = calibrate(labels, [verdict("a", P), verdict("b", F)])
    row = report.rows[0]
    png = confusion_png(row)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert confusion_png(row) == png  # same figures, same bytes: safe to commit
    name = image_name(row)
    assert name == "confusion-all-r-j-c.png"
    text = calibration_markdown(
        report, images={0: name}, inputs=[("labels", "l.jsonl")], generated="2025-01-01"
    )
    assert f"]({name})" in text
    assert "| `a` | x: PASS, y: FAIL | tie |" in text
    assert "Warning:" in text


# -- rubric write-back -------------------------------------------------------

RUBRIC = """\
# Refund agent rubric. Owned by the support team.
id: refund-support
version: "3"   # bump on any change
checks:
  - {name: allowed_tools, type: tool_allowlist, tools: [lookup_order]}
judge:
  model: gemini-2.5-flash
  instructions: |
    You grade replies of a refund agent.

  criteria:
    # the amount must match the tool result
    - name: correct_amount
      definition: The amount told equals the tool result.
      pass_example: "refund of $40"
      fail_example: "refund of $45"
    - {name: polite, definition: Polite tone., pass_example: thanks, fail_example: rude, gate: true}
    - name: cites_policy
      definition: Cites the policy.
      pass_example: per policy
      fail_example: none
      gate: true
"""


def _block(criteria: dict[str, Any]) -> dict[str, Any]:
    return {
        "judge_model": "gemini-2.5-flash",
        "rubric_version": "3",
        "date": "2025-01-01",
        "criteria": criteria,
    }


def test_update_rubric_keeps_comments_and_gates_off_unfit() -> None:
    block = _block({"correct_amount": {"kappa": 0.2, "n": 50}, "polite": {"kappa": 0.1, "n": 50}})
    update = update_rubric_text(
        RUBRIC, block, ["correct_amount", "polite", "cites_policy"], Path("r.yaml")
    )
    assert update.comments_kept
    assert update.gated_off == ("correct_amount", "polite", "cites_policy")
    for comment in ("# Refund agent rubric.", "# bump on any change", "# the amount must match"):
        assert comment in update.text
    rubric = parse_rubric(update.text, Path("r.yaml"))
    assert rubric.judge is not None
    assert [c.gate for c in rubric.judge.criteria] == [False, False, False]
    assert rubric.calibration == block
    assert rubric.checks[0].name == "allowed_tools"


@pytest.mark.parametrize(
    ("criterion", "expected"),
    [
        pytest.param(
            "    - name: a\n      definition: d\n      pass_example: p\n      fail_example: f  # keep\n",
            "    - name: a\n      definition: d\n      pass_example: p\n      fail_example: f  # keep\n"
            "      gate: false\n",
            id="after-last-value",
        ),
        pytest.param(
            "    - name: a\n      definition: d\n      pass_example: p\n      fail_example: |\n        f\n",
            "    - gate: false\n      name: a\n      definition: d\n      pass_example: p\n"
            "      fail_example: |\n        f\n",
            id="before-a-block-scalar",
        ),
        pytest.param(
            "    - {name: a, definition: d, pass_example: p, fail_example: f}\n",
            "    - {gate: false, name: a, definition: d, pass_example: p, fail_example: f}\n",
            id="flow-mapping",
        ),
    ],
)
def test_update_rubric_adds_gate_key(criterion: str, expected: str) -> None:
    head = "id: r\nversion: '1'\njudge:\n  model: m\n  instructions: i\n  criteria:\n"
    update = update_rubric_text(head + criterion, _block({}), ["a"], Path("r.yaml"))
    assert update.comments_kept
    assert update.text.startswith(head + expected + "\ncalibration:\n")


def test_update_rubric_replaces_an_earlier_block() -> None:
    first = update_rubric_text(
        RUBRIC, _block({"polite": {"kappa": 0.9, "n": 9}}), [], Path("r.yaml")
    ).text
    second_block = _block({"polite": {"kappa": 0.3, "n": 12}})
    update = update_rubric_text(
        first + "# tail comment\n", second_block, ["polite"], Path("r.yaml")
    )
    assert update.comments_kept
    assert update.text.count("calibration:") == 1
    assert "# tail comment" in update.text
    data = yaml.safe_load(update.text)
    assert data["calibration"] == second_block
    assert [c.get("gate", True) for c in data["judge"]["criteria"]] == [True, False, True]


def test_update_rubric_falls_back_to_pyyaml_dump() -> None:
    flow = json.dumps(yaml.safe_load(RUBRIC))  # JSON is YAML in flow style: no text edit applies
    update = update_rubric_text(flow, _block({}), ["polite"], Path("r.yaml"))
    assert not update.comments_kept
    data = yaml.safe_load(update.text)
    assert list(data) == ["id", "version", "checks", "judge", "calibration"]  # key order kept
    assert data["judge"]["criteria"][1]["gate"] is False


def test_write_back_selects_the_rubric_rows() -> None:
    labels = [label(f"c{i}", "x", v, "correct_amount") for i, v in enumerate([P, F, P, F])]
    labels += [label(f"c{i}", "x", v, "polite") for i, v in enumerate([P, F, P, F])]
    good = [P, F, P, F]
    bad = [F, P, P, F]
    verdicts = [
        VerdictRecord(
            id=f"c{i}",
            trace_id=f"c{i}",
            rubric_id="refund-support",
            rubric_version="3",
            judge_model="gemini-2.5-flash",
            criteria=(R("correct_amount", good[i]), R("polite", bad[i])),
        )
        for i in range(4)
    ]
    report = calibrate(labels, verdicts)
    update = write_back(RUBRIC, report, Path("r.yaml"), dt.date(2025, 6, 1))
    data = yaml.safe_load(update.text)
    assert data["calibration"]["date"] == "2025-06-01"
    assert data["calibration"]["criteria"] == {
        "correct_amount": {"kappa": 1.0, "n": 4, "fit_to_gate": True},
        "polite": {"kappa": 0.0, "n": 4, "fit_to_gate": False},
    }
    assert update.gated_off == ("polite",)
    assert any("without calibration results" in w and "cites_policy" in w for w in update.warnings)

    other = calibrate([label("a", "x", P)], [verdict("a", P)])
    with pytest.raises(RubricError, match="no calibration results for rubric 'refund-support'"):
        write_back(RUBRIC, other, Path("r.yaml"), dt.date(2025, 6, 1))


# -- the command -------------------------------------------------------------


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(jsonl(rows)), encoding="utf-8")
    return path


@pytest.fixture
def inputs(tmp_path: Path) -> tuple[Path, Path]:
    outcomes = [(P, P), (P, P), (F, F), (F, F), (P, F), (F, F), (P, P), (F, P)]
    labels = [
        {"case_id": f"t{i}", "criterion": "correct_amount", "rater": rater, "label": human}
        for i, (human, _) in enumerate(outcomes)
        for rater in ("ann", "bob")
    ]
    verdicts = [
        {
            "id": f"v{i}",
            "trace_id": f"t{i}",
            "rubric_id": "refund-support",
            "rubric_version": "3",
            "judge_model": "gemini-2.5-flash",
            "outcome": "acceptable",
            "criteria": [{"name": "correct_amount", "outcome": judged, "gate": True}],
        }
        for i, (_, judged) in enumerate(outcomes)
    ]
    return _write_jsonl(tmp_path / "labels.jsonl", labels), _write_jsonl(
        tmp_path / "verdicts.jsonl", verdicts
    )


def test_report_without_matplotlib_names_the_extra(
    inputs: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A None entry makes `import matplotlib` fail as it does where the extra is not installed.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    labels, verdicts = inputs
    argv = ["calibrate", "--labels", str(labels), "--verdicts", str(verdicts)]
    assert cli.main([*argv, "--report", str(tmp_path / "rep")]) == 2
    err = capsys.readouterr().err
    assert "pip install 'sidecar-eval[report]'" in err
    assert not (tmp_path / "rep").exists()
    # Without --report nothing needs matplotlib.
    assert cli.main(argv) == 0


def test_command_writes_json_report_and_rubric(
    inputs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    labels, verdicts = inputs
    rubric = tmp_path / "refund.yaml"
    rubric.write_text(RUBRIC, encoding="utf-8")
    out = tmp_path / "report.json"
    code = cli.main(
        [
            "calibrate",
            "--labels",
            str(labels),
            "--verdicts",
            str(verdicts),
            "--json",
            str(out),
            "--report",
            str(tmp_path / "rep"),
            "--write-rubric",
            str(rubric),
            "--kappa-threshold",
            "0.9",
            "--date",
            "2025-02-03",
        ]
    )
    assert code == 0
    captured = capsys.readouterr()
    assert "correct_amount" in captured.out
    assert "gate set to false on: correct_amount" in captured.err
    document = json.loads(out.read_text(encoding="utf-8"))
    (row,) = document["criteria"]
    assert set(row) >= ISSUE_KEYS
    assert (row["tp"], row["fp"], row["fn"], row["tn"]) == (3, 1, 1, 3)
    assert row["kappa"] == pytest.approx(0.5)
    assert row["inter_rater_kappa"] == 1.0
    assert row["fit_to_gate"] is False
    assert document["generated"] == "2025-02-03"
    report_dir = tmp_path / "rep"
    assert (report_dir / "report.md").is_file()
    assert (report_dir / "report.json").read_text(encoding="utf-8") == out.read_text(
        encoding="utf-8"
    )
    assert (
        report_dir / "confusion-all-refund-support-gemini-2.5-flash-correct_amount.png"
    ).is_file()
    written = parse_rubric(rubric.read_text(encoding="utf-8"), rubric)
    assert written.judge is not None
    assert written.judge.criteria[0].gate is False
    assert written.calibration is not None
    assert written.calibration["criteria"]["correct_amount"] == {
        "kappa": 0.5,
        "n": 8,
        "fit_to_gate": False,
    }


def test_command_json_on_stdout(
    inputs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    labels, verdicts = inputs
    code = cli.main(
        [
            "calibrate",
            "--labels",
            str(labels),
            "--verdicts",
            str(verdicts),
            "--json",
            "-",
            "--split",
        ]
    )
    assert code == 0
    document = json.loads(capsys.readouterr().out)
    assert document["split"] is True
    assert {row["part"] for row in document["criteria"]} <= {"calibration", "held_out"}


@pytest.mark.parametrize(
    ("labels_text", "extra", "message"),
    [
        pytest.param(
            '{"case_id": "t0", "criterion": "c", "rater": "a", "label": "PASS"}\n{oops\n',
            [],
            "labels.jsonl:2: not valid JSON",
            id="bad-json-line",
        ),
        pytest.param("", [], "no labels", id="empty-labels"),
        pytest.param(None, [], "no such file", id="missing-file"),
        pytest.param(
            '{"case_id": "t0", "criterion": "c", "rater": "a", "label": "PASS"}\n',
            ["--kappa-threshold", "2"],
            "kappa threshold must be between -1 and 1",
            id="bad-threshold",
        ),
    ],
)
def test_command_usage_errors(
    inputs: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    labels_text: str | None,
    extra: list[str],
    message: str,
) -> None:
    _, verdicts = inputs
    labels = tmp_path / "labels.jsonl"
    if labels_text is None:
        labels.unlink()
    else:
        labels.write_text(labels_text, encoding="utf-8")
    code = cli.main(["calibrate", "--labels", str(labels), "--verdicts", str(verdicts), *extra])
    assert code == 2
    assert message in capsys.readouterr().err
