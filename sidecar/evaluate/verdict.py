"""Combine check results and criterion verdicts into one case outcome.

The rule, in order:

1. any gating check or gating criterion FAIL   -> unacceptable
2. else any gating check or criterion ERROR    -> errored
3. else                                        -> acceptable

Non-gating (advisory) results are reported but never change the outcome.
SKIPPED criteria (not judged) do not count. Checks and criteria stay in
separate columns; nothing is averaged.

The record written for each verdict is built by :func:`sidecar.wire.verdicts.verdict_json`;
this module knows nothing of it.

Times, as Unix nanoseconds (``None`` when unknown):

- ``trace_start``, ``trace_end``: when the trace ran (the transcript's
  ``start_unix_nano`` and ``end_unix_nano``: its root span's start and end,
  else the earliest start and latest end of its spans; a conversation's first
  turn's start and last turn's end), set by :func:`make_verdict`;
- ``decided_at``: when the verdict was decided. The pipeline leaves it unset;
  whoever emits the verdict sets it (the service: its wall clock; replay and
  backfill: the trace's end plus the decision wait, :func:`decided_after`).

Provenance beside rubric id, version and judge model:

- ``rubric_hash``: the rubric's content hash (``sidecar.drift.fingerprint``), on
  every verdict the pipeline makes, judged or not, since the checks come
  from the rubric too;
- ``judge_model_version``: what the model service says served the judge's
  answer (``unknown`` when the answer did not say), on every verdict whose
  case got an answer from the model: all judged ones, and unjudged ones
  whose answer was blocked, truncated or unreadable. Absent when no answer
  arrived (not sampled, no judge, content not captured, transport failure,
  breaker open).

``judge_calls`` (:class:`~sidecar.model.JudgeCallRecord`, one per attempt at the
model or per cache hit) feed the judge's own spans, children of the verdict
span; they carry no content and are not part of the record.

Both provenance fields are left out of the record when absent, so records without them read
(and write) as before. ``backfill`` is true on verdicts ``sidecar backfill``
made from history (``sidecar.engine.history``); live verdicts leave it out.

A conversation verdict (``scope: conversation``, :mod:`sidecar.conversation`)
adds ``conversation_id``, ``turns``, ``trace_ids`` and ``revision``; its
idempotency key is :func:`conversation_key`. Trace verdicts leave them out.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from sidecar import __version__
from sidecar.fastrecord import record_builder
from sidecar.model import (
    CaseOutcome,
    CheckResult,
    CriterionResult,
    JudgeCallRecord,
    Outcome,
    Transcript,
)


def idempotency_key(trace_id: str, rubric_id: str, rubric_version: str, judge_model: str) -> str:
    material = "\x1f".join((trace_id, rubric_id, rubric_version, judge_model))
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


def conversation_key(
    conversation_id: str,
    first_trace_id: str,
    rubric_id: str,
    rubric_version: str,
    judge_model: str,
    revision: int,
) -> str:
    """The idempotency key of a conversation verdict: one per revision.

    The first turn's trace id is part of it, so a conversation id reused by an
    unrelated later session (or re-opened after its decided state was
    forgotten) never shares a key with the original.
    """
    material = "\x1f".join(
        ("conversation", conversation_id, first_trace_id, rubric_id, rubric_version, judge_model)
    )
    return hashlib.sha256(f"{material}\x1f{revision}".encode()).hexdigest()


def case_outcome(checks: Sequence[CheckResult], criteria: Sequence[CriterionResult]) -> CaseOutcome:
    gating = [c.outcome for c in checks if c.gate] + [c.outcome for c in criteria if c.gate]
    match gating:
        case _ if Outcome.FAIL in gating:
            return CaseOutcome.UNACCEPTABLE
        case _ if Outcome.ERROR in gating:
            return CaseOutcome.ERRORED
        case _:
            return CaseOutcome.ACCEPTABLE


@dataclass(frozen=True, slots=True)
class Verdict:
    """The decision for one (trace, rubric) pair, with its provenance."""

    id: str
    trace_id: str
    root_span_id: str | None
    rubric_id: str
    rubric_version: str
    judge_model: str
    agent: str | None
    agent_version: str | None
    outcome: CaseOutcome
    judged: bool
    sample_reason: str
    injection_suspected: bool
    review: bool
    checks: tuple[CheckResult, ...]
    criteria: tuple[CriterionResult, ...]
    truncated: bool = False
    # Why the evidence is incomplete or suspect (sidecar.model.Flag values); () when not.
    flags: tuple[str, ...] = ()
    judge_error: str | None = None
    raw_output: str | None = None
    sidecar_version: str = __version__
    rubric_hash: str | None = None
    judge_model_version: str | None = None
    # Made by ``sidecar backfill`` from history, not by the live service.
    backfill: bool = False
    # A conversation verdict: trace_id and root_span_id are its last turn's.
    scope: str = "trace"
    conversation_id: str | None = None
    turns: int | None = None
    trace_ids: tuple[str, ...] = ()
    revision: int | None = None
    # Each turn's root span id, in turn order (the verdict span links to them); not in the record.
    root_span_ids: tuple[str | None, ...] = ()
    # Unix nanoseconds (see the module docstring).
    trace_start: int | None = None
    trace_end: int | None = None
    decided_at: int | None = None
    # The judge calls behind the criteria (the verdict span's children); not in the record.
    judge_calls: tuple[JudgeCallRecord, ...] = ()


# One per case (sidecar.fastrecord).
_new_verdict = record_builder(Verdict, defaults=True, keyword_only_after=0)


_VERDICT_FIELDS = tuple(f.name for f in dataclasses.fields(Verdict))


def decided(verdict: Verdict, at: int | None) -> Verdict:
    """``dataclasses.replace(verdict, decided_at=at)`` without the frozen dataclass's per-field cost."""
    fields = {name: getattr(verdict, name) for name in _VERDICT_FIELDS}
    fields["decided_at"] = at
    return _new_verdict(**fields)


def decided_after(verdict: Verdict, wait_s: float) -> Verdict:
    """``verdict`` decided ``wait_s`` after its trace ended (replay, backfill); unset without an end."""
    end = verdict.trace_end
    return decided(verdict, None if end is None else end + round(wait_s * 1e9))


def make_verdict(
    transcript: Transcript,
    *,
    rubric_id: str,
    rubric_version: str,
    judge_model: str,
    checks: Sequence[CheckResult],
    criteria: Sequence[CriterionResult],
    judged: bool,
    sample_reason: str,
    injection_suspected: bool = False,
    review: bool = False,
    judge_error: str | None = None,
    raw_output: str | None = None,
    rubric_hash: str | None = None,
    judge_model_version: str | None = None,
    judge_calls: tuple[JudgeCallRecord, ...] = (),
) -> Verdict:
    return _new_verdict(
        id=idempotency_key(transcript.trace_id, rubric_id, rubric_version, judge_model),
        trace_id=transcript.trace_id,
        root_span_id=transcript.root_span_id,
        rubric_id=rubric_id,
        rubric_version=rubric_version,
        judge_model=judge_model,
        agent=transcript.agent_name,
        agent_version=transcript.agent_version,
        outcome=case_outcome(checks, criteria),
        judged=judged,
        sample_reason=sample_reason,
        injection_suspected=injection_suspected,
        review=review,
        checks=tuple(checks),
        criteria=tuple(criteria),
        truncated=transcript.truncated,
        flags=tuple(flag.value for flag in transcript.flags),
        judge_error=judge_error,
        raw_output=raw_output,
        rubric_hash=rubric_hash,
        judge_model_version=judge_model_version,
        judge_calls=judge_calls,
        trace_start=transcript.start_unix_nano,
        trace_end=transcript.end_unix_nano,
    )
