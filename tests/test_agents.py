"""The trace generators: a real ADK agent and OTel GenAI spans, through our decoder.

ADK traces come in two versions: live runs of google-adk 2.13 in its own
environment (``tests.agents.adk_traces``), and ADK 1.14 runs recorded in
``tests/data/adk1``. Tests that hold for both take the version as a parameter.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from sidecar.evaluate.checks import run_checks
from sidecar.evaluate.rubric import load_rubrics, route
from sidecar.evaluate.transcript import build_transcript
from sidecar.ingest.decode import decode
from sidecar.model import Outcome, Span, SpanKind, StatusCode
from tests.agents import refund_shop
from tests.agents.adk_traces import adk1_spans, adk2_lines, adk2_spans
from tests.agents.genai_spans import (
    ToolCallSpec,
    make_cases,
    make_genai_trace,
    make_traces,
    recorder,
)
from tests.agents.otlp import encode_request, split_requests
from tests.agents.refund_shop import REFUND_INJECTION, REFUND_OK, SCENARIOS, Scenario
from tests.builders import trace

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "sidecar" / "demo_data"
ADK_SCOPE = "gcp.vertex.agent"

AdkSpans = Callable[[str], list[Span]]
ADK: dict[str, AdkSpans] = {"adk-1.14-recorded": adk1_spans, "adk-2.13-live": adk2_spans}
ADK_VERSIONS = [pytest.param(spans_of, id=version) for version, spans_of in ADK.items()]
ADK_RUNS = [
    pytest.param(spans_of, scenario, id=f"{version}-{scenario.name}")
    for version, spans_of in ADK.items()
    for scenario in SCENARIOS
]


def _hex(span: ReadableSpan) -> tuple[str, str, str | None]:
    assert span.context is not None
    parent = format(span.parent.span_id, "016x") if span.parent else None
    return format(span.context.trace_id, "032x"), format(span.context.span_id, "016x"), parent


def _by_name(spans: list[Span]) -> dict[str, list[Span]]:
    grouped: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        grouped[span.name].append(span)
    return grouped


# --- the ADK agent: span trees -----------------------------------------------------------------

# Span names in start order, and each name's parent, as the two ADK versions emit them
# for REFUND_OK (two tool calls, three model calls).
ADK1_TREE = (
    [
        "invocation",
        "agent_run [refund_agent]",
        "call_llm",
        "execute_tool lookup_order",
        "call_llm",
        "execute_tool issue_refund",
        "call_llm",
    ],
    {
        "invocation": None,
        "agent_run [refund_agent]": "invocation",
        "call_llm": "agent_run [refund_agent]",
        # v1 runs a tool inside the call_llm span that asked for it.
        "execute_tool lookup_order": "call_llm",
        "execute_tool issue_refund": "call_llm",
    },
)
ADK2_TREE = (
    [
        "invoke_workflow refund_agent",
        "invoke_agent refund_agent",
        "generate_content gemini-2.5-flash",
        "execute_tool lookup_order",
        "generate_content gemini-2.5-flash",
        "execute_tool issue_refund",
        "generate_content gemini-2.5-flash",
    ],
    {
        "invoke_workflow refund_agent": None,
        "invoke_agent refund_agent": "invoke_workflow refund_agent",
        # v2 has no call_llm: model calls and tools are siblings under the agent.
        "generate_content gemini-2.5-flash": "invoke_agent refund_agent",
        "execute_tool lookup_order": "invoke_agent refund_agent",
        "execute_tool issue_refund": "invoke_agent refund_agent",
    },
)


@pytest.mark.parametrize(
    ("spans_of", "tree"),
    [
        pytest.param(adk1_spans, ADK1_TREE, id="adk-1.14-recorded"),
        pytest.param(adk2_spans, ADK2_TREE, id="adk-2.13-live"),
    ],
)
def test_adk_span_tree(spans_of: AdkSpans, tree: tuple[list[str], dict[str, str | None]]) -> None:
    order, parents = tree
    spans = spans_of(REFUND_OK.name)
    by_id = {s.span_id: s for s in spans}
    in_start_order = sorted(spans, key=lambda s: (s.start_time_unix_nano, -s.end_time_unix_nano))
    assert [s.name for s in in_start_order] == order
    for span in spans:
        parent = by_id[span.parent_span_id].name if span.parent_span_id else None
        assert parent == parents[span.name], span.name
    # Finish order: the root ends last.
    assert spans[-1].parent_span_id is None
    assert {s.trace_id for s in spans} == {spans[0].trace_id}
    assert {s.scope_name for s in spans} == {ADK_SCOPE}
    assert {s.kind for s in spans} == {SpanKind.INTERNAL}
    assert {s.status_code for s in spans} == {StatusCode.UNSET}


def test_adk1_attributes_carry_the_conversation() -> None:
    spans = _by_name(adk1_spans(REFUND_OK.name))
    (refund,) = (s.attributes for s in spans["execute_tool issue_refund"])
    assert refund["gen_ai.tool.name"] == "issue_refund"
    assert refund["gen_ai.tool.call.id"] == "call-2"
    assert json.loads(str(refund["gcp.vertex.agent.tool_call_args"])) == {
        "order_id": "A1001",
        "amount": 129.99,
    }
    assert json.loads(str(refund["gcp.vertex.agent.tool_response"]))["refund_id"] == "RF-A1001"

    llm = [s.attributes for s in spans["call_llm"]]
    first_request = json.loads(str(llm[0]["gcp.vertex.agent.llm_request"]))
    assert first_request["contents"][0]["parts"][0]["text"] == REFUND_OK.user_input
    final = json.loads(str(llm[-1]["gcp.vertex.agent.llm_response"]))
    assert final["content"]["parts"][0]["text"] == REFUND_OK.answer
    assert all(a["gen_ai.request.model"] == "gemini-2.5-flash" for a in llm)
    assert all(int(str(a["gen_ai.usage.input_tokens"])) > 0 for a in llm)


ADK1_CONTENT_KEYS = {
    "gcp.vertex.agent.llm_request",
    "gcp.vertex.agent.llm_response",
    "gcp.vertex.agent.tool_call_args",
    "gcp.vertex.agent.tool_response",
}


def test_adk2_attributes_carry_the_conversation() -> None:
    every = adk2_spans(REFUND_OK.name)
    assert not ADK1_CONTENT_KEYS & {key for span in every for key in span.attributes}
    spans = _by_name(every)

    (refund,) = (s.attributes for s in spans["execute_tool issue_refund"])
    assert refund["gen_ai.operation.name"] == "execute_tool"
    assert refund["gen_ai.tool.name"] == "issue_refund"
    assert refund["gen_ai.tool.call.id"] == "call-2"
    assert json.loads(str(refund["gen_ai.tool.call.arguments"])) == {
        "order_id": "A1001",
        "amount": 129.99,
    }
    assert json.loads(str(refund["gen_ai.tool.call.result"]))["refund_id"] == "RF-A1001"

    llm = [s.attributes for s in spans["generate_content gemini-2.5-flash"]]
    assert {a["gen_ai.operation.name"] for a in llm} == {"generate_content"}
    first_input = json.loads(str(llm[0]["gen_ai.input.messages"]))
    assert first_input == [
        {"role": "user", "parts": [{"type": "text", "content": REFUND_OK.user_input}]}
    ]
    (final,) = json.loads(str(llm[-1]["gen_ai.output.messages"]))
    assert final["parts"] == [{"type": "text", "content": REFUND_OK.answer}]
    assert all(a["gen_ai.request.model"] == "gemini-2.5-flash" for a in llm)
    assert all(int(str(a["gen_ai.usage.input_tokens"])) > 0 for a in llm)
    assert all(a["gen_ai.conversation.id"] == REFUND_OK.session_id for a in llm)

    (workflow,) = (s.attributes for s in spans["invoke_workflow refund_agent"])
    assert workflow["gen_ai.operation.name"] == "invoke_workflow"
    assert workflow["gen_ai.workflow.name"] == "refund_agent"
    (agent,) = (s.attributes for s in spans["invoke_agent refund_agent"])
    assert agent["gen_ai.agent.name"] == "refund_agent"
    # Neither carries the conversation: it is read from the model calls.
    assert not {"gen_ai.input.messages", "gen_ai.output.messages"} & {*workflow, *agent}


def test_adk2_run_is_reproducible() -> None:
    # A process of its own, running one scenario instead of all four, gives the same bytes.
    alone = adk2_lines((REFUND_OK.name,))
    assert alone[REFUND_OK.name] == adk2_lines()[REFUND_OK.name]


@pytest.mark.parametrize("spans_of", ADK_VERSIONS)
def test_adk_scenarios_are_distinct_traces(spans_of: AdkSpans) -> None:
    ids = {spans_of(s.name)[0].trace_id for s in SCENARIOS}
    assert len(ids) == len(SCENARIOS)


@pytest.mark.parametrize("spans_of", ADK_VERSIONS)
def test_adk_request_has_the_service_and_scope(spans_of: AdkSpans) -> None:
    spans = spans_of(REFUND_OK.name)
    assert {(s.resource["service.name"], s.resource["service.version"]) for s in spans} == {
        ("refund-agent", "1.4.2")
    }
    assert {s.scope_name for s in spans} == {ADK_SCOPE}


# --- the ADK agent: what sidecar reads from it ---------------------------------------------------

TOOLS = {tool.__name__: tool for tool in refund_shop.TOOLS}


@pytest.mark.parametrize(("spans_of", "scenario"), ADK_RUNS)
def test_adk_transcript_has_input_tools_and_answer(spans_of: AdkSpans, scenario: Scenario) -> None:
    spans = spans_of(scenario.name)
    transcript = build_transcript(trace(*spans), {"web_fetch"})
    assert transcript.agent_name == "refund_agent"
    assert transcript.agent_version == "1.4.2"
    assert transcript.user_input == scenario.user_input
    assert transcript.answer == scenario.answer
    calls = transcript.tool_calls
    assert [(c.name, c.call_id, json.loads(c.arguments or "null")) for c in calls] == [
        (name, f"call-{index}", args) for index, (name, args) in enumerate(scenario.calls, 1)
    ]
    assert [json.loads(c.result or "null") for c in calls] == [
        TOOLS[name](**args) for name, args in scenario.calls
    ]
    assert transcript.models == ("gemini-2.5-flash",)
    # Only the model-call spans report usage; each is counted once.
    for side in ("input", "output"):
        reported = [s.attributes.get(f"gen_ai.usage.{side}_tokens") for s in spans]
        assert len([n for n in reported if n]) == len(scenario.calls) + 1
        assert getattr(transcript, f"{side}_tokens") == sum(int(str(n or 0)) for n in reported)
    assert transcript.error_spans == ()
    # Seven spans, 14 distinct boundaries on the agent's normalised 120 ms timeline.
    assert transcript.latency_ms == pytest.approx(13 * 120.0)


@pytest.mark.parametrize("spans_of", ADK_VERSIONS)
def test_adk_transcript_marks_web_fetch_untrusted(spans_of: AdkSpans) -> None:
    transcript = build_transcript(trace(*spans_of(REFUND_INJECTION.name)), {"web_fetch"})
    fetched = [c for c in transcript.tool_calls if c.name == "web_fetch"]
    assert len(fetched) == 1
    assert fetched[0].untrusted
    assert "ignore previous instructions" in (fetched[0].result or "")
    assert not any(c.untrusted for c in transcript.tool_calls if c.name != "web_fetch")


@pytest.mark.parametrize(("spans_of", "scenario"), ADK_RUNS)
def test_adk_scenarios_fail_the_bundled_rubrics_as_intended(
    spans_of: AdkSpans, scenario: Scenario
) -> None:
    spans = spans_of(scenario.name)
    (rubric,) = route(load_rubrics(DEMO / "rubrics"), spans[0].resource, {})
    results = run_checks(rubric, build_transcript(trace(*spans), rubric.untrusted_tools))
    assert not [r for r in results if r.outcome is Outcome.ERROR]
    assert {r.name for r in results if r.outcome is Outcome.FAIL} == scenario.expected_failures


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


@pytest.mark.parametrize("parts", [1, 2, 3, 50], ids=lambda n: f"{n}-parts")
def test_split_requests_keeps_every_span_once(parts: int) -> None:
    spans = _genai()
    records = split_requests(spans, parts)
    assert len(records) == min(parts, len(spans))
    decoded = [span for record in records for span in decode(record)]
    assert [s.span_id for s in decoded] == [_hex(s)[1] for s in spans]


def test_genai_trace_transcript() -> None:
    transcript = build_transcript(trace(*decode(encode_request(_genai()))))
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
    transcript = build_transcript(trace(*spans))
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
        transcript = build_transcript(trace(*spans), rubric.untrusted_tools)
        results = run_checks(rubric, transcript)
        assert not [r for r in results if r.outcome is Outcome.ERROR], trace_id
        failing = sorted(r.name for r in results if r.outcome is Outcome.FAIL)
        assert failing == expected[trace_id]["failing_checks"], expected[trace_id]["scenario"]


def test_demo_data_is_up_to_date() -> None:
    # Loaded in-process: it is a script without a .py suffix, not a module.
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


def test_make_cases_fail_the_bundled_rubrics_as_labelled() -> None:
    rubrics = load_rubrics(DEMO / "rubrics")
    cases = make_cases(80, seed=11)
    assert len({c.kind for c in cases}) >= 5
    for case in cases:
        spans = decode(encode_request(case.spans))
        (rubric,) = route(rubrics, spans[0].resource, {})
        results = run_checks(rubric, build_transcript(trace(*spans), rubric.untrusted_tools))
        assert not [r for r in results if r.outcome is Outcome.ERROR], case.kind
        failing = {r.name for r in results if r.outcome is Outcome.FAIL}
        assert failing == case.expected_failures, case.kind
