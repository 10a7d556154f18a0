"""The trace generators: a real ADK agent and OTel GenAI spans, through our decoder."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import ReadableSpan

from sidecar.checks import run_checks
from sidecar.decode import decode
from sidecar.model import DecideReason, Outcome, Span, StatusCode, Trace
from sidecar.rubric import load_rubrics, route
from sidecar.transcript import build_transcript
from tests.agents import adk_agent
from tests.agents.adk_agent import (
    REFUND_INJECTION,
    REFUND_OK,
    encode_request,
    run_adk_agent,
    split_requests,
)
from tests.agents.genai_spans import (
    ToolCallSpec,
    make_cases,
    make_genai_trace,
    make_traces,
    recorder,
)

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "sidecar" / "demo_data"


def _hex(span: ReadableSpan) -> tuple[str, str, str | None]:
    assert span.context is not None
    parent = format(span.parent.span_id, "016x") if span.parent else None
    return format(span.context.trace_id, "032x"), format(span.context.span_id, "016x"), parent


def _trace(spans: list[Span]) -> Trace:
    return Trace(spans[0].trace_id, tuple(spans), DecideReason.FLUSH)


@pytest.fixture(scope="module")
def adk_ok() -> list[ReadableSpan]:
    return run_adk_agent(REFUND_OK)


# --- the ADK agent ---------------------------------------------------------------------------


def test_adk_emits_its_v1_span_tree(adk_ok: list[ReadableSpan]) -> None:
    by_id = {_hex(s)[1]: s for s in adk_ok}
    names = [s.name for s in adk_ok]
    assert sorted(names) == sorted(
        [
            "invocation",
            "agent_run [refund_agent]",
            "call_llm",
            "call_llm",
            "call_llm",
            "execute_tool lookup_order",
            "execute_tool issue_refund",
        ]
    )
    assert {_hex(s)[0] for s in adk_ok} == {_hex(adk_ok[0])[0]}
    assert {s.instrumentation_scope.name for s in adk_ok if s.instrumentation_scope} == {
        "gcp.vertex.agent"
    }

    def parent_name(span: ReadableSpan) -> str | None:
        parent = _hex(span)[2]
        return by_id[parent].name if parent else None

    # The root ends last; execute_tool runs inside the call_llm that asked for it.
    assert adk_ok[-1].name == "invocation"
    assert parent_name(adk_ok[-1]) is None
    expected_parent = {
        "agent_run [refund_agent]": "invocation",
        "call_llm": "agent_run [refund_agent]",
        "execute_tool lookup_order": "call_llm",
        "execute_tool issue_refund": "call_llm",
    }
    for span in adk_ok[:-1]:
        assert parent_name(span) == expected_parent[span.name], span.name


def test_adk_attributes_carry_the_conversation(adk_ok: list[ReadableSpan]) -> None:
    tools = {s.name: s.attributes or {} for s in adk_ok if s.name.startswith("execute_tool")}
    refund = tools["execute_tool issue_refund"]
    assert refund["gen_ai.tool.name"] == "issue_refund"
    assert refund["gen_ai.tool.call.id"] == "call-2"
    assert json.loads(str(refund["gcp.vertex.agent.tool_call_args"])) == {
        "order_id": "A1001",
        "amount": 129.99,
    }
    assert json.loads(str(refund["gcp.vertex.agent.tool_response"]))["refund_id"] == "RF-A1001"

    llm = [s.attributes or {} for s in adk_ok if s.name == "call_llm"]
    first_request = json.loads(str(llm[0]["gcp.vertex.agent.llm_request"]))
    assert first_request["contents"][0]["parts"][0]["text"] == REFUND_OK.user_input
    final = json.loads(str(llm[-1]["gcp.vertex.agent.llm_response"]))
    assert final["content"]["parts"][0]["text"] == REFUND_OK.answer
    assert all(a["gen_ai.request.model"] == "gemini-2.5-flash" for a in llm)
    assert all(int(str(a["gen_ai.usage.input_tokens"])) > 0 for a in llm)


def test_adk_tracers_are_restored_after_a_run(adk_ok: list[ReadableSpan]) -> None:
    import google.adk.runners
    import google.adk.telemetry

    for module in (google.adk.telemetry, google.adk.runners):
        assert isinstance(module.tracer, otel_trace.ProxyTracer)
    # Nothing was installed globally.
    assert isinstance(otel_trace.get_tracer_provider(), otel_trace.ProxyTracerProvider)


def test_adk_run_is_reproducible(adk_ok: list[ReadableSpan]) -> None:
    assert encode_request(run_adk_agent(REFUND_OK)) == encode_request(adk_ok)


def test_adk_request_decodes_with_the_same_ids(adk_ok: list[ReadableSpan]) -> None:
    decoded = decode(encode_request(adk_ok))
    assert [(s.trace_id, s.span_id, s.parent_span_id, s.name) for s in decoded] == [
        (*_hex(s), s.name) for s in adk_ok
    ]
    assert {(s.resource["service.name"], s.resource["service.version"]) for s in decoded} == {
        ("refund-agent", "1.4.2")
    }
    assert {s.scope_name for s in decoded} == {"gcp.vertex.agent"}


@pytest.mark.parametrize("parts", [1, 2, 3, 50], ids=lambda n: f"{n}-parts")
def test_split_requests_keeps_every_span_once(adk_ok: list[ReadableSpan], parts: int) -> None:
    records = split_requests(adk_ok, parts)
    assert len(records) == min(parts, len(adk_ok))
    decoded = [span for record in records for span in decode(record)]
    assert [s.span_id for s in decoded] == [_hex(s)[1] for s in adk_ok]


def test_adk_transcript_has_input_tools_and_answer(adk_ok: list[ReadableSpan]) -> None:
    transcript = build_transcript(_trace(decode(encode_request(adk_ok))), {"web_fetch"})
    assert transcript.user_input == REFUND_OK.user_input
    assert transcript.answer == REFUND_OK.answer
    assert [(c.name, json.loads(c.arguments or "null")) for c in transcript.tool_calls] == [
        (name, args) for name, args in REFUND_OK.calls
    ]
    assert json.loads(transcript.tool_calls[1].result or "null")["amount"] == 129.99
    assert transcript.agent_version == "1.4.2"
    assert transcript.models == ("gemini-2.5-flash",)


def test_adk_transcript_marks_web_fetch_untrusted() -> None:
    spans = decode(encode_request(run_adk_agent(REFUND_INJECTION)))
    transcript = build_transcript(_trace(spans), {"web_fetch"})
    fetched = [c for c in transcript.tool_calls if c.name == "web_fetch"]
    assert len(fetched) == 1
    assert fetched[0].untrusted
    assert "ignore previous instructions" in (fetched[0].result or "")
    assert not any(c.untrusted for c in transcript.tool_calls if c.name != "web_fetch")


# --- GenAI-convention spans ------------------------------------------------------------------

CALLS: list[ToolCallSpec] = [
    ("lookup_order", {"order_id": "A7"}, '{"order_id": "A7", "amount": 12.5}'),
    ("issue_refund", {"order_id": "A7", "amount": 12.5}, '{"status": "issued"}'),
]


def _genai(**kwargs: Any) -> list[ReadableSpan]:
    rec = recorder("refund-agent", "9.9.9", seed=3)
    make_genai_trace(
        rec.provider, "Refund A7", CALLS, "Refunded $12.5.", agent="refund-agent", **kwargs
    )
    return rec.spans()


def test_genai_trace_follows_the_semantic_conventions() -> None:
    spans = decode(encode_request(_genai()))
    root = spans[-1]
    assert root.parent_span_id is None
    assert [s.name for s in spans] == [
        "chat gemini-2.5-flash",
        "execute_tool lookup_order",
        "chat gemini-2.5-flash",
        "execute_tool issue_refund",
        "chat gemini-2.5-flash",
        "invoke_agent refund-agent",
    ]
    assert {s.parent_span_id for s in spans[:-1]} == {root.span_id}
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.agent.name"] == "refund-agent"
    assert json.loads(str(root.attributes["gen_ai.input.messages"]))[0]["parts"][0] == {
        "type": "text",
        "content": "Refund A7",
    }
    tool = spans[3].attributes
    assert tool["gen_ai.tool.call.id"] == "call_2"
    assert json.loads(str(tool["gen_ai.tool.call.arguments"])) == CALLS[1][1]
    assert tool["gen_ai.tool.call.result"] == CALLS[1][2]
    chat = spans[0].attributes
    assert chat["gen_ai.request.model"] == "gemini-2.5-flash"
    assert isinstance(chat["gen_ai.usage.input_tokens"], int)
    assert root.duration_ms == pytest.approx(1800.0)
    assert all(root.start_time_unix_nano <= s.start_time_unix_nano for s in spans)
    assert all(s.end_time_unix_nano <= root.end_time_unix_nano for s in spans)


def test_genai_trace_transcript() -> None:
    transcript = build_transcript(_trace(decode(encode_request(_genai()))))
    assert transcript.user_input == "Refund A7"
    assert transcript.answer == "Refunded $12.5."
    assert [(c.name, c.call_id, c.result) for c in transcript.tool_calls] == [
        ("lookup_order", "call_1", CALLS[0][2]),
        ("issue_refund", "call_2", CALLS[1][2]),
    ]
    assert transcript.agent_name == "refund-agent"
    assert transcript.latency_ms == pytest.approx(1800.0)


def test_genai_error_marks_the_last_tool() -> None:
    spans = decode(encode_request(_genai(error=True)))
    failed = [s for s in spans if s.status_code is StatusCode.ERROR]
    assert [s.name for s in failed] == ["execute_tool issue_refund"]
    assert "gen_ai.tool.call.result" not in failed[0].attributes
    assert failed[0].attributes["error.type"] == "TimeoutError"


def test_genai_without_content_capture_has_no_content() -> None:
    content_keys = {
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
    }
    spans = decode(encode_request(_genai(capture_content=False)))
    assert not any(content_keys & set(s.attributes) for s in spans)
    transcript = build_transcript(_trace(spans))
    assert transcript.user_input is None
    assert transcript.answer is None


def test_genai_root_ignores_an_active_span() -> None:
    rec = recorder("x", "1", seed=1)
    with rec.tracer.start_as_current_span("unrelated"):
        make_genai_trace(rec.provider, "hi", [], "hello", agent="x")
    roots = [s for s in rec.spans() if s.parent is None]
    assert sorted(s.name for s in roots) == ["invoke_agent x", "unrelated"]


def test_make_traces_is_reproducible_and_mixed() -> None:
    first = [encode_request(t) for t in make_traces(60, seed=7)]
    assert first == [encode_request(t) for t in make_traces(60, seed=7)]
    assert first != [encode_request(t) for t in make_traces(60, seed=8)]
    cases = make_cases(60, seed=7)
    assert len({c.trace_id for c in cases}) == 60
    assert any(not c.expected_failures for c in cases)
    assert any(c.expected_failures for c in cases)
    for case in cases:
        decoded = decode(encode_request(case.spans))
        assert {s.trace_id for s in decoded} == {case.trace_id}
        assert sum(s.parent_span_id is None for s in decoded) == 1


# --- bundled demo data -----------------------------------------------------------------------


def _demo_traces() -> dict[str, list[Span]]:
    traces: dict[str, list[Span]] = defaultdict(list)
    for line in (DEMO / "traces.jsonl").read_text(encoding="utf-8").splitlines():
        for span in decode(line.encode()):
            traces[span.trace_id].append(span)
    return traces


def test_demo_checks_fail_exactly_where_intended() -> None:
    expected = json.loads((DEMO / "expected.json").read_text(encoding="utf-8"))
    rubrics = load_rubrics(DEMO / "rubrics")
    traces = _demo_traces()
    assert set(traces) == set(expected)
    for trace_id, spans in traces.items():
        (rubric,) = route(rubrics, spans[0].resource, {})
        transcript = build_transcript(_trace(spans), rubric.untrusted_tools)
        results = run_checks(rubric, transcript)
        assert not [r for r in results if r.outcome is Outcome.ERROR], trace_id
        failing = sorted(r.name for r in results if r.outcome is Outcome.FAIL)
        assert failing == expected[trace_id]["failing_checks"], expected[trace_id]["scenario"]


def test_demo_data_is_up_to_date() -> None:
    # Loaded in-process: a subprocess would pay the slow google.adk import again.
    path = REPO / "scripts" / "make-demo-data"
    loader = importlib.machinery.SourceFileLoader("make_demo_data", str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    script = importlib.util.module_from_spec(spec)
    # dataclasses looks the module up in sys.modules while the class is built.
    sys.modules[loader.name] = script
    try:
        loader.exec_module(script)
        traces, expected = script.build()
    finally:
        del sys.modules[loader.name]
    assert (DEMO / "traces.jsonl").read_text(encoding="utf-8") == traces, (
        "stale: run scripts/make-demo-data"
    )
    assert json.loads((DEMO / "expected.json").read_text(encoding="utf-8")) == expected


def test_adk_scenarios_are_distinct_traces() -> None:
    ids = {_hex(run_adk_agent(s)[0])[0] for s in adk_agent.SCENARIOS}
    assert len(ids) == len(adk_agent.SCENARIOS)


def test_make_cases_fail_the_bundled_rubrics_as_labelled() -> None:
    rubrics = load_rubrics(DEMO / "rubrics")
    cases = make_cases(80, seed=11)
    assert len({c.kind for c in cases}) >= 5
    for case in cases:
        spans = decode(encode_request(case.spans))
        (rubric,) = route(rubrics, spans[0].resource, {})
        results = run_checks(rubric, build_transcript(_trace(spans), rubric.untrusted_tools))
        assert not [r for r in results if r.outcome is Outcome.ERROR], case.kind
        failing = {r.name for r in results if r.outcome is Outcome.FAIL}
        assert failing == case.expected_failures, case.kind
