"""Shapes the fuzz and hostile-input tests share: records, deep values, spans per convention.

``proto_record`` and ``otlp_json_records`` build OTLP records (protobuf nested
to a given depth; OTLP/JSON with hostile fields), ``spans_of`` builds a span in
the shape of one convention (``CONVENTION_SHAPES``: its span names, attribute
keys, events and scopes), with values from :mod:`tests.fuzz_strategies`.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from sidecar.bounds import MAX_NESTING, UINT64_MAX
from sidecar.model import DecideReason, Span, SpanEvent, SpanKind, StatusCode, Trace
from tests.fuzz_strategies import (
    attr_values,
    embeddable,
    huge_ints,
    message_texts,
    number_texts,
    texts,
)

TRACE = "5b8efff798038103d269b633813fc60c"
SPAN = "eee19b7ec3c1b174"

# Any of these may replace a field of a well-formed span; most are wrong on purpose.
field_values = embeddable | huge_ints | number_texts | st.sampled_from([[], {}, True, None])

# An OTLP/JSON AnyValue, possibly ill-typed, possibly "@DEEP@" to be replaced by deep text.
any_values = st.one_of(
    st.builds(lambda v: {"stringValue": v}, field_values),
    st.builds(lambda v: {"intValue": v}, field_values),
    st.builds(lambda v: {"doubleValue": v}, field_values),
    st.builds(lambda v: {"boolValue": v}, field_values),
    st.builds(lambda v: {"bytesValue": v}, field_values),
    st.builds(lambda v: {"arrayValue": {"values": [{"stringValue": v}]}}, field_values),
    st.builds(lambda v: {"kvlistValue": {"values": [{"key": "k", "value": v}]}}, field_values),
    st.just({"kvlistValue": "@DEEP@"}),
    st.just({"arrayValue": "@DEEP@"}),
    field_values,
)

times = st.integers(0, 10**12) | st.sampled_from([0, UINT64_MAX, UINT64_MAX - 1])
span_ids = st.sampled_from([f"{n:016x}" for n in range(1, 7)])


def _varint(number: int) -> bytes:
    out = bytearray()
    while True:
        byte = number & 0x7F
        number >>= 7
        out.append(byte | (0x80 if number else 0))
        if not number:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def proto_record(depth: int) -> bytes:
    """One span whose attribute ``a`` is an AnyValue array nested ``depth`` deep.

    Written by hand, iteratively: protobuf's runtime refuses to build messages
    that deep, and a hostile producer does not use it.
    """
    value = _field(1, b"bottom")  # AnyValue.string_value
    for _ in range(depth):
        value = _field(5, _field(1, value))  # AnyValue.array_value.values[0]
    span = (
        _field(1, bytes.fromhex(TRACE))
        + _field(2, bytes.fromhex(SPAN))
        + _field(5, b"x")
        + _field(9, _field(1, b"a") + _field(2, value))
    )
    return _field(1, _field(2, _field(2, span)))


SPAN_FIELDS = [
    "traceId",
    "spanId",
    "parentSpanId",
    "name",
    "kind",
    "startTimeUnixNano",
    "endTimeUnixNano",
    "status",
    "events",
    "attributes",
]


def deep_any_value(depth: int, kind: str) -> str:
    if kind == "kvlistValue":
        head, tail = '{"values":[{"key":"k","value":{"kvlistValue":', "}}]}"
    else:
        head, tail = '{"values":[{"arrayValue":', "}]}"
    return head * depth + '{"values":[]}' + tail * depth


@st.composite
def otlp_json_records(draw: st.DrawFn) -> bytes:
    span: dict[str, Any] = {
        "traceId": TRACE,
        "spanId": SPAN,
        "name": "invoke_agent shop",
        "startTimeUnixNano": "1000",
        "endTimeUnixNano": "2000",
    }
    for field in draw(st.lists(st.sampled_from(SPAN_FIELDS), max_size=4, unique=True)):
        span[field] = draw(field_values)
    span["attributes"] = [
        {"key": draw(texts), "value": draw(any_values)} for _ in range(draw(st.integers(0, 4)))
    ]
    if draw(st.booleans()):
        span["events"] = [{"name": "e", "timeUnixNano": draw(field_values)}]
    text = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}, default=str)
    depth = draw(st.sampled_from([MAX_NESTING - 2, MAX_NESTING + 2, 300, 20_000]))
    for kind in ("kvlistValue", "arrayValue"):
        text = text.replace(
            f'{{"{kind}": "@DEEP@"}}', f'{{"{kind}": {deep_any_value(depth, kind)}}}'
        )
    return text.encode()


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
    """A trace of one to three conventions' spans, one to three of each, any decision."""
    conventions = draw(st.lists(st.sampled_from(sorted(CONVENTION_SHAPES)), min_size=1, max_size=3))
    spans = [draw(spans_of(c)) for c in conventions for _ in range(draw(st.integers(1, 3)))]
    return Trace(
        trace_id=TRACE_ID,
        spans=tuple(spans),
        reason=draw(st.sampled_from(list(DecideReason))),
        truncated=draw(st.booleans()),
        partial=draw(st.booleans()),
    )
