"""Why a trace was (or was not) evaluated: one decision per trace read, from a closed set.

Every trace the service reads ends on exactly one path, counted as
``sidecar_trace_decisions_total{decision}`` (and in ``sidecar replay``'s
summary), so the decisions add up to the traces read:

==================  ===============================================================
``evaluated``       the judge answered for at least one of its cases
``judge_failed``    sent to the judge, no usable answer (unavailable, blocked,
                    truncated, unreadable, redirect)
``breaker_open``    sent to the judge, refused by the open circuit breaker
``internal_error``  evaluating it raised (a bug or unforeseen input): errored verdicts
``fragment``        one LLM call without an agent span, under a rubric that expects a run
``not_captured``    content the judge would be shown was not captured (or unreadable)
``over_budget``     sampled for the judge, over the judge budget
``sampled_out``     not sampled for the judge (``judge_ratio``)
``judge_off``       no judge configured (no credentials, or judging switched off)
``checks_only``     only rubrics without a judge apply: deterministic checks only
``conversation``    only conversation rubrics apply: it is a turn, judged with its
                    conversation
``no_rubric``       no rubric applies to it (no verdict)
``evicted``         decided early because ``max_open_traces`` was reached; evaluated on
                    what had arrived (its verdicts are flagged truncated)
``revoked``         its partition was revoked before it was decided; the new owner reads
                    it again (and decides it there)
``dead_lettered``   an input record that could not be read went to the dead-letter topic;
                    counted once per record, as its traces are unknown
==================  ===============================================================

A trace with several rubrics takes the first of its cases' decisions in the
order of the table (:data:`PRECEDENCE`), so one errored or judged case is
what the trace counts as. Pure: decided from the verdicts and the trace's
decide reason.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from sidecar.evaluate.verdict import Verdict
from sidecar.model import DecideReason


class Decision(enum.StrEnum):
    """The closed label set of ``sidecar_trace_decisions_total``."""

    EVALUATED = "evaluated"
    JUDGE_FAILED = "judge_failed"
    BREAKER_OPEN = "breaker_open"
    INTERNAL_ERROR = "internal_error"
    FRAGMENT = "fragment"
    NOT_CAPTURED = "not_captured"
    OVER_BUDGET = "over_budget"
    SAMPLED_OUT = "sampled_out"
    JUDGE_OFF = "judge_off"
    CHECKS_ONLY = "checks_only"
    CONVERSATION = "conversation"
    NO_RUBRIC = "no_rubric"
    EVICTED = "evicted"
    REVOKED = "revoked"
    DEAD_LETTERED = "dead_lettered"


# Which case decision a trace of several cases counts as: the first that any case took.
PRECEDENCE: tuple[Decision, ...] = (
    Decision.INTERNAL_ERROR,
    Decision.EVALUATED,
    Decision.JUDGE_FAILED,
    Decision.BREAKER_OPEN,
    Decision.FRAGMENT,
    Decision.NOT_CAPTURED,
    Decision.OVER_BUDGET,
    Decision.SAMPLED_OUT,
    Decision.JUDGE_OFF,
    Decision.CHECKS_ONLY,
)

# Sample reasons of a case not sent to the judge (sidecar.evaluate.sample).
_SKIPPED = {
    "budget": Decision.OVER_BUDGET,
    "not_sampled": Decision.SAMPLED_OUT,
    "judge_disabled": Decision.JUDGE_OFF,
    "no_judge": Decision.CHECKS_ONLY,
}
# Judge errors that mean the judge was never asked (sidecar.evaluate.pipeline.missing_evidence).
_NOT_ASKED = {
    "incomplete": Decision.FRAGMENT,
    "not_captured": Decision.NOT_CAPTURED,
    "unreadable_shape": Decision.NOT_CAPTURED,
}
_INTERNAL_ERROR = "internal_error"
_BREAKER_OPEN = "breaker_open"


def case_decision(verdict: Verdict) -> Decision:
    """The path one case took, read from its verdict."""
    error = verdict.judge_error
    if error is not None and error.startswith(_INTERNAL_ERROR):
        return Decision.INTERNAL_ERROR
    if verdict.judged:
        return Decision.EVALUATED
    if error is not None:
        if error in _NOT_ASKED:
            return _NOT_ASKED[error]
        if any(call.error == _BREAKER_OPEN for call in verdict.judge_calls):
            return Decision.BREAKER_OPEN
        return Decision.JUDGE_FAILED
    # Sampled for a judge that is not there (replay without credentials) counts as judge off.
    return _SKIPPED.get(verdict.sample_reason, Decision.JUDGE_OFF)


def trace_decision(
    verdicts: Sequence[Verdict], reason: DecideReason | None = None, *, turn: bool = False
) -> Decision:
    """The one decision of a trace: its trace-scope verdicts, why it was decided, whether
    a conversation rubric took it as a turn (``turn``)."""
    if reason is DecideReason.EVICTED:
        return Decision.EVICTED
    if not verdicts:
        return Decision.CONVERSATION if turn else Decision.NO_RUBRIC
    taken = {case_decision(v) for v in verdicts}
    return next(d for d in PRECEDENCE if d in taken)
