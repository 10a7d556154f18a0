"""From an assembled trace to cases and verdicts (pure; no I/O, ``now`` passed in).

``plan`` turns a trace into a transcript, routes it to the rubrics whose
``applies_to`` match, runs every deterministic check and takes the sampling
decision. ``conclude`` combines a planned case with the judge's result (or
none) into the final :class:`~sidecar.verdict.Verdict`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sidecar.checks import run_checks
from sidecar.judge import JudgeResult
from sidecar.model import CheckResult, CriterionResult, Outcome, Trace, Transcript
from sidecar.rubric import Rubric, route
from sidecar.sample import SampleDecision, Sampler
from sidecar.transcript import build_transcript
from sidecar.verdict import Verdict, make_verdict

# Decides whether a case's data looks like an injection attempt (before sampling).
Screener = Callable[[Rubric, Transcript], bool]


def _never(_rubric: Rubric, _transcript: Transcript) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class Case:
    """One (trace, rubric) pair after checks and sampling, before the judge."""

    rubric: Rubric
    transcript: Transcript
    checks: tuple[CheckResult, ...]
    sample: SampleDecision
    injection_suspected: bool


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
    screener: Screener = _never,
) -> tuple[Transcript, list[Case]]:
    base = build_transcript(trace)
    cases: list[Case] = []
    for rubric in route(rubrics, base.resource, base.root_attributes):
        transcript = mark_untrusted(base, rubric.untrusted_tools)
        checks = run_checks(rubric, transcript)
        suspected = screener(rubric, transcript) if rubric.judge is not None else False
        decision = sampler.decide(rubric, transcript, checks, now, injection_suspected=suspected)
        cases.append(Case(rubric, transcript, checks, decision, suspected))
    return base, cases


def skipped_criteria(rubric: Rubric, reason: str) -> tuple[CriterionResult, ...]:
    if rubric.judge is None:
        return ()
    return tuple(
        CriterionResult(c.name, Outcome.SKIPPED, gate=c.gate, reason=reason)
        for c in rubric.judge.criteria
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
        injection_suspected=case.injection_suspected or bool(result and result.injection_suspected),
        review=result.review if result else False,
        judge_error=result.error_reason if result else None,
        raw_output=result.raw_output if result else None,
    )
