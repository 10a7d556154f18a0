"""What a trace's producer captured, known from the trace itself, and what to set for the rest.

``read_capture`` fills :class:`sidecar.model.Capture` for ``build_transcript``:

- input / answer: captured when the transcript has them. The answer of a
  trace whose root never arrived is unknown for that reason, not for capture.
- tool calls: the model's turns are read in time order. A turn whose output
  was not captured but which asked for tools (``gen_ai.response.finish_reasons``
  ``tool_calls``, OpenInference ``llm.finish_reason``, legacy
  ``gen_ai.completion.N.finish_reason``; ``tool_use`` and ``function_call``
  too) is *seen* when a tool execution span follows it before the next turn,
  or when the next turn's input was captured (it repeats the request in its
  history); otherwise it is one *unseen* request: its calls (how many, which
  tools, what arguments) are not captured. A turn with tools offered and
  neither output nor finish reason leaves the tool calls unknown as well.
- tool arguments and results: captured when every call has them (a failed
  call has no result by nature) and no call is unseen.

A field missing although a carrier of it is on the trace in a shape no
reader understands (``Reading.unreadable``) is ``UNREADABLE`` instead, the
carrier and its span named in ``Capture.unreadable``: the content was
captured, and no setting is advised for it.

``advice`` names the setting that captures content for the instrumentation
that emitted the spans, read from their instrumentation scopes
(:data:`ADVICE`); checks and judge put it in their ERROR reasons, and
:class:`CaptureWarnings` logs it once per agent and field.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from sidecar.evaluate.conventions import Reading, Role, text_of
from sidecar.model import Capture, Captured, ContentField, Span, ToolCall, Transcript
from sidecar.text import clipped

__all__ = ["ADVICE", "GENERIC_ADVICE", "CaptureWarnings", "advice_for", "read_capture"]

log = logging.getLogger(__name__)

_TOOL_FINISH = frozenset({"tool_calls", "tool_call", "tool_use", "function_call", "function_calls"})

# Instrumentation scope prefix -> the producer setting that captures message content.
ADVICE: tuple[tuple[str, str], ...] = (
    (
        "gcp.vertex.agent",
        "set OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY in the ADK agent "
        "(or EVENT_ONLY with its logs exported to the sidecar; on ADK's legacy schema, "
        "ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1, ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS=true)",
    ),
    (
        "opentelemetry.instrumentation.openai",
        "set OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental and "
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only in the agent "
        "(or event_only with its logs exported to the sidecar)",
    ),
    (
        "opentelemetry.util.genai",
        "set OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental and "
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only in the agent "
        "(or event_only with its logs exported to the sidecar)",
    ),
    (
        "openinference",
        "unset OPENINFERENCE_HIDE_INPUTS, OPENINFERENCE_HIDE_OUTPUTS and the other "
        "OPENINFERENCE_HIDE_* content settings in the agent",
    ),
    (
        "pydantic-ai",
        "keep include_content=True (the default) in the agent's InstrumentationSettings",
    ),
    (
        "strands.telemetry",
        "drop gen_ai_unredacted_attributes from OTEL_SEMCONV_STABILITY_OPT_IN in the agent "
        "(or list the content attributes in it)",
    ),
    ("opentelemetry.instrumentation", "set TRACELOOP_TRACE_CONTENT=true in the agent"),
    ("traceloop", "set TRACELOOP_TRACE_CONTENT=true in the agent"),
)
GENERIC_ADVICE = (
    "turn on message content capture in the agent's instrumentation "
    "(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT for OTel GenAI instrumentations)"
)


def advice_for(scopes: Sequence[str]) -> str:
    """The settings for the instrumentations named by ``scopes``, each once, in scope order."""
    found: list[str] = []
    for scope in scopes:
        for prefix, advice in ADVICE:
            if scope.startswith(prefix):
                if advice not in found:
                    found.append(advice)
                break
    return "; ".join(found) or GENERIC_ADVICE


def read_capture(
    steps: Sequence[tuple[Span, Reading | None]],
    *,
    user_input: str | None,
    answer: str | None,
    answer_unknown: bool,
    tool_calls: Sequence[ToolCall],
) -> Capture:
    """The capture record of one transcript; ``steps`` in start order."""
    llm = [(span, r) for span, r in steps if r is not None and r.role is Role.LLM]
    tools = [span for span, r in steps if r is not None and r.role is Role.TOOL]
    unseen = 0
    unknown = False
    for index, (span, reading) in enumerate(llm):
        if reading.outputs is not None:
            continue
        following = llm[index + 1] if index + 1 < len(llm) else None
        until = following[0].start_time_unix_nano if following else None
        executed = any(
            t.start_time_unix_nano >= span.start_time_unix_nano
            and (until is None or t.start_time_unix_nano <= until)
            for t in tools
        )
        repeated = following is not None and following[1].inputs is not None
        if executed or repeated:
            continue
        reasons = finish_reasons(span)
        if reasons & _TOOL_FINISH:
            unseen += 1
        elif not reasons and tools_offered(span):
            unknown = True
    requested = sum(1 for c in tool_calls if c.span_id is None)
    calls_state = _state(bool(tool_calls), unseen > 0 or unknown)
    incomplete = unseen > 0 or unknown
    # A trace with no model call, no tool and no agent run (only the definition of an
    # agent, say) had no input or answer to capture: no setting would bring one.
    ran = bool(llm or tools) or any(r is not None and r.role is Role.AGENT for _, r in steps)
    capture = Capture(
        input=(
            Captured.CAPTURED
            if user_input is not None
            else Captured.NOT_CAPTURED
            if ran
            else Captured.NOT_APPLICABLE
        ),
        answer=(
            Captured.CAPTURED
            if answer is not None
            else Captured.NOT_APPLICABLE
            if answer_unknown or not ran
            else Captured.NOT_CAPTURED
        ),
        tool_calls=calls_state,
        tool_call_arguments=_state(
            bool(tool_calls), incomplete or any(c.arguments is None for c in tool_calls)
        ),
        tool_call_results=_state(
            bool(tool_calls),
            incomplete or any(c.result is None and c.error is None for c in tool_calls),
        ),
        requested_tool_calls=requested,
        unseen_tool_calls=unseen,
    )
    if not capture.missing:
        return capture
    capture = _unreadable(capture, steps)
    if not capture.missing:
        return capture
    scopes = [span.scope_name for span, r in steps if r is not None and r.role is not Role.OTHER]
    return replace(capture, advice=advice_for(list(dict.fromkeys(scopes))))


# Which fields a carrier of each side feeds (Reading.unreadable is "side:carrier").
_SIDE_FIELDS: dict[str, tuple[ContentField, ...]] = {
    "input": (ContentField.INPUT, ContentField.TOOL_CALL_RESULTS),
    "output": (ContentField.ANSWER, ContentField.TOOL_CALLS, ContentField.TOOL_CALL_ARGUMENTS),
    "arguments": (ContentField.TOOL_CALL_ARGUMENTS,),
    "result": (ContentField.TOOL_CALL_RESULTS,),
}


def _unreadable(capture: Capture, steps: Sequence[tuple[Span, Reading | None]]) -> Capture:
    """Missing fields whose carrier is present but unreadable become ``UNREADABLE``."""
    where: dict[ContentField, str] = {}
    for span, reading in steps:
        if reading is None or not reading.unreadable:
            continue
        for carrier in reading.unreadable:
            side, _, name = carrier.partition(":")
            for content in _SIDE_FIELDS.get(side, ()):
                where.setdefault(content, f"{name} on span {span.name!r} {span.span_id}")
    changed = {
        content.value: Captured.UNREADABLE for content in capture.missing if content in where
    }
    if not changed:
        return capture
    first = next(where[c] for c in capture.missing if c in where)
    return replace(capture, unreadable=first, **changed)  # type: ignore[arg-type]


def _state(present: bool, missing: bool) -> Captured:
    if missing:
        return Captured.NOT_CAPTURED
    return Captured.CAPTURED if present else Captured.NOT_APPLICABLE


def finish_reasons(span: Span) -> frozenset[str]:
    """The finish reasons an LLM span reports, lower case, in any convention."""
    attrs = span.attributes
    found: list[str] = []
    value = attrs.get("gen_ai.response.finish_reasons")
    if isinstance(value, list):
        found.extend(t for v in value if (t := text_of(v)))
    elif (text := text_of(value)) is not None:
        found.append(text)
    for key, item in attrs.items():
        if (
            key == "llm.finish_reason"
            or (key.startswith("gen_ai.completion.") and key.endswith(".finish_reason"))
        ) and (text := text_of(item)) is not None:
            found.append(text)
    return frozenset(r.strip().lower() for r in found)


def tools_offered(span: Span) -> bool:
    """The model was offered tools on this call (tool definitions on the span)."""
    return any(
        key in ("gen_ai.tool.definitions", "gen_ai.request.tools")
        or key.startswith(("llm.tools.", "llm.request.functions."))
        for key in span.attributes
    )


class CaptureWarnings:
    """Logs, once per agent and field, that content was not captured and what to set.

    Content captured in a shape no reader understands is logged the same way,
    once per agent and field, naming the carrier and never advising a setting.
    Bounded: after ``limit`` distinct (agent, field) pairs it stays quiet (the
    metrics ``sidecar_content_not_captured_total`` and
    ``sidecar_content_unreadable_total`` still count every trace).
    """

    def __init__(self, limit: int = 1000, logger: logging.Logger | None = None) -> None:
        self.limit = limit
        self._log = logger if logger is not None else log
        self._warned: set[tuple[str, ContentField]] = set()

    def note(self, transcript: Transcript) -> list[ContentField]:
        """Warn about the fields of ``transcript`` not yet warned about for its agent."""
        capture = transcript.capture
        fields = (*capture.missing, *capture.unreadable_fields)
        if not fields:
            return []
        # Cut: the key is kept (up to ``limit`` of them) and shown in the warning.
        agent = clipped(transcript.agent_name or "unknown")
        new = [f for f in fields if (agent, f) not in self._warned]
        new = new[: max(0, self.limit - len(self._warned))]
        for content in new:
            self._warned.add((agent, content))
            if capture.state(content) is Captured.UNREADABLE:
                self._log.warning(
                    "agent %s: %s %s (first seen in trace %s), so the checks and criteria "
                    "that need it are ERROR",
                    agent,
                    content.value.replace("_", " "),
                    capture.unreadable_note,
                    transcript.trace_id,
                )
                continue
            self._log.warning(
                "agent %s: %s not captured in its traces (first seen in trace %s), so the "
                "checks and criteria that need it are ERROR; %s",
                agent,
                content.value.replace("_", " "),
                transcript.trace_id,
                transcript.capture.advice or GENERIC_ADVICE,
            )
        return new
