"""Checks, screening and sampling over a conversation: its :class:`~sidecar.evaluate.pipeline.Case`.

Every check type runs on the merged transcript (:mod:`.transcript`), except
``grounded_numbers``, which runs once per turn: turn *k*'s answer against the
tool calls (results and arguments) of turns 1..k, turn *k*'s input and the
inputs of the turns before it (each an evidence value, so an earlier input
that was not captured makes an ungrounded number ERROR, not FAIL). The check
FAILs when any turn fails (naming the first), is ERROR when none fails and
any is ERROR, and PASSes when every turn passes. In a conversation flagged
``partial`` (earlier turns missing) a FAIL is inconclusive (ERROR), as on a
truncated trace.

Sampling hashes the conversation id, so every revision of a conversation,
on every replica, gets the same decision. The judge, the verdict and fault
isolation are the trace pipeline's (:func:`sidecar.evaluate.pipeline.judge_case`);
:func:`conversation_verdict` adds the conversation's fields and key.
"""

from __future__ import annotations

import dataclasses
import functools
import logging

from sidecar.evaluate.checks import run_check, run_finding
from sidecar.evaluate.checks.grounding import GroundedNumbers, TurnGrounding
from sidecar.evaluate.pipeline import (
    NO_JUDGE,
    Case,
    Fault,
    OnFault,
    Screen,
    faulted_case,
    judge_case,
    mark_untrusted,
)
from sidecar.evaluate.rubric import Rubric
from sidecar.evaluate.sample import Sampler
from sidecar.evaluate.verdict import Verdict, conversation_key
from sidecar.judge import Judge
from sidecar.model import CheckResult, Flag, Outcome, Transcript

log = logging.getLogger(__name__)

SCOPE = "conversation"


def _ignore(fault: Fault) -> None:
    pass


def _grounded_per_turn(spec: GroundedNumbers, transcript: Transcript) -> CheckResult:
    turns = transcript.turns
    # Without some earlier turns (partial), an ungrounded number may be grounded in them.
    partial = Flag.PARTIAL in transcript.flags
    # Each turn's texts are read once and the evidence grows (linear in the conversation).
    grounding = TurnGrounding(spec)
    results = [
        run_finding(
            spec, functools.partial(grounding.turn, turn), truncated=partial or turn.truncated
        )
        for turn in turns
    ]
    for outcome in (Outcome.FAIL, Outcome.ERROR):
        for number, result in enumerate(results, start=1):
            if result.outcome is outcome:
                detail = f"turn {number} of {len(turns)}: {result.detail}"
                return CheckResult(spec.name, outcome, gate=spec.gate, detail=detail[:240])
    return CheckResult(
        spec.name, Outcome.PASS, gate=spec.gate, detail=f"{len(turns)} turns, all grounded"
    )


def conversation_checks(rubric: Rubric, transcript: Transcript) -> tuple[CheckResult, ...]:
    """Every check of ``rubric`` over a conversation transcript, in rubric order."""
    results: list[CheckResult] = []
    for spec in rubric.checks:
        if isinstance(spec, GroundedNumbers) and transcript.turns:
            results.append(_grounded_per_turn(spec, transcript))
        else:
            results.append(run_check(spec, transcript))
    return tuple(results)


def plan_conversation(
    rubric: Rubric,
    transcript: Transcript,
    conversation_id: str,
    sampler: Sampler,
    now: float,
    *,
    screen: Screen,
    on_fault: OnFault = _ignore,
) -> Case:
    """The conversation's case: checks, screening, sampling by conversation id; never raises."""
    stage = "checks"
    checks: tuple[CheckResult, ...] | None = None
    try:
        transcript = mark_untrusted(transcript, rubric.untrusted_tools)
        transcript = dataclasses.replace(
            transcript,
            turns=tuple(mark_untrusted(t, rubric.untrusted_tools) for t in transcript.turns),
        )
        checks = conversation_checks(rubric, transcript)
        stage = "screen"
        screening = screen(rubric, transcript) if rubric.judge is not None else NO_JUDGE
        stage = "sample"
        decision = sampler.decide(
            rubric,
            transcript,
            checks,
            now,
            injection_suspected=screening.suspected,
            sample_key=f"conversation:{conversation_id}",
        )
    # Per-conversation isolation: the fault ends this case as errored, nothing else.
    except Exception as exc:
        fault = Fault(stage, type(exc).__name__)
        log.error(
            "evaluating conversation %s failed at %s (%s)",
            conversation_id,
            stage,
            fault.error,
            exc_info=exc,
        )
        on_fault(fault)
        return faulted_case(rubric, transcript, fault, checks)
    return Case(rubric, transcript, checks, decision, screening)


async def conversation_verdict(
    case: Case,
    judge: Judge | None,
    *,
    conversation_id: str,
    revision: int,
    on_fault: OnFault = _ignore,
) -> Verdict:
    """The case judged and concluded, with the conversation's fields and idempotency key."""
    verdict = await judge_case(case, judge, on_fault=on_fault)
    turns = case.transcript.turns or (case.transcript,)
    rubric = case.rubric
    return dataclasses.replace(
        verdict,
        id=conversation_key(
            conversation_id,
            turns[0].trace_id,
            rubric.id,
            rubric.version,
            rubric.judge_model,
            revision,
        ),
        scope=SCOPE,
        conversation_id=conversation_id,
        turns=len(turns),
        trace_ids=tuple(t.trace_id for t in turns),
        revision=revision,
        root_span_ids=tuple(t.root_span_id for t in turns),
    )
