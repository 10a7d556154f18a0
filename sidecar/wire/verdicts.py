"""The verdict record: written for every verdict, read back by calibrate, gate and diff.

Writing: :func:`verdict_json` (one line) and :func:`verdict_dict` (its plain
JSON values) build the record straight from a
:class:`~sidecar.evaluate.verdict.Verdict`, its content fields passed through
a :class:`~sidecar.wire.redaction.Redaction` (default
:data:`~sidecar.wire.redaction.DEFAULT_REDACTION`). The service writes one per
verdict, so this is plain dict building; the model below is for reading.

Reading: :class:`VerdictRecord` (through :func:`sidecar.wire.read_records`).
Only ``trace_id``, ``rubric_id``, ``rubric_version`` and ``judge_model`` are
required, so hand-made files may leave the rest out; a record written before
a field existed reads it as absent. Unknown keys are ignored. A record read
and written again (``VerdictRecord.to_json``) is the line it was read from.

The keys, in the order written:

- ``v``: the record's version, :data:`VERDICT_RECORD_VERSION`; absent on
  records of earlier releases, which read as version 1;
- ``id`` (the idempotency key), ``trace_id``, ``root_span_id``, ``rubric_id``,
  ``rubric_version``, ``judge_model``, ``agent``, ``agent_version``;
- ``trace_start``, ``trace_end``: when the trace ran, from its spans: the root
  span's start and end; for a trace whose root never arrived the earliest
  start and the latest end of its spans; on a conversation verdict the first
  turn's start and the last turn's end. Null only when no span carries the time;
- ``decided_at``: when the verdict was decided: the service's wall clock when
  it emitted the verdict; for ``replay``, ``demo`` and ``backfill`` the trace's
  end plus the assembler's ``decision_wait_s`` (so their output is the same on
  every run); null when neither is known. The three times are RFC 3339 UTC
  with microseconds (``2026-05-01T12:00:00.123456Z``, cut, not rounded, from
  the nanoseconds of the spans);
- ``outcome``, ``judged``, ``sample_reason``, ``injection_suspected``,
  ``review``, ``checks`` (name, outcome, gate, detail), ``criteria`` (name,
  outcome, gate, and ``evidence`` and ``reason`` when present), ``truncated``;
- ``flags`` when any, ``sidecar_version``;
- when present: ``rubric_hash`` and ``judge_model_version`` (provenance;
  when each is set: :mod:`sidecar.evaluate.verdict`),
  ``judge_error``, ``raw_output``, ``redacted`` (``hash`` or ``drop``: content
  was redacted so), ``backfill`` (true on verdicts of ``sidecar backfill``);
- on conversation verdicts only: ``scope: conversation``,
  ``conversation_id``, ``turns``, ``trace_ids``, ``revision``;
- on canary records only (``sidecar canary --records``, read by ``sidecar
  drift``): ``canary: true`` and ``labels``, the human reference label of
  each criterion (``{criterion: "PASS"|"FAIL"}``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, Field, PlainSerializer, ValidationInfo
from pydantic_core import PydanticCustomError

from sidecar.evaluate.verdict import Verdict
from sidecar.model import CaseOutcome, CriterionResult, Outcome
from sidecar.wire._base import (
    ITEMS,
    Echo,
    Id,
    Record,
    SpanId,
    Texts,
    TraceId,
    TraceIds,
    left_out_when_none,
    problem,
    record_json,
)
from sidecar.wire.redaction import DEFAULT_REDACTION, Redaction

VERDICT_RECORD_VERSION = 1

# -- times ------------------------------------------------------------------------------

_EPOCH = datetime(1970, 1, 1)  # naive, UTC: isoformat then has no offset, and "Z" is added
TIME_EXAMPLE = "2026-05-01T12:00:00.123456Z"


def utc_text(unix_nano: int | None) -> str | None:
    """Unix nanoseconds as RFC 3339 UTC with microseconds (cut, not rounded); None stays None."""
    if unix_nano is None:
        return None
    moment = _EPOCH + timedelta(microseconds=unix_nano // 1000)
    return moment.isoformat(timespec="microseconds") + "Z"


def _time(value: object, info: ValidationInfo) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            moment = None
        if moment is not None and moment.tzinfo is not None:
            return moment.astimezone(UTC)
    raise problem(
        f"field {info.field_name!r} must be an RFC 3339 time with a zone, like {TIME_EXAMPLE}"
    )


def _time_text(moment: datetime) -> str:
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


# Read as an aware datetime in UTC; written back in the form the writer uses.
Time = Annotated[
    datetime | None,
    BeforeValidator(_time),
    PlainSerializer(_time_text, when_used="json-unless-none"),
]

# -- field rules ------------------------------------------------------------------------


def _result_outcome(value: object) -> Outcome:
    if isinstance(value, str) and value in Outcome.__members__:
        return Outcome(value)
    raise problem(f"outcome must be PASS, FAIL, ERROR or SKIPPED, got {value!r}")


_CASE_OUTCOMES = {o.value: o for o in CaseOutcome}
_EXPECTED_OUTCOMES = "'acceptable', 'unacceptable' or 'errored'"


def _case_outcome(value: object) -> CaseOutcome | None:
    if value is None:
        return None
    if isinstance(value, str) and value in _CASE_OUTCOMES:
        return _CASE_OUTCOMES[value]
    # Worded as pydantic words a wrong enum value (the field's path leads the message).
    raise PydanticCustomError(
        "enum", "Input should be {expected}", {"expected": _EXPECTED_OUTCOMES}
    )


def _gate(value: object) -> bool:
    if isinstance(value, bool):
        return value
    raise problem("gate must be true or false")


def _record_id(value: object) -> str | None:
    # Hand-made files may lack the idempotency key; VerdictRecord.key stands in for it.
    return str(value) if value else None


ResultOutcome = Annotated[Outcome, BeforeValidator(_result_outcome)]
Gate = Annotated[bool, BeforeValidator(_gate)]


def _empty(values: tuple[str, ...]) -> bool:
    return not values


def _false(value: bool) -> bool:
    return not value


# -- the records, as read -----------------------------------------------------------------


class CheckRecord(Record):
    name: Id
    outcome: ResultOutcome
    gate: Gate = True
    detail: str | None = ""


class CriterionRecord(Record):
    name: Id
    outcome: ResultOutcome
    gate: Gate = True
    evidence: str | None = left_out_when_none()
    reason: str | None = left_out_when_none()


class VerdictRecord(Record):
    """One verdict as read back (the keys are in the module docstring)."""

    FAMILY: ClassVar[str] = "verdict record"
    VERSION: ClassVar[int] = VERDICT_RECORD_VERSION

    v: int = VERDICT_RECORD_VERSION
    id: Annotated[str | None, BeforeValidator(_record_id)] = None
    trace_id: TraceId
    root_span_id: SpanId = None
    rubric_id: Id
    rubric_version: Id
    judge_model: Id
    agent: str | None = None
    agent_version: str | None = None
    trace_start: Time = None
    trace_end: Time = None
    decided_at: Time = None
    outcome: Annotated[CaseOutcome | None, BeforeValidator(_case_outcome)] = None
    judged: bool | None = None
    sample_reason: str | None = None
    injection_suspected: bool | None = None
    review: bool | None = None
    checks: Annotated[tuple[CheckRecord, ...], ITEMS] = ()
    criteria: Annotated[tuple[CriterionRecord, ...], ITEMS] = ()
    truncated: bool | None = None
    flags: Texts = Field(default=(), exclude_if=_empty)
    sidecar_version: str | None = None
    rubric_hash: Echo = left_out_when_none()
    judge_model_version: Echo = left_out_when_none()
    judge_error: str | None = left_out_when_none()
    raw_output: str | None = left_out_when_none()
    redacted: str | None = left_out_when_none()
    backfill: bool = Field(default=False, exclude_if=_false)
    scope: str | None = left_out_when_none()
    conversation_id: str | None = left_out_when_none()
    turns: int | None = left_out_when_none()
    trace_ids: TraceIds = Field(default=(), exclude_if=_empty)
    revision: int | None = left_out_when_none()
    canary: bool = Field(default=False, exclude_if=_false)
    labels: dict[str, ResultOutcome] | None = left_out_when_none()

    @property
    def key(self) -> str:
        """The idempotency key; a stand-in made of the provenance when the record has none."""
        return (
            self.id or f"{self.trace_id}/{self.rubric_id}/{self.rubric_version}/{self.judge_model}"
        )


# -- writing ------------------------------------------------------------------------------


def verdict_dict(v: Verdict, redaction: Redaction = DEFAULT_REDACTION) -> dict[str, Any]:
    """The verdict record of ``v`` as plain JSON values, content redacted (module docstring)."""
    r = redaction.text
    record: dict[str, Any] = {
        "v": VERDICT_RECORD_VERSION,
        "id": v.id,
        "trace_id": v.trace_id,
        "root_span_id": v.root_span_id,
        "rubric_id": v.rubric_id,
        "rubric_version": v.rubric_version,
        "judge_model": v.judge_model,
        "agent": v.agent,
        "agent_version": v.agent_version,
        "trace_start": utc_text(v.trace_start),
        "trace_end": utc_text(v.trace_end),
        "decided_at": utc_text(v.decided_at),
        "outcome": v.outcome.value,
        "judged": v.judged,
        "sample_reason": v.sample_reason,
        "injection_suspected": v.injection_suspected,
        "review": v.review,
        "checks": [
            {"name": c.name, "outcome": c.outcome.value, "gate": c.gate, "detail": r(c.detail)}
            for c in v.checks
        ],
        "criteria": [_criterion(c, r) for c in v.criteria],
        "truncated": v.truncated,
    }
    if v.flags:
        record["flags"] = list(v.flags)
    record["sidecar_version"] = v.sidecar_version
    optional = (
        ("rubric_hash", v.rubric_hash),
        ("judge_model_version", v.judge_model_version),
        ("judge_error", v.judge_error),
        ("raw_output", r(v.raw_output)),
        ("redacted", redaction.marker),
    )
    for key, value in optional:
        if value is not None:
            record[key] = value
    if v.backfill:
        record["backfill"] = True
    if v.scope != "trace":
        record["scope"] = v.scope
    if v.conversation_id is not None:
        record["conversation_id"] = v.conversation_id
    if v.turns is not None:
        record["turns"] = v.turns
    if v.trace_ids:
        record["trace_ids"] = list(v.trace_ids)
    if v.revision is not None:
        record["revision"] = v.revision
    return record


def verdict_json(v: Verdict, redaction: Redaction = DEFAULT_REDACTION) -> str:
    """The verdict record of ``v`` as one JSON line (the form of the topic, replay and files)."""
    return record_json(verdict_dict(v, redaction))


def _criterion(c: CriterionResult, r: Callable[[str | None], str | None]) -> dict[str, Any]:
    criterion: dict[str, Any] = {"name": c.name, "outcome": c.outcome.value, "gate": c.gate}
    evidence = r(c.evidence)
    if evidence is not None:
        criterion["evidence"] = evidence
    if c.reason is not None:
        criterion["reason"] = c.reason
    return criterion
