"""Turn records of a trace: what the trace stage publishes to ``eval_turns``.

The record itself is :class:`~sidecar.wire.turn_records.TurnRecord`. Here it
is made from a trace's transcript: one record per conversation id that the
trace's conversation rubrics find (rubrics with different keys may see
different ids), each listing the rubrics it is a turn for. Text values are
cut to ``MAX_TEXT_CHARS`` (the cut is marked, the turn flagged ``truncated``)
and at most ``MAX_TOOL_CALLS`` calls are kept; the times are the
transcript's (:func:`sidecar.evaluate.transcript.trace_times`).
"""

from __future__ import annotations

from collections.abc import Sequence

from sidecar.conversation.key import conversation_id
from sidecar.evaluate.conventions import MessageMemo, Role, read_span
from sidecar.evaluate.rubric import Rubric
from sidecar.ingest.events import join_logs
from sidecar.model import Trace, Transcript
from sidecar.wire.turn_records import (
    MAX_TEXT_CHARS,
    MAX_TOOL_CALLS,
    TurnErrorSpan,
    TurnRecord,
    TurnToolCall,
)


def turn_record(
    transcript: Transcript, trace: Trace, conversation_id: str, rubrics: Sequence[str]
) -> TurnRecord:
    """The turn record of ``transcript`` (read from ``trace``), with its values capped."""
    cut = _Cutter()
    calls = transcript.tool_calls[:MAX_TOOL_CALLS]
    return TurnRecord(
        conversation_id=conversation_id,
        rubrics=tuple(rubrics),
        trace_id=transcript.trace_id,
        root_span_id=transcript.root_span_id,
        start_unix_nano=transcript.start_unix_nano or 0,
        end_unix_nano=transcript.end_unix_nano or 0,
        agent=transcript.agent_name,
        agent_version=transcript.agent_version,
        user_input=cut(transcript.user_input),
        tool_calls=tuple(
            TurnToolCall(
                name=cut(c.name) or "",
                call_id=c.call_id,
                arguments=cut(c.arguments),
                result=cut(c.result),
                error=cut(c.error),
                untrusted=c.untrusted,
                span_id=c.span_id,
            )
            for c in calls
        ),
        answer=cut(transcript.answer),
        models=transcript.models,
        input_tokens=transcript.input_tokens,
        output_tokens=transcript.output_tokens,
        latency_ms=transcript.latency_ms,
        latency_error=transcript.latency_error,
        error_spans=tuple(
            TurnErrorSpan(span_id=e.span_id, name=e.name, message=cut(e.message) or "")
            for e in transcript.error_spans
        ),
        conventions=transcript.conventions,
        reference=cut(transcript.reference),
        truncated=transcript.truncated or cut.cut or len(transcript.tool_calls) > len(calls),
        flags=transcript.flags,
        # Read with the spans when the transcript was built (planning thread), not again here.
        earlier_user_messages=transcript.earlier_user_messages,
    )


def earlier_user_messages(trace: Trace) -> int:
    """User messages with text before the last one in the first LLM call's input.

    The reference reading of ``Transcript.earlier_user_messages`` from the raw
    spans (the transcript reads it as it is built; tests compare the two).

    ADK and chat-completion agents send the session's history there; more than
    zero on the first turn the conversation stage sees means earlier turns
    were never seen (``earlier_user_messages`` on the record).
    """
    memo = MessageMemo()
    spans = sorted(join_logs(trace.spans, trace.logs), key=lambda s: s.start_time_unix_nano)
    for span in spans:
        reading = read_span(span, memo)
        if reading is None or reading.role is not Role.LLM or not reading.inputs:
            continue
        users = sum(1 for m in reading.inputs if m.role == "user" and m.text)
        return max(0, users - 1)
    return 0


class _Cutter:
    """Cuts text values to MAX_TEXT_CHARS, marking the cut, and remembers whether it cut."""

    def __init__(self) -> None:
        self.cut = False

    def __call__(self, text: str | None) -> str | None:
        if text is None or len(text) <= MAX_TEXT_CHARS:
            return text
        self.cut = True
        return f"{text[:MAX_TEXT_CHARS]}…[truncated {len(text) - MAX_TEXT_CHARS} characters]"


def turn_records(
    trace: Trace, transcript: Transcript, rubrics: Sequence[Rubric]
) -> tuple[list[TurnRecord], list[str]]:
    """The turn records of one trace for the conversation rubrics that apply to it.

    One record per conversation id, listing the rubrics it is a turn for. Also
    returns the ids of the rubrics that apply but find no conversation id (to
    be counted).
    """
    by_id: dict[str, list[str]] = {}
    without_key: list[str] = []
    for rubric in rubrics:
        spec = rubric.conversational
        if spec is None or not rubric.applies(transcript.resource, transcript.root_attributes):
            continue
        found = conversation_id(spec, transcript)
        if found is None:
            without_key.append(rubric.id)
        else:
            by_id.setdefault(found, []).append(rubric.id)
    records = [turn_record(transcript, trace, cid, ids) for cid, ids in by_id.items()]
    return records, without_key
