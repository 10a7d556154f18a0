"""Fuzz: building a transcript never raises, for every convention, whatever the spans hold.

Each registered convention (``sidecar.conventions.CONVENTIONS``) has here the
span names, scopes and attribute keys its reader looks at; the spans get
random, deep, huge and ill-typed values under those keys, random parent
links (missing, cyclic, duplicated ids) and random times (reversed, zero,
2**64 - 1). Contract: a ``Transcript`` of well-typed fields, flags that say
what could not be read, within the per-example deadline. A test fails when a
convention is registered without a strategy here.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sidecar.bounds import UINT64_MAX
from sidecar.conventions import ALL_CONVENTIONS
from sidecar.model import (
    DecideReason,
    Flag,
    Span,
    SpanEvent,
    SpanKind,
    StatusCode,
    Trace,
    Transcript,
)
from sidecar.transcript import build_transcript
from tests.fuzz_strategies import FUZZ, attr_values, message_texts, texts

# What each convention's reader looks at: span names, scope names, attribute keys.
CONVENTION_SHAPES: dict[str, dict[str, list[str]]] = {
    "otel_genai": {
        "names": [
            "invoke_agent shop",
            "chat m",
            "execute_tool lookup",
            "invoke_workflow w",
            "embeddings",
        ],
        "scopes": [""],
        "keys": [
            "gen_ai.operation.name",
            "gen_ai.input.messages",
            "gen_ai.output.messages",
            "gen_ai.system_instructions",
            "gen_ai.prompt",
            "gen_ai.completion",
            "gen_ai.tool.name",
            "gen_ai.tool.call.id",
            "gen_ai.tool.call.arguments",
            "gen_ai.tool.call.result",
            "gen_ai.agent.name",
            "gen_ai.agent.version",
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.output_tokens",
            "gen_ai.request.model",
            "gen_ai.response.model",
            "gen_ai.provider.name",
            "eval.reference",
        ],
        "events": ["gen_ai.user.message", "gen_ai.choice", "gen_ai.tool.message", "exception"],
    },
    "adk_v1": {
        "names": ["invocation", "agent_run [shop]", "call_llm", "execute_tool lookup"],
        "scopes": ["gcp.vertex.agent"],
        "keys": [
            "gcp.vertex.agent.llm_request",
            "gcp.vertex.agent.llm_response",
            "gcp.vertex.agent.tool_call_args",
            "gcp.vertex.agent.tool_response",
            "gcp.vertex.agent.event_id",
            "gen_ai.tool.name",
            "gen_ai.tool.call.id",
        ],
        "events": [],
    },
    "openinference": {
        "names": ["agent", "llm", "tool"],
        "scopes": [""],
        "keys": [
            "openinference.span.kind",
            "input.value",
            "output.value",
            "llm.input_messages.0.message.role",
            "llm.input_messages.0.message.content",
            "llm.input_messages.1.message.contents.0.message_content.text",
            "llm.output_messages.0.message.content",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments",
            "tool.name",
            "tool_call.function.arguments",
            "llm.model_name",
            "llm.token_count.prompt",
        ],
        "events": [],
    },
    "openllmetry": {
        "names": ["shop.agent", "lookup.tool", "openai.chat"],
        "scopes": [""],
        "keys": [
            "traceloop.span.kind",
            "traceloop.entity.name",
            "traceloop.entity.input",
            "traceloop.entity.output",
            "gen_ai.prompt.0.role",
            "gen_ai.prompt.0.content",
            "gen_ai.completion.0.content",
            "gen_ai.completion.0.tool_calls.0.name",
            "gen_ai.completion.0.tool_calls.0.arguments",
            "gen_ai.completion.0.function_call.name",
            "llm.request.type",
            "llm.usage.prompt_tokens",
        ],
        "events": [],
    },
}

# Values a reader branches on, so the fuzz reaches past the first `if`.
MEANINGFUL = {
    "gen_ai.operation.name": ["chat", "execute_tool", "invoke_agent", "invoke_workflow"],
    "openinference.span.kind": ["LLM", "TOOL", "AGENT", "CHAIN", "llm"],
    "traceloop.span.kind": ["agent", "tool", "workflow", "task"],
    "llm.request.type": ["chat", "completion"],
}


def test_every_convention_has_a_fuzz_strategy() -> None:
    assert set(CONVENTION_SHAPES) == set(ALL_CONVENTIONS)


times = st.integers(0, 10**12) | st.sampled_from([0, UINT64_MAX, UINT64_MAX - 1])
span_ids = st.sampled_from([f"{n:016x}" for n in range(1, 7)])


TRACE_ID = "5b8efff798038103d269b633813fc60c"
ONE_TRACE = st.just(TRACE_ID)


@st.composite
def spans_of(
    draw: st.DrawFn,
    convention: str,
    values: st.SearchStrategy[Any] = attr_values,
    trace_ids: st.SearchStrategy[str] = ONE_TRACE,
) -> Span:
    shape = CONVENTION_SHAPES[convention]
    attributes: dict[str, Any] = {}
    for key in draw(st.lists(st.sampled_from(shape["keys"]), max_size=6, unique=True)):
        choices = values | message_texts
        if key in MEANINGFUL:
            choices = st.sampled_from(MEANINGFUL[key]) | choices
        attributes[key] = draw(choices)
    events = [
        SpanEvent(
            name, draw(times), {"message": draw(values), "gen_ai.prompt": draw(message_texts)}
        )
        for name in draw(st.lists(st.sampled_from(shape["events"] or ["x"]), max_size=2))
    ]
    return Span(
        trace_id=draw(trace_ids),
        span_id=draw(span_ids),
        parent_span_id=draw(st.none() | span_ids),
        name=draw(st.sampled_from(shape["names"]) | texts),
        kind=draw(st.sampled_from(list(SpanKind))),
        start_time_unix_nano=draw(times),
        end_time_unix_nano=draw(times),
        attributes=attributes,
        resource={"service.name": draw(values)},
        scope_name=draw(st.sampled_from(shape["scopes"])),
        status_code=draw(st.sampled_from(list(StatusCode))),
        status_message=draw(texts),
        events=tuple(events),
    )


@st.composite
def traces(draw: st.DrawFn) -> Trace:
    conventions = draw(st.lists(st.sampled_from(sorted(CONVENTION_SHAPES)), min_size=1, max_size=3))
    spans = [draw(spans_of(c)) for c in conventions for _ in range(draw(st.integers(1, 3)))]
    return Trace(
        trace_id="5b8efff798038103d269b633813fc60c",
        spans=tuple(spans),
        reason=draw(st.sampled_from(list(DecideReason))),
        truncated=draw(st.booleans()),
        partial=draw(st.booleans()),
    )


def check_contract(transcript: Transcript, trace: Trace) -> None:
    assert transcript.trace_id == trace.trace_id
    for text in (
        transcript.user_input,
        transcript.answer,
        transcript.agent_name,
        transcript.reference,
    ):
        assert text is None or isinstance(text, str)
    for call in transcript.tool_calls:
        assert isinstance(call.name, str)
        for text in (call.arguments, call.result, call.error):
            assert text is None or isinstance(text, str)
    if transcript.latency_ms is not None:
        assert math.isfinite(transcript.latency_ms)
        assert transcript.latency_ms >= 0
    assert isinstance(transcript.input_tokens, int)
    assert set(transcript.flags) <= set(Flag)
    if Flag.INCOMPLETE in transcript.flags:
        assert transcript.answer is None
        assert transcript.latency_ms is None
    if trace.truncated or trace.partial:
        assert transcript.truncated


@FUZZ
@given(traces())
def test_transcripts_of_hostile_traces(trace: Trace) -> None:
    check_contract(build_transcript(trace, untrusted_tools=("lookup",)), trace)


@FUZZ
@given(st.sampled_from(sorted(CONVENTION_SHAPES)), st.data())
def test_transcripts_of_one_convention(convention: str, data: st.DataObject) -> None:
    spans = tuple(data.draw(spans_of(convention)) for _ in range(data.draw(st.integers(1, 4))))
    trace = Trace("5b8efff798038103d269b633813fc60c", spans, DecideReason.COMPLETE)
    check_contract(build_transcript(trace), trace)
