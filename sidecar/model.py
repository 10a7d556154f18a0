"""Plain records that flow through the pipeline.

Everything here is immutable data with no I/O: spans and log records as
decoded from OTLP, assembled traces, transcripts, and the results of checks, criteria and
verdicts. Stages take these and return these.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeAlias

from sidecar.fastrecord import record_builder

AttrValue: TypeAlias = (
    "str | bool | int | float | bytes | list[AttrValue] | dict[str, AttrValue] | None"
)
Attributes: TypeAlias = Mapping[str, AttrValue]


class SpanKind(enum.IntEnum):
    UNSPECIFIED = 0
    INTERNAL = 1
    SERVER = 2
    CLIENT = 3
    PRODUCER = 4
    CONSUMER = 5


class StatusCode(enum.IntEnum):
    UNSET = 0
    OK = 1
    ERROR = 2


@dataclass(frozen=True, slots=True)
class SpanEvent:
    name: str
    time_unix_nano: int
    attributes: Attributes = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Span:
    """One finished span, ids as lowercase hex, attribute values as plain Python.

    OTLP ``kvlistValue`` becomes ``dict`` and ``arrayValue`` becomes ``list``.
    ``parent_span_id`` is ``None`` for a root span.
    """

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: SpanKind = SpanKind.INTERNAL
    start_time_unix_nano: int = 0
    end_time_unix_nano: int = 0
    attributes: Attributes = field(default_factory=dict)
    resource: Attributes = field(default_factory=dict)
    scope_name: str = ""
    status_code: StatusCode = StatusCode.UNSET
    status_message: str = ""
    events: tuple[SpanEvent, ...] = ()
    # Attribute values left out (kept as None) because they nest too deeply to read.
    unreadable: int = 0
    # Text values repaired on the way in (invalid UTF-8 or lone surrogates became U+FFFD).
    repaired: int = 0

    @property
    def duration_ms(self) -> float:
        return max(0, self.end_time_unix_nano - self.start_time_unix_nano) / 1e6


# The decoders build their records through these (sidecar.fastrecord): every field
# required, so a decoder cannot leave one out.
new_span = record_builder(Span)
new_span_event = record_builder(SpanEvent)


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One OTLP log record, ids as lowercase hex (``None`` when the record has none).

    ``event_name`` is the record's ``event_name`` field (OTLP 1.5+), else its
    ``event.name`` attribute, else ``""``. ``body`` is the AnyValue as plain
    Python (a kvlist becomes ``dict``), ``None`` when absent.
    """

    trace_id: str | None
    span_id: str | None
    event_name: str = ""
    time_unix_nano: int = 0
    attributes: Attributes = field(default_factory=dict)
    body: AttrValue = None
    resource: Attributes = field(default_factory=dict)
    scope_name: str = ""
    # Values (attributes or body) left out as None because they nest too deeply to read.
    unreadable: int = 0


new_log_record = record_builder(LogRecord)


@dataclass(frozen=True, slots=True)
class RecordRef:
    """Where a span came from: a Kafka partition and offset (or a file line)."""

    partition: int
    offset: int


class DecideReason(enum.StrEnum):
    """Why the assembler handed a trace on (label of sidecar_traces_decided_total)."""

    COMPLETE = "complete"  # root ended and decision_wait passed quietly
    MAX_AGE = "max_age"  # max_trace_age reached without a finished root
    EVICTED = "evicted"  # max_open_traces reached; oldest decided early
    SPAN_LIMIT = "span_limit"  # max_spans_per_trace reached
    SHUTDOWN = "shutdown"  # decided early while draining
    FLUSH = "flush"  # end of input in replay


class Flag(enum.StrEnum):
    """Why a trace's evidence is incomplete or suspect.

    Carried by the transcript and the verdict (``flags``); the label of
    ``sidecar_flagged_traces_total``. What a flag makes undecidable is ERROR.
    """

    INCOMPLETE = "incomplete"  # the root span never arrived
    PARTIAL = "partial"  # earlier records of the trace lie below the committed offset
    DUPLICATE_SPAN_IDS = "duplicate_span_ids"  # two different spans share one span id
    IMPOSSIBLE_TIMING = "impossible_timing"  # a span ends before it starts
    UNREADABLE_VALUES = "unreadable_values"  # values nested too deeply to read
    # Text that could not be encoded (invalid UTF-8, lone surrogates) was repaired
    # to U+FFFD on the way in; the verdict is what the text says without it.
    REPAIRED_TEXT = "repaired_text"
    # A conversation decided at the open-conversation bound: later turns may follow.
    DECIDED_EARLY = "decided_early"
    # A conversation judged without some earlier turns (with ``partial``): its decided
    # state is known but the turns could not be read back from eval_turns (retention) ...
    EARLIER_TURNS_MISSING = "earlier_turns_missing"
    # ... or its first turn's own input history shows user turns that were never seen.
    EARLIER_TURNS_UNSEEN = "earlier_turns_unseen"


@dataclass(frozen=True, slots=True)
class Trace:
    """An assembled trace, ready to become a transcript.

    ``partial``: some of its records were read, and decided, by an earlier
    owner of the partition (they lie below the committed offset), so this is
    only the rest of it.
    """

    trace_id: str
    spans: tuple[Span, ...]
    reason: DecideReason
    truncated: bool = False
    has_root: bool = True
    # Lowest contributing offset per partition; the commit rule needs it.
    first_offsets: Mapping[int, int] = field(default_factory=dict)
    partial: bool = False
    # Log records that joined the trace (GenAI content as events), in arrival order,
    # and the lowest contributing offset per partition of the logs topic.
    logs: tuple[LogRecord, ...] = ()
    first_log_offsets: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool execution. ``None`` means *not captured*, never *empty*."""

    name: str
    call_id: str | None = None
    arguments: str | None = None  # JSON text as recorded
    result: str | None = None
    error: str | None = None
    untrusted: bool = False
    span_id: str | None = None


# The transcript and the checks build many of these (sidecar.fastrecord).
new_tool_call = record_builder(ToolCall, defaults=True)


class ContentField(enum.StrEnum):
    """Content a producer may or may not capture (label of sidecar_content_not_captured_total)."""

    INPUT = "input"  # what the user asked
    ANSWER = "answer"  # what the agent answered
    TOOL_CALLS = "tool_calls"  # which tools were called (names)
    TOOL_CALL_ARGUMENTS = "tool_call_arguments"
    TOOL_CALL_RESULTS = "tool_call_results"


# Iterating an enum class builds its members anew each time; hot paths use this tuple.
_CONTENT_FIELDS = tuple(ContentField)


class Captured(enum.StrEnum):
    CAPTURED = "captured"
    NOT_CAPTURED = "not_captured"
    NOT_APPLICABLE = "not_applicable"  # e.g. tool arguments of a run that called no tool
    # The producer captured it, in a shape no reader understands (reason unreadable_shape).
    UNREADABLE = "unreadable"


UNREADABLE_SHAPE = "unreadable_shape"


@dataclass(frozen=True, slots=True)
class Capture:
    """What the producer captured of a trace's content, field by field.

    Known from the trace, never guessed: a field is ``NOT_CAPTURED`` when the
    trace shows it exists but carries none of it (no messages on the LLM
    spans, a tool call without arguments, a model that asked for tools
    (``finish_reasons`` ``tool_calls``) whose calls appear nowhere).

    ``requested_tool_calls``: calls known only from the model's messages (no
    execution span). ``unseen_tool_calls``: model turns that requested tools
    whose calls cannot be seen at all, a lower bound of the calls missing.
    ``advice``: the producer setting that captures what is missing, named from
    the instrumentation that emitted the spans ("" when nothing is missing).
    A field is ``UNREADABLE`` when its carrier is on the trace but in a shape
    no reader understands: ``unreadable`` names the carrier and the span, and
    no setting is advised, since capture is on.
    """

    input: Captured = Captured.CAPTURED
    answer: Captured = Captured.CAPTURED
    tool_calls: Captured = Captured.NOT_APPLICABLE
    tool_call_arguments: Captured = Captured.NOT_APPLICABLE
    tool_call_results: Captured = Captured.NOT_APPLICABLE
    requested_tool_calls: int = 0
    unseen_tool_calls: int = 0
    advice: str = ""
    unreadable: str = ""

    def state(self, content: ContentField) -> Captured:
        state: Captured = getattr(self, content.value)
        return state

    def _states(self) -> tuple[Captured, ...]:
        # In the order of ContentField (checked by tests/test_capture.py).
        return (
            self.input,
            self.answer,
            self.tool_calls,
            self.tool_call_arguments,
            self.tool_call_results,
        )

    def _fields_in(self, state: Captured) -> tuple[ContentField, ...]:
        states = self._states()
        if state not in states:  # every trace asks; most captured all
            return ()
        return tuple(f for f, s in zip(_CONTENT_FIELDS, states, strict=True) if s is state)

    @property
    def missing(self) -> tuple[ContentField, ...]:
        return self._fields_in(Captured.NOT_CAPTURED)

    @property
    def unreadable_fields(self) -> tuple[ContentField, ...]:
        return self._fields_in(Captured.UNREADABLE)

    def reason(self, *fields: ContentField) -> str:
        """``tool call results not captured; set ...``: the ERROR detail for ``fields``.

        Fields captured in an unreadable shape say so instead (``unreadable_shape``).
        """
        unreadable = [f for f in fields if self.state(f) is Captured.UNREADABLE]
        if unreadable:
            names = " and ".join(f.value.replace("_", " ") for f in unreadable)
            return f"{names} {self.unreadable_note}"
        names = " and ".join(f.value.replace("_", " ") for f in fields) or "content"
        advice = f"; {self.advice}" if self.advice else ""
        return f"{names} not captured{advice}"

    @property
    def unreadable_note(self) -> str:
        """``unreadable_shape: ...``, what follows a field's name when its shape is not read."""
        return (
            f"{UNREADABLE_SHAPE}: captured ({self.unreadable}) in a shape sidecar does not "
            "read; no capture setting needs changing"
        )


@dataclass(frozen=True, slots=True)
class ErrorSpan:
    span_id: str
    name: str
    message: str


@dataclass(frozen=True, slots=True)
class Transcript:
    """What the agent was asked, what it did and what it answered.

    Missing content (content capture off, convention not recognised, a value
    too deep to read, the answer of a trace whose root never came) is
    ``None``; checks and the judge report *insufficient evidence* for it.
    ``flags`` say why the evidence is incomplete or suspect.
    """

    trace_id: str
    root_span_id: str | None
    agent_name: str | None = None
    agent_version: str | None = None
    user_input: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    answer: str | None = None
    models: tuple[str, ...] = ()
    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: float | None = None
    error_spans: tuple[ErrorSpan, ...] = ()
    conventions: tuple[str, ...] = ()
    resource: Attributes = field(default_factory=dict)
    root_attributes: Attributes = field(default_factory=dict)
    reference: str | None = None
    truncated: bool = False
    flags: tuple[Flag, ...] = ()
    # Why latency_ms is None when the root span was seen (e.g. it ends before it starts).
    latency_error: str | None = None
    capture: Capture = field(default_factory=Capture)
    # Only LLM calls: no agent span, no tool span (an instrumented client without an agent span).
    llm_only: bool = False
    # When the trace ran, Unix nanoseconds (sidecar.evaluate.transcript.trace_times); None
    # when no span says. A conversation's: its first turn's start and its last turn's end.
    start_unix_nano: int | None = None
    end_unix_nano: int | None = None
    # A conversation's transcript (sidecar.conversation) holds its turns, in order; () for a trace.
    turns: tuple[Transcript, ...] = ()
    # User messages with text before the last one in the first LLM call's input: the
    # session history an agent sent (read with the spans, for the trace's turn record).
    earlier_user_messages: int = 0


class Outcome(enum.StrEnum):
    """Result of one check or one criterion."""

    PASS = "PASS"
    FAIL = "FAIL"
    ERROR = "ERROR"
    SKIPPED = "SKIPPED"


class CaseOutcome(enum.StrEnum):
    ACCEPTABLE = "acceptable"
    UNACCEPTABLE = "unacceptable"
    ERRORED = "errored"


@dataclass(frozen=True, slots=True)
class CheckResult:
    name: str
    outcome: Outcome
    gate: bool = True
    detail: str = ""


new_check_result = record_builder(CheckResult)


@dataclass(frozen=True, slots=True)
class CriterionResult:
    name: str
    outcome: Outcome
    gate: bool = True
    evidence: str | None = None
    reason: str | None = None  # why ERROR/SKIPPED (e.g. "missing", "unsupported_evidence")


@dataclass(frozen=True, slots=True)
class JudgeCallRecord:
    """One attempt at a judge call, as the judge's own span shows it: no content, only facts.

    ``model`` is the model asked for, ``response_model`` the version the service
    said served it (None: no answer). Times are Unix nanoseconds from the wall
    clock; a cache hit or an attempt the open breaker refused lasts no time.
    ``error`` is why the attempt failed (a judge failure reason), None when it
    answered; ``attempt`` counts from 1 within one case; ``purpose`` is who the
    call was made for (production, canary, shadow).
    """

    model: str
    provider: str
    start_unix_nano: int
    end_unix_nano: int
    attempt: int = 1
    response_model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    error: str | None = None
    cached: bool = False
    purpose: str = "production"
