"""The turn record: one trace's transcript as the trace stage hands it to the conversation stage.

One record per (trace, conversation id) goes to the ``eval_turns`` topic,
keyed by the conversation id, so all turns of a conversation land on one
partition and one consumer. It carries what the checks and the judge read of
the turn (input, tool calls, answer, models, tokens, latency, error spans,
flags), the ids (trace, root span) and the root's start and end times, plus
the ids of the conversation rubrics the trace matched. It is not the raw
spans.

Versioned: ``v`` is :data:`TURN_RECORD_VERSION`; a reader refuses a record of
another version or shape with a :class:`~sidecar.errors.RecordError` (the
stage counts it as malformed and moves on). Bounded: each text value is cut
to :data:`MAX_TEXT_CHARS` characters (the cut is marked and the turn is
flagged ``truncated``), and at most :data:`MAX_TOOL_CALLS` calls are kept.
The content is what the spans topic already carries; it is not redacted here.

``earlier_user_messages``: how many user messages come before the last one in
the input of the turn's first LLM call (ADK and chat-completion agents send
the session's history there). More than zero on the first turn the
conversation stage sees means earlier turns were never seen; it is written
only when above zero, so records without it read as before.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sidecar.conversation.key import conversation_id
from sidecar.errors import RecordError
from sidecar.evaluate.conventions import MessageMemo, Role, read_span
from sidecar.evaluate.rubric import Rubric
from sidecar.ingest.events import join_logs
from sidecar.model import ErrorSpan, Flag, Span, ToolCall, Trace, Transcript

TURN_RECORD_VERSION: Literal[1] = 1
MAX_TEXT_CHARS = 65_536
MAX_TOOL_CALLS = 500

Id = Annotated[str, Field(min_length=1, max_length=512)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TurnToolCall(_Model):
    name: str
    call_id: str | None = None
    arguments: str | None = None
    result: str | None = None
    error: str | None = None
    untrusted: bool = False
    span_id: str | None = None


class TurnErrorSpan(_Model):
    span_id: str
    name: str
    message: str


class TurnRecord(_Model):
    """One turn of one conversation (see the module docstring)."""

    v: Literal[1] = TURN_RECORD_VERSION
    conversation_id: Id
    rubrics: Annotated[tuple[Id, ...], Field(min_length=1)]
    trace_id: Id
    root_span_id: str | None = None
    start_unix_nano: int = 0
    end_unix_nano: int = 0
    agent: str | None = None
    agent_version: str | None = None
    user_input: str | None = None
    tool_calls: tuple[TurnToolCall, ...] = ()
    answer: str | None = None
    models: tuple[str, ...] = ()
    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: float | None = None
    latency_error: str | None = None
    error_spans: tuple[TurnErrorSpan, ...] = ()
    conventions: tuple[str, ...] = ()
    reference: str | None = None
    truncated: bool = False
    flags: tuple[Flag, ...] = ()
    earlier_user_messages: Annotated[int, Field(ge=0)] = 0

    @classmethod
    def of(
        cls,
        transcript: Transcript,
        trace: Trace,
        conversation_id: str,
        rubrics: Sequence[str],
    ) -> TurnRecord:
        """The turn record of ``transcript`` (read from ``trace``), with its values capped."""
        cut = _Cutter()
        calls = transcript.tool_calls[:MAX_TOOL_CALLS]
        start, end = root_times(trace)
        return cls(
            conversation_id=conversation_id,
            rubrics=tuple(rubrics),
            trace_id=transcript.trace_id,
            root_span_id=transcript.root_span_id,
            start_unix_nano=start,
            end_unix_nano=end,
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
            earlier_user_messages=earlier_user_messages(trace),
        )

    def transcript(self) -> Transcript:
        """The turn as a transcript, as the checks and the judge read it."""
        return Transcript(
            trace_id=self.trace_id,
            root_span_id=self.root_span_id,
            agent_name=self.agent,
            agent_version=self.agent_version,
            user_input=self.user_input,
            tool_calls=tuple(ToolCall(**c.model_dump()) for c in self.tool_calls),
            answer=self.answer,
            models=self.models,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            latency_ms=self.latency_ms,
            error_spans=tuple(ErrorSpan(**e.model_dump()) for e in self.error_spans),
            conventions=self.conventions,
            reference=self.reference,
            truncated=self.truncated,
            flags=self.flags,
            latency_error=self.latency_error,
        )

    def to_bytes(self) -> bytes:
        data = self.model_dump(mode="json")
        if not self.earlier_user_messages:
            del data["earlier_user_messages"]
        return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def parse_turn(payload: bytes | None, where: str = "eval_turns") -> TurnRecord:
    """One turn record from the topic; RecordError naming ``where`` and the first problem."""
    if payload is None:
        raise RecordError(f"{where}: record has no value")
    try:
        return TurnRecord.model_validate_json(payload)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        loc = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise RecordError(f"{where}: {loc}: {first['msg']}") from exc


def root_times(trace: Trace) -> tuple[int, int]:
    """(start, end) in Unix nanoseconds of the trace's root span, else of its earliest span."""
    roots = [s for s in trace.spans if s.parent_span_id is None]
    pool: Sequence[Span] = roots or trace.spans
    if not pool:
        return 0, 0
    first = min(pool, key=lambda s: s.start_time_unix_nano)
    return first.start_time_unix_nano, first.end_time_unix_nano


def earlier_user_messages(trace: Trace) -> int:
    """User messages with text before the last one in the first LLM call's input (see above)."""
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

    One record per conversation id (rubrics with different keys may see
    different ids), listing the rubrics it is a turn for. Also returns the ids
    of the rubrics that apply but find no conversation id (to be counted).
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
    records = [TurnRecord.of(transcript, trace, cid, ids) for cid, ids in by_id.items()]
    return records, without_key
