"""Property: the carrier of GenAI content never changes the transcript.

One agent run (a user input, tool calls, an answer) is recorded with its
model calls' messages in one block vocabulary (GenAI parts, OpenAI-style,
Anthropic, Bedrock Converse) and read by each reader that takes GenAI
content (an OTel GenAI ``chat`` span, an OpenLLMetry LLM span, an ADK 1
``call_llm`` span). The messages travel in one of four carriers:

- attributes of the model call span (``gen_ai.input.messages``, ...);
- a ``gen_ai.client.inference.operation.details`` event on that span;
- a details log record with that span's id;
- a details log record with the id of the task span around the model call
  (an instrumentation that emitted it while the task span was current).

For every reader and vocabulary, all four give the same transcript.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sidecar.evaluate.transcript import build_transcript
from sidecar.model import DecideReason, LogRecord, Span, SpanKind, Trace, Transcript
from tests.builders import event, span
from tests.fuzz_strategies import FUZZ

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
DETAILS = "gen_ai.client.inference.operation.details"
CARRIERS = ("attributes", "span_event", "log_on_span", "log_on_parent")

Call = tuple[str, str, dict[str, Any], str]  # (call id, tool name, arguments, result)
Messages = list[dict[str, Any]]


# --- vocabularies: how one message is written ---------------------------------------------


def _genai(role: str, text: str | None, calls: list[Call], results: list[Call]) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if text is not None:
        parts.append({"type": "text", "content": text})
    parts += [{"type": "tool_call", "id": i, "name": n, "arguments": a} for i, n, a, _ in calls]
    parts += [{"type": "tool_call_response", "id": i, "response": r} for i, _, _, r in results]
    return {"role": role, "parts": parts}


def _openai(role: str, text: str | None, calls: list[Call], results: list[Call]) -> dict[str, Any]:
    if results:
        ((call_id, _, _, result),) = results
        return {"role": "tool", "tool_call_id": call_id, "content": result}
    message: dict[str, Any] = {"role": role, "content": text}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a, _ in calls
        ]
    return message


def _anthropic(
    role: str, text: str | None, calls: list[Call], results: list[Call]
) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    if text is not None:
        blocks.append({"type": "text", "text": text})
    blocks += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a, _ in calls]
    blocks += [
        {"type": "tool_result", "tool_use_id": i, "content": [{"type": "text", "text": r}]}
        for i, _, _, r in results
    ]
    return {"role": "user" if results else role, "content": blocks}


def _bedrock(role: str, text: str | None, calls: list[Call], results: list[Call]) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    if text is not None:
        blocks.append({"text": text})
    blocks += [{"toolUse": {"toolUseId": i, "name": n, "input": a}} for i, n, a, _ in calls]
    blocks += [
        {"toolResult": {"toolUseId": i, "content": [{"text": r}], "status": "success"}}
        for i, _, _, r in results
    ]
    return {"role": "user" if results else role, "content": blocks}


VOCABULARIES: dict[str, Callable[[str, str | None, list[Call], list[Call]], dict[str, Any]]] = {
    "genai": _genai,
    "openai": _openai,
    "anthropic": _anthropic,
    "bedrock": _bedrock,
}

# --- readers: how the model call span says what it is --------------------------------------

# name, scope, attributes of the model call span; attributes of the task span around it,
# which its reader takes for no model call (role OTHER).
READERS: dict[str, tuple[str, str, dict[str, Any], dict[str, Any]]] = {
    "otel_genai": (
        "chat gpt-4o",
        "",
        {"gen_ai.operation.name": "chat"},
        {"gen_ai.operation.name": "execute_task"},
    ),
    "openllmetry": (
        "openai.chat",
        "opentelemetry.instrumentation.openai",
        {"llm.request.type": "chat"},
        {"traceloop.span.kind": "task"},
    ),
    "adk_v1": ("call_llm", "gcp.vertex.agent", {}, {}),
}


@st.composite
def runs(draw: st.DrawFn) -> tuple[str, list[Call], str]:
    words = st.text(alphabet="abcdefghij klmnop0123456789.$", min_size=1, max_size=30).filter(
        lambda t: t.strip() != ""
    )
    user = draw(words)
    calls: list[Call] = []
    for index in range(draw(st.integers(0, 3))):
        name = draw(st.sampled_from(["lookup_order", "issue_refund", "web_fetch"]))
        arguments = draw(
            st.dictionaries(
                st.sampled_from(["order_id", "amount", "url"]),
                st.one_of(words, st.integers(0, 10_000)),
                max_size=2,
            )
        )
        calls.append((f"call_{index + 1}", name, arguments, draw(words)))
    return user, calls, draw(words)


def _model_calls(
    vocabulary: str, user: str, calls: list[Call], answer: str
) -> list[tuple[Messages, Messages]]:
    """(input messages, output messages) of each model call: one tool call a turn, then the answer."""
    write = VOCABULARIES[vocabulary]
    history: Messages = [write("user", user, [], [])]
    turns: list[tuple[Messages, Messages]] = []
    for call in calls:
        request = write("assistant", None, [call], [])
        turns.append((list(history), [request]))
        history += [request, write("tool", None, [], [call])]
    turns.append((list(history), [write("assistant", answer, [], [])]))
    return turns


def _trace(reader: str, vocabulary: str, carrier: str, run: tuple[str, list[Call], str]) -> Trace:
    name, scope, kind_attrs, task_attrs = READERS[reader]
    user, calls, answer = run
    root = span(
        "invoke_agent refund-agent",
        trace_id=TRACE,
        attrs={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "refund-agent"},
        start=0,
        end=10_000_000,
        resource={"service.name": "refund-agent"},
    )
    spans: list[Span] = [root]
    logs: list[LogRecord] = []
    start = 1000
    for index, (inputs, outputs) in enumerate(_model_calls(vocabulary, user, calls, answer)):
        content = {
            "gen_ai.input.messages": json.dumps(inputs),
            "gen_ai.output.messages": json.dumps(outputs),
        }
        task = span(
            f"task {index}",
            trace_id=TRACE,
            parent=root,
            attrs=task_attrs,
            start=start,
            end=start + 900,
            scope=scope,
        )
        attrs = dict(kind_attrs)
        events = []
        if carrier == "attributes":
            attrs.update(content)
        elif carrier == "span_event":
            events.append(event(DETAILS, content, start + 10))
        model = span(
            name,
            trace_id=TRACE,
            parent=task,
            attrs=attrs,
            start=start + 1,
            end=start + 500,
            kind=SpanKind.CLIENT,
            scope=scope,
            events=events,
        )
        if carrier.startswith("log_on"):
            on = model if carrier == "log_on_span" else task
            logs.append(
                LogRecord(TRACE, on.span_id, DETAILS, start + 10, dict(content), scope_name=scope)
            )
        spans += [task, model]
        if index < len(calls):
            call_id, tool, _, _ = calls[index]
            spans.append(
                span(
                    f"execute_tool {tool}",
                    trace_id=TRACE,
                    parent=root,
                    attrs={
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": tool,
                        "gen_ai.tool.call.id": call_id,
                    },
                    start=start + 600,
                    end=start + 800,
                )
            )
        start += 1000
    return Trace(TRACE, tuple(spans), DecideReason.COMPLETE, logs=tuple(logs))


def _content(transcript: Transcript) -> tuple[object, ...]:
    return (
        transcript.user_input,
        transcript.answer,
        tuple((c.name, c.call_id, c.arguments, c.result) for c in transcript.tool_calls),
        transcript.capture,
    )


@FUZZ
@given(
    reader=st.sampled_from(sorted(READERS)),
    vocabulary=st.sampled_from(sorted(VOCABULARIES)),
    run=runs(),
)
def test_every_carrier_gives_the_same_transcript(
    reader: str, vocabulary: str, run: tuple[str, list[Call], str]
) -> None:
    transcripts = {c: build_transcript(_trace(reader, vocabulary, c, run)) for c in CARRIERS}
    first = transcripts["attributes"]
    user, calls, answer = run
    # What the run was, read from the attributes ...
    assert first.user_input == user
    assert first.answer == answer
    assert [(c.name, c.call_id, c.result) for c in first.tool_calls] == [
        (name, call_id, result) for call_id, name, _, result in calls
    ]
    assert [json.loads(c.arguments or "null") for c in first.tool_calls] == [
        arguments for _, _, arguments, _ in calls
    ]
    assert not first.capture.missing
    # ... and the same from every other carrier.
    for carrier, transcript in transcripts.items():
        assert _content(transcript) == _content(first), carrier
        assert transcript.conventions == first.conventions, carrier
