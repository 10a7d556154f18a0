"""google-adk 2.13 live, content as events: ``EVENT_ONLY`` gives the verdicts ``SPAN_ONLY`` gives.

In ``EVENT_ONLY`` ADK's spans carry no messages, tool arguments or results;
the content is on ``gen_ai.client.inference.operation.details`` log records
(OTLP logs) with the trace and span id of their ``generate_content`` span. The
sidecar joins them to their trace (``Assembler.add_logs``, ``sidecar.ingest.events``)
and must then read the same transcript and give the same check verdicts as
from a ``SPAN_ONLY`` run of the same scenario, through the pipeline and
through ``sidecar replay`` with trace and log files mixed in one call.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sidecar.evaluate.checks import run_checks
from sidecar.evaluate.rubric import load_rubrics, route
from sidecar.evaluate.transcript import build_transcript
from sidecar.ingest.assemble import Assembler
from sidecar.model import DecideReason, Outcome, Span, Trace, Transcript
from tests.agents.adk_traces import AdkRun, adk2_run
from tests.agents.refund_shop import BY_NAME, SCENARIOS, Scenario
from tests.otlp_files import (
    DEMO_RUBRICS,
    length_prefixed,
    line_trace_id,
    logs_proto,
    records,
    replay,
    traces_proto,
)

pytestmark = pytest.mark.usefixtures("no_judge_credentials")

SCENARIO_IDS = [s.name for s in SCENARIOS]


def _assemble(run: AdkRun, *, logs_first: bool) -> Trace:
    """The run's spans and logs through the assembler, logs before or after the spans."""
    assembler = Assembler(decision_wait=0.0)
    if logs_first:
        assembler.add_logs(run.logs(), 0.0)
        assembler.add(run.spans(), 0.0)
    else:
        assembler.add(run.spans(), 0.0)
        assembler.add_logs(run.logs(), 0.0)
    (trace,) = assembler.due(1.0)
    assert trace.reason is DecideReason.COMPLETE
    return trace


def _content(transcript: Transcript) -> dict[str, Any]:
    return {
        "user_input": transcript.user_input,
        "answer": transcript.answer,
        # Spans record JSON text as the producer wrote it, events as structured values:
        # the same content, spaced differently.
        "tools": [
            (c.name, c.call_id, _parsed(c.arguments), _parsed(c.result))
            for c in transcript.tool_calls
        ],
        "models": transcript.models,
        "tokens": (transcript.input_tokens, transcript.output_tokens),
        "latency_ms": transcript.latency_ms,
    }


def _parsed(text: str | None) -> object:
    return None if text is None else json.loads(text)


def _checks(trace: Trace, spans: list[Span]) -> dict[str, Outcome]:
    (rubric,) = route(load_rubrics(DEMO_RUBRICS), spans[0].resource, {})
    transcript = build_transcript(trace, rubric.untrusted_tools)
    return {r.name: r.outcome for r in run_checks(rubric, transcript)}


def test_event_only_spans_carry_no_content_and_the_logs_do() -> None:
    run = adk2_run(capture="EVENT_ONLY")["adk-refund-ok"]
    spans = run.spans()
    llm = [s for s in spans if s.name.startswith("generate_content")]
    tools = [s for s in spans if s.name.startswith("execute_tool")]
    assert llm
    assert tools
    for span in llm:
        assert "gen_ai.input.messages" not in span.attributes
        assert "gen_ai.output.messages" not in span.attributes
    for span in tools:
        assert "gen_ai.tool.call.arguments" not in span.attributes
        assert "gen_ai.tool.call.result" not in span.attributes
    logs = run.logs()
    details = [r for r in logs if r.event_name == "gen_ai.client.inference.operation.details"]
    assert len(details) == len(llm)
    assert {r.span_id for r in details} == {s.span_id for s in llm}
    assert {r.trace_id for r in logs} == {spans[0].trace_id}
    for record in details:
        assert isinstance(record.attributes["gen_ai.input.messages"], list)
        assert isinstance(record.attributes["gen_ai.system_instructions"], list)


@pytest.mark.parametrize("logs_first", [False, True], ids=["logs-after", "logs-before"])
@pytest.mark.parametrize("name", SCENARIO_IDS)
def test_event_only_transcript_equals_span_only(name: str, logs_first: bool) -> None:
    span_only = adk2_run()[name]
    event_only = adk2_run(capture="EVENT_ONLY")[name]
    expected = _content(build_transcript(_assemble(span_only, logs_first=False)))
    trace = _assemble(event_only, logs_first=logs_first)
    assert len(trace.logs) == len(event_only.logs())
    got = _content(build_transcript(trace))
    assert got == expected
    assert got["answer"] == BY_NAME[name].answer
    assert [t[0] for t in got["tools"]] == [call[0] for call in BY_NAME[name].calls]


@pytest.mark.parametrize("name", SCENARIO_IDS)
def test_event_only_checks_give_the_span_only_verdicts(name: str) -> None:
    scenario: Scenario = BY_NAME[name]
    span_only = adk2_run()[name]
    event_only = adk2_run(capture="EVENT_ONLY")[name]
    expected = _checks(_assemble(span_only, logs_first=False), span_only.spans())
    got = _checks(_assemble(event_only, logs_first=True), event_only.spans())
    assert got == expected
    assert Outcome.ERROR not in got.values()
    assert {n for n, o in got.items() if o is Outcome.FAIL} == scenario.expected_failures


def test_event_only_without_its_logs_has_no_content() -> None:
    """The logs are what carries the content: the spans alone give no answer, no arguments."""
    run = adk2_run(capture="EVENT_ONLY")["adk-refund-ok"]
    assembler = Assembler(decision_wait=0.0)
    assembler.add(run.spans(), 0.0)
    (trace,) = assembler.due(1.0)
    transcript = build_transcript(trace)
    assert transcript.answer is None
    assert transcript.user_input is None
    assert all(c.arguments is None for c in transcript.tool_calls)


def test_span_and_event_reads_the_same_as_span_only() -> None:
    name = "adk-refund-over-limit"
    both = adk2_run(capture="SPAN_AND_EVENT")[name]
    assert both.logs()
    got = _content(build_transcript(_assemble(both, logs_first=True)))
    assert got == _content(build_transcript(_assemble(adk2_run()[name], logs_first=False)))


@pytest.mark.parametrize("capture", ["default", "EVENT_ONLY"])
def test_legacy_schema_logs_give_the_answer_not_their_wrapping(capture: str) -> None:
    # Schema 1 logs one record per message: {"content": "<elided>"} without capture,
    # {"content": <Gemini Content>} with it; neither may become the answer as text.
    name = "adk-refund-ok"
    run = adk2_run((name,), capture=capture, schema="1")[name]
    assert run.logs()
    transcript = build_transcript(_assemble(run, logs_first=True))
    scenario = BY_NAME[name]
    assert transcript.answer == scenario.answer
    assert transcript.user_input == scenario.user_input
    assert [c.name for c in transcript.tool_calls] == [call[0] for call in scenario.calls]
    assert not transcript.capture.missing


def test_legacy_schema_without_span_content_reports_the_tools_content_missing() -> None:
    # ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS=false writes "{}" as every tool's arguments and
    # result: not captured (so refund_args is ERROR, not a FAIL on empty arguments).
    name = "adk-refund-over-limit"
    run = adk2_run((name,), capture="default", schema="1-no-span-content")[name]
    trace = _assemble(run, logs_first=False)
    transcript = build_transcript(trace)
    assert [c.name for c in transcript.tool_calls] == [call[0] for call in BY_NAME[name].calls]
    assert all(c.arguments is None and c.result is None for c in transcript.tool_calls)
    missing = {field.value for field in transcript.capture.missing}
    assert {"tool_call_arguments", "tool_call_results"} <= missing
    assert "ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS=true" in transcript.capture.advice
    assert _checks(trace, run.spans())["refund_args"] is Outcome.ERROR


def test_default_capture_mode_is_recorded() -> None:
    """ADK's default (variable unset): the harness records it; no content anywhere."""
    run = adk2_run(capture="default")["adk-refund-ok"]
    for record in run.logs():
        assert "gen_ai.input.messages" not in record.attributes
    transcript = build_transcript(_assemble(run, logs_first=False))
    assert transcript.answer is None


@pytest.mark.parametrize(
    "layout",
    ["json-lines", "proto-file-exporter", "binary-request-per-file", "mixed-in-one-file"],
)
def test_replay_takes_trace_and_log_files_in_one_call(
    layout: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = adk2_run(capture="EVENT_ONLY")
    traces = [run.trace_line for run in runs.values()]
    logs = [run.logs_line for run in runs.values()]
    # File names say nothing: the signal is told by content.
    paths: list[Path] = []
    if layout == "json-lines":
        (tmp_path / "a.jsonl").write_text("".join(f"{x}\n" for x in logs), encoding="utf-8")
        (tmp_path / "b.jsonl").write_text("".join(f"{x}\n" for x in traces), encoding="utf-8")
        paths = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    elif layout == "proto-file-exporter":
        (tmp_path / "a.bin").write_bytes(length_prefixed([logs_proto(x) for x in logs]))
        (tmp_path / "b.bin").write_bytes(length_prefixed([traces_proto(x) for x in traces]))
        paths = [tmp_path / "a.bin", tmp_path / "b.bin"]
    elif layout == "binary-request-per-file":
        for index, (t, lg) in enumerate(zip(traces, logs, strict=True)):
            (tmp_path / f"{index}-x.pb").write_bytes(logs_proto(lg))
            (tmp_path / f"{index}-y.pb").write_bytes(traces_proto(t))
            paths += [tmp_path / f"{index}-x.pb", tmp_path / f"{index}-y.pb"]
    else:
        mixed = [line for pair in zip(logs, traces, strict=True) for line in pair]
        (tmp_path / "all.jsonl").write_text("".join(f"{x}\n" for x in mixed), encoding="utf-8")
        paths = [tmp_path / "all.jsonl"]
    code, out, err = replay(capsys, *paths, "--rubrics", DEMO_RUBRICS)
    assert code == 1, err
    assert f"{len(runs)} traces, {len(runs)} verdicts" in err
    n_logs = sum(len(run.logs()) for run in runs.values())
    assert f"{n_logs} log records; 0 without a trace id (ignored)" in err
    by_trace = {r["trace_id"]: r for r in records(out)}
    for name, run in runs.items():
        record = by_trace[line_trace_id(run.trace_line)]
        outcomes = {c["name"]: c["outcome"] for c in record["checks"]}
        assert "ERROR" not in outcomes.values(), name
        failed = {n for n, o in outcomes.items() if o == "FAIL"}
        assert failed == BY_NAME[name].expected_failures, name
