"""``sidecar canary`` and :mod:`sidecar.drift.canary_set`: a labelled set re-judged now, against the local judge.

The canary set: ten refund traces recorded with the OpenTelemetry SDK. Orders
O1..O6 are answered with the right amount, O7..O10 with a wrong one
($999.95). One person labelled every trace; they failed O6 as well (the judge
passes it), so the judge is good but not perfect.

The judge canary_server answers like a judge: ``correct_amount`` FAIL when the answer
says $999.95, else PASS; ``polite`` always PASS. After the "drift" it passes
everything. Figures, worked by hand (human reference in rows, judge in columns):

good judge, correct_amount: O1-O5 PASS/PASS (tp 5), O6 FAIL/PASS (fp 1),
    O7-O10 FAIL/FAIL (tn 4); n 10, agreement 9/10 = 0.9;
    chance = (5 human PASS * 6 judge PASS + 5 human FAIL * 4 judge FAIL) / 100 = 0.5;
    kappa = (0.9 - 0.5) / (1 - 0.5) = 0.8 -> fit to gate (>= 0.4)
good judge, polite (labelled PASS on O1-O4 only, advisory): n 4, agreement 1.0, kappa
    undefined (both sides used PASS only) -> null with a note; advisory, so no failure
drifted judge, correct_amount: tp 5, fp 5, tn 0; agreement 0.5;
    chance = (5 * 10 + 5 * 0) / 100 = 0.5; kappa = 0 -> below 0.4: exit 1
    flips against the good run: O7-O10 FAIL -> PASS = 4 of 10 compared
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sidecar.adapters.judge_backends import GeminiBackend
from sidecar.adapters.otel import VerdictSpans, tracer_provider
from sidecar.adapters.prometheus import Metrics
from sidecar.cli import build_parser, call, main
from sidecar.commands import canary as canary_command
from sidecar.drift.canary_set import (
    CANARY,
    canary_cases,
    canary_report,
    judge_canary,
    kappa_threshold,
)
from sidecar.engine.offline import ReplaySummary, collect_traces
from sidecar.evaluate.rubric import parse_rubric
from sidecar.judge.config import JudgeSettings
from sidecar.judge.service import JudgeService
from sidecar.wire import validate
from sidecar.wire.labels import HumanLabel
from tests.canary_fixtures import (
    ORDERS,
    RUBRIC,
    Responder,
    judging,
    labels,
    record_traces,
)
from tests.gemini_server import JudgeServer
from tests.integration.harness import environ_without, run_python


@pytest.fixture
def canary_set(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    line, ids = record_traces()
    traces = tmp_path / "canary.jsonl"
    traces.write_text(line, encoding="utf-8")
    label_file = tmp_path / "labels.jsonl"
    label_file.write_text("".join(json.dumps(r) + "\n" for r in labels(ids)), encoding="utf-8")
    return traces, label_file, ids


# -- the core, with the real google-genai client ------------------------------------------


def gemini_service(canary_server: JudgeServer, **settings: Any) -> JudgeService:
    return JudgeService(
        GeminiBackend(base_url=canary_server.base_url, api_key="test-key"),
        JudgeSettings(max_attempts=1, **settings),
        Metrics(),
    )


async def test_the_canary_judges_every_trace_afresh_and_reports_the_figures(
    canary_server: JudgeServer, canary_set: tuple[Path, Path, dict[str, str]]
) -> None:
    traces_file, _, ids = canary_set
    rubric = parse_rubric(RUBRIC.replace("MODEL", "gemini-2.5-flash"), Path("r.yaml"))
    traces = collect_traces([traces_file], ReplaySummary())
    human = [validate(HumanLabel, row) for row in labels(ids)]
    cases = canary_cases(rubric, traces)
    async with gemini_service(canary_server) as service:
        first = await judge_canary(cases, service)
        again = await judge_canary(cases, service)
    # Routing (applies_to another agent) and sampling (ratio 0) are ignored; the cache is not
    # used: the second run asked the model again.
    assert len(first) == len(again) == 10
    assert len(canary_server.requests) == 20
    assert {v.sample_reason for v in first} == {CANARY}
    assert all(v.judged for v in first)
    assert {v.judge_model_version for v in first} == {"m-001"}

    report = canary_report(rubric, first, human)
    assert report.passed, report.reasons
    correct, polite = report.criteria
    assert (correct.n, correct.agreement, correct.kappa) == (10, 0.9, pytest.approx(0.8))
    assert (correct.confusion.tp, correct.confusion.fp, correct.confusion.tn) == (5, 1, 4)
    assert (correct.errors, correct.flips) == (0, None)
    assert (polite.n, polite.agreement, polite.kappa, polite.gate) == (4, 1.0, None, False)
    assert polite.note == "degenerate: humans and judge gave only PASS; kappa is undefined"
    assert report.to_json() == {
        "rubric": "refund-canary",
        "rubric_version": "2",
        "rubric_hash": rubric.content_hash,
        "judge_model": "gemini-2.5-flash",
        "judge_model_version": "m-001",
        "criteria": [
            {
                "criterion": "correct_amount",
                "n": 10,
                "agreement": 0.9,
                "kappa": pytest.approx(0.8),
                "errors": 0,
                "flips": None,
            },
            {
                "criterion": "polite",
                "n": 4,
                "agreement": 1.0,
                "kappa": None,
                "errors": 0,
                "flips": None,
                "note": "degenerate: humans and judge gave only PASS; kappa is undefined",
            },
        ],
    }


async def test_the_canary_goes_through_the_breaker(
    canary_server: JudgeServer,
    canary_responder: Responder,
    canary_set: tuple[Path, Path, dict[str, str]],
) -> None:
    traces_file, _, _ = canary_set
    canary_responder.current = judging(down=frozenset(ORDERS))
    rubric = parse_rubric(RUBRIC.replace("MODEL", "gemini-2.5-flash"), Path("r.yaml"))
    cases = canary_cases(rubric, collect_traces([traces_file], ReplaySummary()))
    async with gemini_service(canary_server, concurrency=1, breaker_failures=3) as service:
        verdicts = await judge_canary(cases, service)
    # Three failures open the breaker; the other seven never reach the canary_server.
    assert len(canary_server.requests) == 3
    assert {v.judge_error for v in verdicts} == {"judge_unavailable"}
    report = canary_report(rubric, verdicts, [])
    assert (report.errors, report.error_rate) == (20, 1.0)
    assert report.judge_model_version is None
    assert not report.passed


def test_threshold_comes_from_the_rubric_calibration_block() -> None:
    text = RUBRIC.replace("MODEL", "m")
    assert kappa_threshold(parse_rubric(text, Path("r.yaml"))) == 0.4
    calibrated = text + "calibration: {kappa_threshold: 0.6, judge_model: m}\n"
    assert kappa_threshold(parse_rubric(calibrated, Path("r.yaml"))) == 0.6


# -- the command (OpenAI-compatible backend, configured in a settings file) ----------------


@pytest.fixture
def command_files(
    tmp_path: Path, canary_server: JudgeServer, canary_set: tuple[Path, Path, dict[str, str]]
) -> dict[str, Path]:
    traces, label_file, _ = canary_set
    rubric = tmp_path / "rubric.yaml"
    rubric.write_text(RUBRIC.replace("MODEL", "llama3.1"), encoding="utf-8")
    config = tmp_path / "sidecar.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "judge": {
                    "backend": "openai",
                    "openai_base_url": canary_server.openai_base_url,
                    "max_attempts": 1,
                    "requests_per_minute": 6000,
                }
            }
        ),
        encoding="utf-8",
    )
    return {"rubric": rubric, "traces": traces, "labels": label_file, "config": config}


def canary_args(files: dict[str, Path], *extra: str | Path) -> list[str]:
    return [
        "canary",
        "--rubric",
        str(files["rubric"]),
        "--traces",
        str(files["traces"]),
        "--labels",
        str(files["labels"]),
        "--config",
        str(files["config"]),
        *map(str, extra),
    ]


def test_command_passes_then_fails_after_the_judge_drifts(
    tmp_path: Path,
    canary_responder: Responder,
    command_files: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    good = tmp_path / "good.json"
    verdicts = tmp_path / "good-verdicts.jsonl"
    code = main(canary_args(command_files, "--json", good, "--verdicts", verdicts))
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert "canary passed" in out
    summary = json.loads(good.read_text())
    assert list(summary) == [
        "rubric",
        "rubric_version",
        "rubric_hash",
        "judge_model",
        "judge_model_version",
        "criteria",
    ]
    assert summary["judge_model_version"] == "m-001"
    assert [list(c) for c in summary["criteria"]] == [
        ["criterion", "n", "agreement", "kappa", "errors", "flips"],
        ["criterion", "n", "agreement", "kappa", "errors", "flips", "note"],
    ]
    assert summary["criteria"][0]["kappa"] == pytest.approx(0.8)
    assert len(verdicts.read_text().splitlines()) == 10

    canary_responder.current = judging(drifted=True)
    drifted = tmp_path / "drifted.json"
    code = main(canary_args(command_files, "--previous", verdicts, "--json", drifted))
    out, err = capsys.readouterr()
    assert code == 1
    assert "canary failed" in out
    assert "sidecar canary: gated criterion 'correct_amount': kappa 0.000 < 0.4" in err
    correct, polite = json.loads(drifted.read_text())["criteria"]
    assert (correct["n"], correct["agreement"], correct["kappa"]) == (10, 0.5, 0.0)
    assert (correct["flips"], polite["flips"]) == (4, 0)
    assert json.loads(drifted.read_text())["judge_model_version"] == "m-002"


def test_command_fails_on_the_error_rate(
    canary_responder: Responder,
    command_files: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    # O1 cannot be judged: both its criteria are ERROR, 2 of 20 verdicts = 10% > 3%.
    # correct_amount keeps kappa (9 items: tp 4, fp 1, tn 4; agreement 8/9;
    # chance (4*5 + 5*4)/81 = 40/81; kappa (8/9 - 40/81)/(1 - 40/81) = 32/41 = 0.780).
    canary_responder.current = judging(down=frozenset({"O1"}))
    code = main(canary_args(command_files, "--json", "-"))
    out, err = capsys.readouterr()
    assert code == 1
    document = json.loads(out)
    correct = document["criteria"][0]
    assert (correct["n"], correct["errors"]) == (9, 1)
    assert correct["kappa"] == pytest.approx(32 / 41)
    assert "error rate 0.100 (2 ERROR verdicts) > 0.03" in err
    # What made them ERROR is said (an unreachable judge is not a labelling problem).
    (reasons,) = [line for line in err.splitlines() if line.startswith("judge ERROR reasons")]
    assert reasons == "judge ERROR reasons: judge_unavailable 2"
    # A higher maximum lets the same run pass.
    canary_responder.current = judging(down=frozenset({"O1"}))
    assert main(canary_args(command_files, "--max-error-rate", "0.2")) == 0
    capsys.readouterr()


def test_a_stricter_threshold_fails_a_good_judge(
    command_files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(canary_args(command_files, "--kappa-threshold", "0.85")) == 1
    assert "kappa 0.800 < 0.85" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(
            lambda files, tmp: {**files, "labels": _write(tmp / "l.jsonl", '{"case_id": "x"}\n')},
            "l.jsonl:1: field 'criterion'",
            id="bad-label",
        ),
        pytest.param(
            lambda files, tmp: {**files, "labels": _write(tmp / "l.jsonl", "")},
            "l.jsonl: no labels",
            id="no-labels",
        ),
        pytest.param(
            lambda files, tmp: {**files, "traces": tmp / "missing.jsonl"},
            "missing.jsonl: no such trace file",
            id="no-trace-file",
        ),
        pytest.param(
            lambda files, tmp: {
                **files,
                "rubric": _write(tmp / "r.yaml", "id: r\nversion: 1\nchecks: []\n"),
            },
            "has no judge: block",
            id="no-judge",
        ),
    ],
)
def test_bad_input_exits_2(
    tmp_path: Path,
    command_files: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    change: Callable[[dict[str, Path], Path], dict[str, Path]],
    message: str,
) -> None:
    code = main(canary_args(change(command_files, tmp_path)))
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("sidecar canary: ")
    assert message in err


def test_previous_must_be_verdict_records_not_the_summary(
    tmp_path: Path, command_files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    summary = tmp_path / "run.json"
    assert main(canary_args(command_files, "--json", summary)) == 0
    capsys.readouterr()
    assert main(canary_args(command_files, "--previous", summary)) == 2
    assert "flips need the verdict records of that run" in capsys.readouterr().err


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# -- the real command line, Gemini backend from google-genai's environment -------------------


def test_command_line_with_the_gemini_backend(
    canary_server: JudgeServer, canary_set: tuple[Path, Path, dict[str, str]], tmp_path: Path
) -> None:
    traces, label_file, _ = canary_set
    rubric = _write(tmp_path / "rubric.yaml", RUBRIC.replace("MODEL", "gemini-2.5-flash"))
    # The default 60 requests a minute would space the ten calls a second apart.
    config = _write(tmp_path / "sidecar.yaml", "judge: {requests_per_minute: 6000}\n")
    env = environ_without("SIDECAR_", "GOOGLE_")
    env |= {"GOOGLE_API_KEY": "test-key", "GOOGLE_GEMINI_BASE_URL": canary_server.base_url}
    result = run_python(
        *("-m", "sidecar.cli", "canary", "--rubric", str(rubric), "--traces", str(traces)),
        *("--labels", str(label_file), "--config", str(config), "--json", "-"),
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert (document["judge_model"], document["judge_model_version"]) == (
        "gemini-2.5-flash",
        "m-001",
    )
    assert document["criteria"][0]["kappa"] == pytest.approx(0.8)
    assert "canary passed" in result.stderr  # the table goes to stderr when JSON is on stdout
    assert all(r.path.endswith("gemini-2.5-flash:generateContent") for r in canary_server.requests)


def test_canary_records_carry_the_labels_and_feed_sidecar_drift(
    tmp_path: Path,
    canary_responder: Responder,
    command_files: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    records, verdicts = tmp_path / "canary-records.jsonl", tmp_path / "verdicts.jsonl"
    code = main(canary_args(command_files, "--records", records, "--verdicts", verdicts))
    assert code == 0, capsys.readouterr()
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(lines) == 10
    for line in lines:
        assert line["canary"] is True
        assert line["sample_reason"] == CANARY
        assert line["decided_at"].endswith("Z")
        assert set(line["labels"]) <= {"correct_amount", "polite"}
        assert set(line["labels"].values()) <= {"PASS", "FAIL"}
    # Human labels as the fixture gave them: O6 and O7..O10 failed on correct_amount.
    failed = sorted(
        line["trace_id"] for line in lines if line["labels"]["correct_amount"] == "FAIL"
    )
    assert len(failed) == 5
    capsys.readouterr()
    code = main(["drift", "--verdicts", str(verdicts), "--canary", str(records), "--json", "-"])
    out, err = capsys.readouterr()
    assert code == 0, err
    document = json.loads(out)
    assert document["alarms"] == []
    assert document["records"] == 20
    # Canary records given as verdicts are refused, naming the option to use.
    code = main(["drift", "--verdicts", str(records)])
    assert code == 2
    assert "is a canary record; give it with --canary" in capsys.readouterr().err


def test_command_records_a_span_per_case_over_its_canary_judge_calls(
    command_files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    exporter = InMemorySpanExporter()
    spans = VerdictSpans(tracer_provider(exporter, batch=False))
    args = build_parser().parse_args(canary_args(command_files))
    assert call(args, lambda: canary_command.run(args, spans=spans)) == 0
    finished = list(exporter.get_finished_spans())
    cases = [s for s in finished if s.name == "canary refund-canary"]
    chats = [s for s in finished if s.name == "chat llama3.1"]
    assert (len(cases), len(chats), len(finished)) == (10, 10, 20)
    assert {s.parent for s in cases} == {None}
    case_ids = {s.context.span_id for s in cases if s.context}
    assert {c.parent.span_id for c in chats if c.parent} == case_ids
    assert {dict(c.attributes or {})["sidecar.judge.purpose"] for c in chats} == {"canary"}
    traced = {dict(s.attributes or {})["eval.canary.trace_id"] for s in cases}
    assert len(traced) == 10
    text = json.dumps([dict(s.attributes or {}) for s in finished])
    for content in ("Please refund order", "Sorry about that", "999.95", "40.25"):
        assert content not in text
