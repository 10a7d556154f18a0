"""From an assembled trace to verdicts: the one pipeline of the service, replay and demo.

Two steps, so the caller can count what was planned before the judge runs::

    transcript, cases = plan(trace, rubrics, sampler, now)   # pure
    verdicts = await judge_cases(cases, judge)                # judge, then conclude

``plan`` turns a trace into a transcript, routes it to the rubrics whose
``applies_to`` match, runs every deterministic check, screens each judged
case for injection once and takes the sampling decision (which may depend on
that screening). ``judge_cases`` sends each sampled case with its screening
to the judge and concludes its :class:`~sidecar.verdict.Verdict`. No Kafka,
no metrics: the callers (``sidecar.app``, ``sidecar.replay``) do those.

Policy for a judge that cannot be reached is the judge's own
(``on_judge_unavailable``): with ``error`` it returns ERROR criteria; with
``pause`` it raises :class:`~sidecar.errors.JudgeUnavailable`, and the case
waits here until the judge recovers. Meanwhile the case stays in flight, so
the service's in-flight bound pauses the Kafka partitions: back-pressure, not
loss.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sidecar.checks import run_checks
from sidecar.errors import JudgeUnavailable
from sidecar.judge import Judge, JudgeResult, Screening, all_error, screen_case
from sidecar.model import CheckResult, CriterionResult, Outcome, Trace, Transcript
from sidecar.rubric import Rubric, route
from sidecar.sample import SampleDecision, Sampler
from sidecar.transcript import build_transcript
from sidecar.verdict import Verdict, make_verdict

log = logging.getLogger(__name__)

# Screens one case (``screen_case``); a parameter of ``plan`` so tests can watch it.
Screen = Callable[[Rubric, Transcript], Screening]

# A rubric without a judge shows the judge nothing, so there is nothing to screen.
NO_JUDGE = Screening(suspected=False, signals=())


@dataclass(frozen=True, slots=True)
class Case:
    """One (trace, rubric) pair after checks, screening and sampling, before the judge."""

    rubric: Rubric
    transcript: Transcript
    checks: tuple[CheckResult, ...]
    sample: SampleDecision
    screening: Screening


def mark_untrusted(transcript: Transcript, untrusted_tools: Sequence[str]) -> Transcript:
    if not untrusted_tools:
        return transcript
    names = set(untrusted_tools)
    calls = tuple(
        dataclasses.replace(call, untrusted=call.untrusted or call.name in names)
        for call in transcript.tool_calls
    )
    return dataclasses.replace(transcript, tool_calls=calls)


def plan(
    trace: Trace,
    rubrics: Sequence[Rubric],
    sampler: Sampler,
    now: float,
    *,
    screen: Screen = screen_case,
) -> tuple[Transcript, list[Case]]:
    base = build_transcript(trace)
    cases: list[Case] = []
    for rubric in route(rubrics, base.resource, base.root_attributes):
        transcript = mark_untrusted(base, rubric.untrusted_tools)
        checks = run_checks(rubric, transcript)
        screening = screen(rubric, transcript) if rubric.judge is not None else NO_JUDGE
        decision = sampler.decide(
            rubric, transcript, checks, now, injection_suspected=screening.suspected
        )
        cases.append(Case(rubric, transcript, checks, decision, screening))
    return base, cases


def skipped_criteria(rubric: Rubric, reason: str) -> tuple[CriterionResult, ...]:
    if rubric.judge is None:
        return ()
    return tuple(
        CriterionResult(c.name, Outcome.SKIPPED, gate=c.gate, reason=reason)
        for c in rubric.judge.criteria
    )


def not_captured(case: Case) -> JudgeResult:
    """No answer text was captured: the judge cannot grade it, so every criterion is ERROR."""
    return JudgeResult(
        criteria=all_error(case.rubric, "not_captured"),
        judged=False,
        review=False,
        raw_output=None,
        error_reason="not_captured",
        model=case.rubric.judge_model,
    )


def conclude(case: Case, result: JudgeResult | None) -> Verdict:
    """The verdict of a case; ``result`` is None when the case was not judged."""
    rubric = case.rubric
    return make_verdict(
        case.transcript,
        rubric_id=rubric.id,
        rubric_version=rubric.version,
        judge_model=rubric.judge_model,
        checks=case.checks,
        criteria=result.criteria if result else skipped_criteria(rubric, case.sample.reason),
        judged=result.judged if result else False,
        sample_reason=case.sample.reason,
        injection_suspected=case.screening.suspected or bool(result and result.judge_flagged),
        review=result.review if result else False,
        judge_error=result.error_reason if result else None,
        raw_output=result.raw_output if result else None,
        rubric_hash=rubric.content_hash,
        judge_model_version=result.model_version if result else None,
    )


async def judge_case(case: Case, judge: Judge | None, *, use_cache: bool = True) -> Verdict:
    if not case.sample.judge or judge is None:
        return conclude(case, None)
    if case.transcript.answer is None:
        return conclude(case, not_captured(case))
    while True:
        try:
            result = await judge.judge(
                case.rubric, case.transcript, case.screening, use_cache=use_cache
            )
        except JudgeUnavailable as exc:
            log.warning(
                "judge unavailable (%s); case %s waits", exc.reason, case.transcript.trace_id
            )
            await judge.wait_available()
            continue
        return conclude(case, result)


async def judge_cases(cases: Sequence[Case], judge: Judge | None) -> list[Verdict]:
    """The verdicts of one trace's cases, in order; the judge sees one case at a time."""
    return [await judge_case(case, judge) for case in cases]
