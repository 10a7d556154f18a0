"""Builders for the records tests feed sidecar: tool calls, transcripts, rubrics, spans, traces.

Every builder returns a valid record from its defaults and takes the record's
own field names as keyword overrides, so a test names only what it is about::

    transcript(tool_call("issue_refund", {"amount": 40}), answer="Refunded $40.")
    rubric(checks=[{"name": "clean", "type": "no_error_spans"}])
    root = span("invoke_agent shop")
    trace(root, span("chat", parent=root))

The defaults describe an ordinary captured run (a question, an answer, a
latency); ``None`` means *not captured*, as in the records themselves.
``refund_rubric`` and ``refund_transcript`` are the refund case the judge tests
grade; ``genai_trace`` is a whole OTel GenAI agent run as decoded spans.
Everything is deterministic: ids are constants, counters or hashes of the
span's own fields, times fixed steps. Expected values in assertions are
written as the records themselves.

(OTel SDK spans, OTLP requests and the ADK agent's traces come from
``tests/agents``; this module builds sidecar's records only.)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml

from sidecar.evaluate.rubric import Rubric
from sidecar.evaluate.verdict import Verdict, make_verdict
from sidecar.model import (
    AttrValue,
    CheckResult,
    CriterionResult,
    DecideReason,
    Outcome,
    Span,
    SpanEvent,
    SpanKind,
    StatusCode,
    ToolCall,
    Trace,
    Transcript,
)

# The W3C trace-context example ids.
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
ROOT_SPAN_ID = "b7ad6b7169203331"
MS = 1_000_000  # nanoseconds


def trace_id(n: int) -> str:
    """The n-th trace id, as 32 lowercase hex digits."""
    return f"{n:032x}"


def span_id(n: int) -> str:
    """The n-th span id of a trace, as 16 lowercase hex digits."""
    return f"{n:016x}"


# --- tool calls and transcripts -----------------------------------------------------------


def tool_call(
    name: str,
    arguments: Any = "{}",
    result: str | None = "ok",
    *,
    error: str | None = None,
    call_id: str | None = None,
    untrusted: bool = False,
    span_id: str | None = None,
) -> ToolCall:
    """A finished tool call; ``arguments`` is JSON text, a value to encode, or None (not captured)."""
    text = arguments if arguments is None or isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall(
        name=name,
        call_id=call_id,
        arguments=text,
        result=result,
        error=error,
        untrusted=untrusted,
        span_id=span_id,
    )


def transcript(
    *tool_calls: ToolCall,
    trace_id: str = TRACE_ID,
    root_span_id: str | None = ROOT_SPAN_ID,
    user_input: str | None = "Please help.",
    answer: str | None = "Done.",
    latency_ms: float | None = 1200.0,
    **fields: Any,
) -> Transcript:
    """A transcript of one run that called ``tool_calls``; other fields as ``Transcript`` names them."""
    return Transcript(
        trace_id=trace_id,
        root_span_id=root_span_id,
        user_input=user_input,
        tool_calls=tool_calls,
        answer=answer,
        latency_ms=latency_ms,
        **fields,
    )


# --- rubrics ------------------------------------------------------------------------------

JUDGE_MODEL = "gemini-2.5-flash"


def criterion(name: str, **fields: Any) -> dict[str, Any]:
    """A judge criterion as a rubric file writes it; definition and examples follow the name."""
    return {
        "name": name,
        "definition": f"The answer is {name}.",
        "pass_example": f"A {name} answer.",
        "fail_example": f"An answer that is not {name}.",
        **fields,
    }


def judge_block(
    *criteria: str | Mapping[str, Any],
    model: str = JUDGE_MODEL,
    instructions: str = "Grade the answer.",
    **fields: Any,
) -> dict[str, Any]:
    """A rubric's ``judge`` block; a criterion given by name is ``criterion(name)``."""
    return {
        "model": model,
        "instructions": instructions,
        "criteria": [criterion(c) if isinstance(c, str) else dict(c) for c in criteria],
        **fields,
    }


def sampling(judge_ratio: float, *always_judge: str) -> dict[str, Any]:
    """A rubric's ``sampling`` block: judge this share of traces, and always on these rules."""
    return {"judge_ratio": judge_ratio, "always_judge": list(always_judge)}


def rubric(base: Mapping[str, Any] | None = None, /, **fields: Any) -> Rubric:
    """A rubric validated as if read from a file: ``base`` then ``fields``, keys as in YAML.

    Without them it is rubric ``r`` version ``1`` with no checks and no judge.
    """
    return Rubric.model_validate({"id": "r", "version": "1", **(base or {}), **fields})


def rubric_yaml(base: Mapping[str, Any] | None = None, /, **fields: Any) -> str:
    """``base`` updated with ``fields`` as a rubric file's YAML text; a field set to None is left out.

    Unlike ``rubric`` nothing is added or validated: this is the input of the parser's tests.
    """
    data = {**(base or {}), **fields}
    return yaml.safe_dump({k: v for k, v in data.items() if v is not None}, sort_keys=False)


# --- the refund case the judge tests grade ------------------------------------------------

CRITERIA = ("grounded", "polite")
ANSWER = "Your refund of 42.50 EUR for order A-1001 was approved and will arrive in 3 days."
TOOL_RESULT = '{"order": "A-1001", "refund": "approved", "amount": 42.5}'


def refund_rubric(
    *,
    model: str = JUDGE_MODEL,
    criteria: Sequence[str | Mapping[str, Any]] = CRITERIA,
    on_injection_suspected: str = "review",
    **fields: Any,
) -> Rubric:
    """Rubric ``refunds`` v3: a judge grading ``criteria`` (grounded, polite) with ``model``."""
    judge = judge_block(
        *criteria,
        model=model,
        instructions="Grade the support agent's refund answer.",
        on_injection_suspected=on_injection_suspected,
    )
    return rubric(id="refunds", version="3", judge=judge, **fields)


def refund_transcript(
    *,
    answer: str = ANSWER,
    user_input: str = "Where is my refund for order A-1001?",
    tool_result: str = TOOL_RESULT,
    trace_id: str = TRACE_ID,
) -> Transcript:
    """The support agent looked order A-1001 up (``tool_result``) and answered ``answer``."""
    return transcript(
        tool_call("lookup_order", '{"order": "A-1001"}', tool_result, call_id="call-1"),
        trace_id=trace_id,
        agent_name="support",
        agent_version="1.4.0",
        user_input=user_input,
        answer=answer,
        models=("gemini-2.0-flash",),
    )


# --- spans and traces ---------------------------------------------------------------------

ToolSpec = tuple[str, Mapping[str, Any], str | None]


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


def numbered_span(
    n: int,
    *,
    trace: int = 1,
    parent: int | None = None,
    name: str = "work",
    kind: SpanKind = SpanKind.INTERNAL,
    start: int | None = None,
    attrs: Mapping[str, Any] | None = None,
) -> Span:
    """Span ``span_id(n)`` of trace ``trace_id(trace)``, child of span number ``parent``.

    It starts at ``n`` ns (or ``start``) and lasts 1 ns, so spans sort by number.
    """
    begin = n if start is None else start
    return span(
        name,
        trace_id=trace_id(trace),
        span_id=span_id(n),
        parent=None if parent is None else span_id(parent),
        attrs=attrs,
        start=begin,
        end=begin + 1,
        kind=kind,
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


def with_spans(base: Trace, *extra: Span) -> Trace:
    """``base`` with more spans added (e.g. another convention's spans)."""
    return Trace(
        trace_id=base.trace_id,
        spans=(*base.spans, *extra),
        reason=base.reason,
        truncated=base.truncated,
    )


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


def metric_verdict(
    trace_id: str = TRACE_ID,
    agent: str | None = "refund-agent",
    version: str | None = "1.4.2",
    **overrides: Any,
) -> Verdict:
    """A judged verdict with one failing and one passing check, one criterion in error."""
    fields: dict[str, Any] = {
        "rubric_id": "refund-support",
        "rubric_version": "3",
        "judge_model": "gemini-2.5-flash",
        "checks": [
            CheckResult("allowed_tools", Outcome.FAIL, detail=f"trace {trace_id} called x"),
            CheckResult("fast_enough", Outcome.PASS, gate=False),
        ],
        "criteria": [
            CriterionResult("correct_amount", Outcome.PASS, evidence="refund of $40"),
            CriterionResult("polite", Outcome.ERROR, gate=False, reason="missing"),
        ],
        "judged": True,
        "sample_reason": "ratio",
        "judge_model_version": "gemini-2.5-flash-001",
    }
    fields.update(overrides)
    tx = transcript(trace_id=trace_id, agent_name=agent, agent_version=version, answer="hi")
    return make_verdict(tx, **fields)
