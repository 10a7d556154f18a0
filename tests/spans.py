"""Builders for spans and traces in tests.

``span`` makes one ``Span`` with sensible defaults; ``trace`` wraps spans into
a ``Trace``; ``genai_trace`` builds a realistic OTel GenAI agent run
(``invoke_agent`` root, a ``chat`` span per model call, an ``execute_tool``
span per tool call). Everything is deterministic: ids come from counters or
from a hash of the span's own fields, times from fixed steps.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sidecar.model import (
    AttrValue,
    DecideReason,
    Span,
    SpanEvent,
    SpanKind,
    StatusCode,
    Trace,
)

TRACE_ID = "5b8efff798038103d269b633813fc60c"
MS = 1_000_000  # nanoseconds

ToolSpec = tuple[str, Mapping[str, Any], str | None]


def span_id(n: int) -> str:
    """The n-th span id of a trace, as 16 lowercase hex digits."""
    return f"{n:016x}"


def span(
    name: str,
    *,
    trace_id: str = TRACE_ID,
    span_id: str | None = None,
    parent: str | Span | None = None,
    attrs: Mapping[str, Any] | None = None,
    start: int = 0,
    end: int | None = None,
    resource: Mapping[str, Any] | None = None,
    status_error: str | bool | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
    scope: str = "",
    events: Iterable[SpanEvent] = (),
) -> Span:
    """One finished span; times in nanoseconds, ``end`` defaults to ``start + 1 ms``.

    ``parent`` is a span id or the parent ``Span``. Without ``span_id`` the id
    is a hash of trace id, name, start and parent: give spans that share all
    three an explicit id. ``status_error`` sets status ERROR, with the string
    as status message.
    """
    parent_id = parent.span_id if isinstance(parent, Span) else parent
    if span_id is None:
        seed = f"{trace_id}/{name}/{start}/{parent_id}".encode()
        span_id = hashlib.sha256(seed).hexdigest()[:16]
    return Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent_id,
        name=name,
        kind=kind,
        start_time_unix_nano=start,
        end_time_unix_nano=start + MS if end is None else end,
        attributes=dict(attrs or {}),
        resource=dict(resource or {}),
        scope_name=scope,
        status_code=StatusCode.ERROR if status_error else StatusCode.UNSET,
        status_message=status_error if isinstance(status_error, str) else "",
        events=tuple(events),
    )


def event(name: str, attrs: Mapping[str, Any] | None = None, time: int = 0) -> SpanEvent:
    return SpanEvent(name=name, time_unix_nano=time, attributes=dict(attrs or {}))


def trace(
    *spans: Span,
    truncated: bool = False,
    reason: DecideReason = DecideReason.COMPLETE,
) -> Trace:
    """A trace of ``spans``; the trace id is the first span's (``TRACE_ID`` when empty)."""
    trace_id = spans[0].trace_id if spans else TRACE_ID
    return Trace(trace_id=trace_id, spans=tuple(spans), reason=reason, truncated=truncated)


def genai_trace(
    user_input: str,
    tool_calls: Sequence[ToolSpec] = (),
    answer: str = "Done.",
    *,
    agent: str = "refund-agent",
    agent_version: str = "1.4.2",
    model: str = "gemini-2.5-flash",
    trace_id: str = TRACE_ID,
    service_name: str | None = None,
    capture_content: bool = True,
    structured: bool = False,
    usage: tuple[int, int] = (100, 20),
    failing_tools: Mapping[str, str] | None = None,
    root_attrs: Mapping[str, Any] | None = None,
    resource: Mapping[str, Any] | None = None,
) -> Trace:
    """A finished OTel GenAI (semconv 1.37) agent run.

    ``tool_calls`` are ``(name, arguments, result_text)``; the model asks for
    them one per ``chat`` call, then answers ``answer``. ``structured`` records
    messages and arguments as OTLP kvlist/array values (decoded to lists and
    dicts) instead of JSON strings; ``capture_content=False`` leaves content
    out as instrumentations do by default. ``usage`` is (input, output) tokens
    per chat call. ``failing_tools`` maps a tool name to the error its span
    ends with.
    """
    failing = dict(failing_tools or {})
    ids = iter(range(1, 10_000))
    res: dict[str, AttrValue] = {
        "service.name": service_name or agent,
        "service.version": agent_version,
        "telemetry.sdk.language": "python",
        **(resource or {}),
    }

    def content(value: Any) -> AttrValue:
        return value if structured else json.dumps(value, ensure_ascii=False, separators=(",", ":"))

    root_id = span_id(next(ids))
    children: list[Span] = []
    history: list[dict[str, Any]] = [
        {"role": "user", "parts": [{"type": "text", "content": user_input}]}
    ]
    clock = 1 * MS
    for turn in range(len(tool_calls) + 1):
        if turn < len(tool_calls):
            name, arguments, _ = tool_calls[turn]
            part = {
                "type": "tool_call",
                "id": f"call_{turn + 1}",
                "name": name,
                "arguments": dict(arguments),
            }
            output = {"role": "assistant", "parts": [part], "finish_reason": "tool_call"}
        else:
            text_part = {"type": "text", "content": answer}
            output = {"role": "assistant", "parts": [text_part], "finish_reason": "stop"}
        attrs: dict[str, AttrValue] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "gcp.gemini",
            "gen_ai.request.model": model,
            "gen_ai.response.model": model,
            "gen_ai.usage.input_tokens": usage[0],
            "gen_ai.usage.output_tokens": usage[1],
        }
        if capture_content:
            attrs["gen_ai.input.messages"] = content(list(history))
            attrs["gen_ai.output.messages"] = content([output])
        children.append(
            span(
                f"chat {model}",
                trace_id=trace_id,
                span_id=span_id(next(ids)),
                parent=root_id,
                attrs=attrs,
                start=clock,
                end=clock + 10 * MS,
                resource=res,
                kind=SpanKind.CLIENT,
            )
        )
        clock += 11 * MS
        if turn == len(tool_calls):
            break
        name, arguments, result = tool_calls[turn]
        call_id = f"call_{turn + 1}"
        tool_attrs: dict[str, AttrValue] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
        }
        if capture_content:
            tool_attrs["gen_ai.tool.call.arguments"] = content(dict(arguments))
            if result is not None:
                tool_attrs["gen_ai.tool.call.result"] = result
        if name in failing:
            tool_attrs["error.type"] = "ToolError"
        children.append(
            span(
                f"execute_tool {name}",
                trace_id=trace_id,
                span_id=span_id(next(ids)),
                parent=root_id,
                attrs=tool_attrs,
                start=clock,
                end=clock + 5 * MS,
                resource=res,
                status_error=failing.get(name),
            )
        )
        clock += 6 * MS
        history.append({"role": "assistant", "parts": [part]})
        response = {"type": "tool_call_response", "id": call_id, "response": result}
        history.append({"role": "tool", "parts": [response]})

    root = span(
        f"invoke_agent {agent}",
        trace_id=trace_id,
        span_id=root_id,
        attrs={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent,
            "gen_ai.agent.version": agent_version,
            "gen_ai.provider.name": "gcp.gemini",
            **(root_attrs or {}),
        },
        start=0,
        end=clock + MS,
        resource=res,
        kind=SpanKind.SERVER,
    )
    return trace(root, *children)


def with_spans(base: Trace, *extra: Span) -> Trace:
    """``base`` with more spans added (e.g. another convention's spans)."""
    return Trace(
        trace_id=base.trace_id,
        spans=(*base.spans, *extra),
        reason=base.reason,
        truncated=base.truncated,
    )
