"""``sidecar demo`` without judge credentials: the message, the table, the files it writes.

The bundled traces are described in ``sidecar/demo_data/expected.json``
(scenario, service, records, the checks each one is built to fail); the
outcomes expected here follow from that and the gate flags of the bundled
rubrics.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sidecar.cli import main
from sidecar.commands._io import invocation
from sidecar.commands.demo import demo_data
from sidecar.evaluate.rubric import Rubric, load_rubrics
from sidecar.ingest.decode import decode
from sidecar.model import Span
from tests.judge_fixtures import clear_judge_credentials

DEMO_TRACES, DEMO_RUBRICS = demo_data()
EXPECTED: dict[str, dict[str, Any]] = json.loads(
    (DEMO_TRACES.parent / "expected.json").read_text(encoding="utf-8")
)
RUBRICS = load_rubrics(DEMO_RUBRICS)

# What makes rich treat a pipe as a terminal.
UNSET = ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE")


@dataclass(frozen=True)
class DemoRun:
    code: int
    stdout: str
    stderr: str
    out: Path


def run_demo(out: Path) -> DemoRun:
    stdout, stderr = io.StringIO(), io.StringIO()
    # Module-scoped (the demo runs once per module), so not the no_judge_credentials fixture.
    with pytest.MonkeyPatch.context() as mp:
        clear_judge_credentials(mp)
        for name in UNSET:
            mp.delenv(name, raising=False)
        with redirect_stdout(stdout), redirect_stderr(stderr):
            code = main(["demo", "--out", str(out), "--metrics-port", "0"])
    return DemoRun(code, stdout.getvalue(), stderr.getvalue(), out)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    # Run twice into the same folder: the second run replaces, never appends.
    out = tmp_path_factory.mktemp("demo") / "sidecar-demo-out"
    run_demo(out)
    return run_demo(out)


def rubric_for(service: str) -> Rubric:
    (rubric,) = [r for r in RUBRICS if r.applies_to.get("service.name") == service]
    return rubric


def expected_outcome(trace_id: str) -> str:
    rubric = rubric_for(EXPECTED[trace_id]["service"])
    gates = {c.name: c.gate for c in rubric.checks}
    failing = EXPECTED[trace_id]["failing_checks"]
    return "unacceptable" if any(gates[name] for name in failing) else "acceptable"


def demo_spans() -> Iterator[list[Span]]:
    for line in DEMO_TRACES.read_bytes().splitlines():
        if line.strip():
            yield decode(line)


def roots() -> dict[str, str]:
    """Root span id per demo trace: the span whose parent is not in the trace."""
    spans: dict[str, list[Span]] = defaultdict(list)
    for batch in demo_spans():
        for span in batch:
            spans[span.trace_id].append(span)
    found = {}
    for trace_id, members in spans.items():
        ids = {s.span_id for s in members}
        (root,) = [s for s in members if s.parent_span_id not in ids]
        found[trace_id] = root.span_id
    return found


def verdict_records(run: DemoRun) -> list[dict[str, Any]]:
    text = (run.out / "verdicts.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


# --- the data the demo ships ------------------------------------------------------------


def test_expected_json_describes_every_bundled_trace() -> None:
    records: dict[str, int] = defaultdict(int)
    for batch in demo_spans():
        (trace_id,) = {s.trace_id for s in batch}
        records[trace_id] += 1
    assert dict(records) == {tid: e["records"] for tid, e in EXPECTED.items()}
    for entry in EXPECTED.values():
        names = {c.name for c in rubric_for(entry["service"]).checks}
        assert set(entry["failing_checks"]) <= names, entry["scenario"]


# --- the run ----------------------------------------------------------------------------


def test_demo_runs_without_credentials_and_says_so_once(demo: DemoRun) -> None:
    assert demo.code == 0
    lines = demo.stdout.splitlines()
    said = [line for line in lines if line.startswith("judge did not run")]
    assert len(said) == 1
    assert said[0].startswith("judge did not run: no judge credentials (set GOOGLE_API_KEY")
    assert said[0].endswith("Criteria are SKIPPED; deterministic checks ran on every trace.")
    # No address is printed for a metrics server that is gone when the command ends.
    assert not any(line.startswith("metrics: http://") for line in lines)
    assert "metrics were served during the run only; add --serve to keep /metrics up" in lines
    assert "13 traces, 86 spans -> 13 verdicts: acceptable 6, unacceptable 7" in lines
    assert f"verdict spans (OTLP/JSON lines): {demo.out / 'verdict-spans.jsonl'}" in lines


def _table_rows(stdout: str) -> dict[str, str]:
    return {tid: line for tid in EXPECTED for line in stdout.splitlines() if tid[:8] in line}


def test_table_has_one_line_per_trace_within_120_columns(demo: DemoRun) -> None:
    lines = demo.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "sidecar demo: verdicts" in line)
    end = next(i for i, line in enumerate(lines) if line.startswith("13 traces"))
    table = lines[start:end]
    assert max(len(line) for line in table) <= 120
    header = next(line for line in table if "outcome" in line)
    assert header.split() == ["trace", "agent", "rubric", "outcome", "first", "failed", "check"]
    assert any("criteria: all SKIPPED (judge did not run)" in line for line in table)
    rows = _table_rows(demo.stdout)
    assert len(rows) == len(EXPECTED)
    for trace_id, row in rows.items():
        cells = row.split()
        assert cells[0] == trace_id[:8]
        assert cells[2] == rubric_for(EXPECTED[trace_id]["service"]).id
        assert cells[3] == expected_outcome(trace_id)
        failing = EXPECTED[trace_id]["failing_checks"]
        assert cells[4].rstrip(":") == (failing[0] if failing else "-"), trace_id


def test_table_marks_advisory_failures_and_shortens_details(demo: DemoRun) -> None:
    rows = _table_rows(demo.stdout)
    slow = next(t for t, e in EXPECTED.items() if e["scenario"] == "genai-refund-slow")
    assert "fast_enough (no gate): latency" in rows[slow]
    for row in rows.values():
        problem = row.split(maxsplit=4)[4].strip()
        assert len(problem) <= 60


def test_verdict_records_skip_every_criterion(demo: DemoRun) -> None:
    records = verdict_records(demo)
    assert sorted(r["trace_id"] for r in records) == sorted(EXPECTED)
    for record in records:
        entry = EXPECTED[record["trace_id"]]
        rubric = rubric_for(entry["service"])
        assert record["rubric_id"] == rubric.id
        assert record["outcome"] == expected_outcome(record["trace_id"]), entry["scenario"]
        failed = [c["name"] for c in record["checks"] if c["outcome"] == "FAIL"]
        assert failed == entry["failing_checks"], entry["scenario"]
        assert record["judged"] is False
        assert record["sample_reason"] == "judge_disabled"
        assert rubric.judge is not None
        assert [c["name"] for c in record["criteria"]] == [c.name for c in rubric.judge.criteria]
        assert {c["outcome"] for c in record["criteria"]} == {"SKIPPED"}


def test_verdict_spans_are_children_of_each_evaluated_root(demo: DemoRun) -> None:
    lines = (demo.out / "verdict-spans.jsonl").read_bytes().splitlines()
    assert len(lines) == len(EXPECTED)
    records = {r["trace_id"]: r for r in verdict_records(demo)}
    root_of = roots()
    for line in lines:
        (span,) = decode(line)
        record = records[span.trace_id]
        assert span.name == f"evaluate {record['rubric_id']}"
        assert span.parent_span_id == root_of[span.trace_id] == record["root_span_id"]
        assert span.attributes["eval.outcome"] == record["outcome"]
        assert span.attributes["eval.judged"] is False
        # One event per check; criteria that were not judged have none.
        results = [e for e in span.events if e.name == "gen_ai.evaluation.result"]
        assert [e.attributes["gen_ai.evaluation.name"] for e in results] == [
            c["name"] for c in record["checks"]
        ]
        # The link to the root is not part of the decoded Span; read it from the JSON.
        (raw,) = json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"]
        assert [link["spanId"] for link in raw["links"]] == [root_of[span.trace_id]]


def test_verdict_spans_file_replays_cleanly(
    demo: DemoRun, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["replay", str(demo.out / "verdict-spans.jsonl"), "--rubrics", str(DEMO_RUBRICS)])
    out, err = capsys.readouterr()
    # The verdict spans belong to no agent, so no rubric applies; all decode.
    assert (code, out) == (0, "")
    assert "13 records, 13 spans, 13 traces, 0 verdicts" in err
    assert "undecodable" not in err


def test_the_replay_hint_runs_as_printed(demo: DemoRun, tmp_path: Path) -> None:
    hint = next(line for line in demo.stdout.splitlines() if line.startswith("replay them"))
    command = hint.removeprefix("replay them yourself: ")
    done = subprocess.run(
        command, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    # Exit 1: some demo traces fail their checks, as they are meant to.
    assert done.returncode == 1, done.stderr
    assert "13 traces, 13 verdicts (acceptable 6, unacceptable 7)" in done.stderr


@pytest.mark.parametrize(
    ("argv0", "on_path", "expected"),
    [
        ("{bin}/sidecar", "{bin}/sidecar", "sidecar"),
        ("{bin}/sidecar", None, "{bin}/sidecar"),
        ("{bin}/sidecar", "/elsewhere/sidecar", "{bin}/sidecar"),
        ("/x/sidecar/__main__.py", None, "{python} -m sidecar"),
    ],
)
def test_invocation_is_a_command_that_works_where_it_ran(
    tmp_path: Path, argv0: str, on_path: str | None, expected: str
) -> None:
    (tmp_path / "sidecar").write_text("#!/bin/sh\n", encoding="utf-8")
    fill = {"bin": str(tmp_path.resolve()), "python": sys.executable}
    found = on_path.format(**fill) if on_path else ""
    assert invocation(argv0.format(**fill), found) == expected.format(**fill)
