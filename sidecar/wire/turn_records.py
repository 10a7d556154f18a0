"""The turn record: one trace's transcript as the trace stage hands it to the conversation stage.

One record per (trace, conversation id) goes to the ``eval_turns`` topic,
keyed by the conversation id, so all turns of a conversation land on one
partition and one consumer. It carries what the checks and the judge read of
the turn (input, tool calls, answer, models, tokens, latency, error spans,
flags), the ids (trace, root span) and the trace's start and end times (Unix
nanoseconds, 0 when unknown; the same times as the verdict record's
``trace_start`` and ``trace_end``), plus the ids of the conversation rubrics
the trace matched. It is not the raw spans. The trace stage builds it
(:mod:`sidecar.conversation.turn_builder`).

Versioned: ``v`` is :data:`TURN_RECORD_VERSION`; a reader refuses a record of
another version or shape, unknown keys included, with a
:class:`~sidecar.errors.RecordError` (the stage counts it as malformed and
moves on). Bounded: each text value is cut to :data:`MAX_TEXT_CHARS`
characters (the cut is marked and the turn is flagged ``truncated``), and at
most :data:`MAX_TOOL_CALLS` calls are kept. The content is what the spans
topic already carries; it is not redacted here.

``earlier_user_messages``: how many user messages come before the last one in
the input of the turn's first LLM call (ADK and chat-completion agents send
the session's history there). More than zero on the first turn the
conversation stage sees means earlier turns were never seen; it is written
only when above zero, so records without it read as before.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from sidecar.model import ErrorSpan, Flag, ToolCall, Transcript
from sidecar.wire._base import InternalId, InternalRecord, parse_json_record

TURN_RECORD_VERSION: Literal[1] = 1
MAX_TEXT_CHARS = 65_536
MAX_TOOL_CALLS = 500


def _zero(value: int) -> bool:
    return not value


class TurnToolCall(InternalRecord):
    name: str
    call_id: str | None = None
    arguments: str | None = None
    result: str | None = None
    error: str | None = None
    untrusted: bool = False
    span_id: str | None = None


class TurnErrorSpan(InternalRecord):
    span_id: str
    name: str
    message: str


class TurnRecord(InternalRecord):
    """One turn of one conversation (see the module docstring)."""

    FAMILY: ClassVar[str] = "turn record"
    VERSION: ClassVar[int] = TURN_RECORD_VERSION

    v: Literal[1] = TURN_RECORD_VERSION
    conversation_id: InternalId
    rubrics: Annotated[tuple[InternalId, ...], Field(min_length=1)]
    trace_id: InternalId
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
    earlier_user_messages: Annotated[int, Field(ge=0, exclude_if=_zero)] = 0

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
            start_unix_nano=self.start_unix_nano or None,
            end_unix_nano=self.end_unix_nano or None,
        )


def parse_turn(payload: bytes | None, where: str = "eval_turns") -> TurnRecord:
    """One turn record from the topic; RecordError naming ``where`` and the first problem."""
    return parse_json_record(TurnRecord, payload, where)
