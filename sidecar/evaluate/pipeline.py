"""From an assembled trace to verdicts: the one pipeline of the service, replay and demo.

Two steps, so the caller can count what was planned before the judge runs::

    transcript, cases = plan(trace, rubrics, sampler, now)   # pure
    verdicts = await judge_cases(cases, judge)                # judge, then conclude

``plan`` turns a trace into a transcript, routes it to the rubrics whose
``applies_to`` match, runs every deterministic check (through the rubric set's
compiled plan, :mod:`sidecar.evaluate.plan`), screens each judged
case for injection once and takes the sampling decision (which may depend on
that screening). ``judge_cases`` sends each sampled case with its screening
to the judge and concludes its :class:`~sidecar.evaluate.verdict.Verdict`. No Kafka,
no metrics: the callers (``sidecar.engine.replica``, ``sidecar.engine.offline``) do those.

What the evidence cannot support is ERROR, never guessed: a rubric that
expects an agent run (``Rubric.expects_agent_run``) given a trace that is one
LLM call and nothing else (an instrumented client without an agent span) gets
a *fragment*: flagged ``incomplete``, checks inconclusive as on a truncated
trace, latency unknown, criteria ERROR (``incomplete``). Criteria are ERROR
(``not_captured``) without asking the judge when any content it would be shown
was not captured (``Transcript.capture``); the explanation names the
producer setting.

Policy for a judge that cannot be reached is the judge's own
(``on_judge_unavailable``): with ``error`` it returns ERROR criteria; with
``pause`` it raises :class:`~sidecar.errors.JudgeUnavailable`, and the case
waits here until the judge recovers. Meanwhile the case stays in flight, so
the service's in-flight bound pauses the Kafka partitions: back-pressure, not
loss.

Isolation: an exception while evaluating one trace (a bug, or input nothing
anticipated) affects only that trace, and only the cases it reaches. The case
still gets a verdict: what could not be decided is ERROR with reason
``internal_error: <ExceptionType>`` (never the exception's message, which may
quote content), so the verdict is ``errored`` unless a gating check failed
on its own. Each such :class:`Fault` is handed to ``on_fault`` (the service
counts ``sidecar_internal_errors_total{stage}``) and logged with its
traceback. Stages: ``transcript`` (every case of the trace), ``route``,
``checks``, ``screen``, ``sample``, ``judge`` and ``verdict`` (that case).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from sidecar.errors import JudgeUnavailable
from sidecar.evaluate.checks import run_checks
from sidecar.evaluate.plan import compile_plan
from sidecar.evaluate.rubric import Rubric
from sidecar.evaluate.sample import SampleDecision, Sampler
from sidecar.evaluate.transcript import build_transcript, trace_times
from sidecar.evaluate.verdict import Verdict, make_verdict
from sidecar.judge import Judge, JudgeResult, Screening, all_error, screen_case
from sidecar.model import (
    UNREADABLE_SHAPE,
    CheckResult,
    ContentField,
    CriterionResult,
    Flag,
    Outcome,
    Span,
    Trace,
    Transcript,
)

log = logging.getLogger(__name__)

# Screens one case (``screen_case``); a parameter of ``plan`` so tests can watch it.
Screen = Callable[[Rubric, Transcript], Screening]


class RunChecks(Protocol):
    """Runs a rubric's checks (``run_checks``); a parameter of ``plan`` (a slow check in tests)."""

    def __call__(
        self, rubric: Rubric, transcript: Transcript, *, fragment: str | None = None
    ) -> tuple[CheckResult, ...]: ...


# A rubric without a judge shows the judge nothing, so there is nothing to screen.
NO_JUDGE = Screening(suspected=False, signals=())

INTERNAL_ERROR = "internal_error"
NOT_CAPTURED = "not_captured"
INCOMPLETE = "incomplete"
FRAGMENT = "the trace is one LLM call without an agent span, not the agent run the rubric expects"
FRAGMENT_ADVICE = (
    "the agent must wrap each run in one span (invoke_agent) so that its model and tool "
    "calls share one trace"
)


@dataclass(frozen=True, slots=True)
class Fault:
    """An exception while evaluating a trace: the stage and the exception's type."""

    stage: str
    error: str

    @property
    def reason(self) -> str:
        return f"{INTERNAL_ERROR}: {self.error}"


# Told of every fault (the service counts them); the default forgets them.
OnFault = Callable[[Fault], None]


def _ignore(fault: Fault) -> None:
    pass


def _fault(stage: str, exc: Exception, trace_id: str, on_fault: OnFault) -> Fault:
    fault = Fault(stage, type(exc).__name__)
    log.error(
        "evaluating trace %s failed at %s (%s); its verdict says %s",
        trace_id,
        stage,
        fault.error,
        fault.reason,
        exc_info=exc,
    )
    on_fault(fault)
    return fault


@dataclass(frozen=True, slots=True)
class Case:
    """One (trace, rubric) pair after checks, screening and sampling, before the judge.

    ``fault``: planning this case failed; its verdict is concluded from that.
    """

    rubric: Rubric
    transcript: Transcript
    checks: tuple[CheckResult, ...]
    sample: SampleDecision
    screening: Screening
    fault: Fault | None = None


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
    checks: RunChecks = run_checks,
    on_fault: OnFault = _ignore,
) -> tuple[Transcript, list[Case]]:
    """The trace's transcript and one case per rubric that applies; never raises."""
    try:
        base = build_transcript(trace)
        broken: Fault | None = None
    # Per-trace isolation: whatever the transcript raised stays with this trace.
    except Exception as exc:  # noqa: BLE001
        broken = _fault("transcript", exc, trace.trace_id, on_fault)
        base = bare_transcript(trace)
    cases: list[Case] = []
    # Conversation-scope rubrics are judged over the conversation's turns
    # (sidecar.conversation); the plan holds the trace-scope ones.
    compiled = compile_plan(rubrics)
    compiled_checks = checks is run_checks
    for rubric_plan in compiled.rubrics:
        rubric = rubric_plan.rubric
        stage = "route"
        results: tuple[CheckResult, ...] | None = None
        try:
            if not rubric.applies(base.resource, base.root_attributes):
                continue
            if broken is not None:
                cases.append(faulted_case(rubric, base, broken))
                continue
            transcript = mark_untrusted(base, rubric.untrusted_tools)
            fragment = is_fragment(rubric, transcript)
            if fragment:
                transcript = as_fragment(transcript)
            stage = "checks"
            if compiled_checks:
                results = rubric_plan.run_checks(
                    transcript, fragment=FRAGMENT if fragment else None
                )
            else:
                results = checks(rubric, transcript, fragment=FRAGMENT if fragment else None)
            stage = "screen"
            screening = screen(rubric, transcript) if rubric.judge is not None else NO_JUDGE
            stage = "sample"
            decision = sampler.decide(
                rubric, transcript, results, now, injection_suspected=screening.suspected
            )
        # Per-case isolation: the other rubrics of this trace are planned as usual.
        except Exception as exc:  # noqa: BLE001
            fault = _fault(stage, exc, trace.trace_id, on_fault)
            cases.append(faulted_case(rubric, base, fault, results))
            continue
        cases.append(Case(rubric, transcript, results, decision, screening))
    return base, cases


def is_fragment(rubric: Rubric, transcript: Transcript) -> bool:
    """One LLM call and nothing else, under a rubric that expects a whole agent run."""
    return transcript.llm_only and rubric.expects_agent_run


def as_fragment(transcript: Transcript) -> Transcript:
    """The transcript of a fragment: flagged ``incomplete``; its latency is not the run's."""
    flags = tuple(f for f in Flag if f in transcript.flags or f is Flag.INCOMPLETE)
    return dataclasses.replace(transcript, flags=flags, latency_ms=None, latency_error=FRAGMENT)


def case_flags(transcript: Transcript, cases: Sequence[Case]) -> tuple[Flag, ...]:
    """The flags of a trace: its transcript's, and ``incomplete`` when a case found it a fragment."""
    if not transcript.flags and not any(c.transcript.flags for c in cases):
        return ()  # most traces: nothing to merge
    raised = set(transcript.flags).union(*(c.transcript.flags for c in cases))
    return tuple(f for f in Flag if f in raised)


def bare_transcript(trace: Trace) -> Transcript:
    """What is known of a trace without reading it: ids, and the root's resource and attributes."""
    roots = [s for s in trace.spans if s.parent_span_id is None]
    root: Span | None = roots[0] if roots else (trace.spans[0] if trace.spans else None)
    start, end = trace_times(trace.spans, roots[0] if roots else None)
    return Transcript(
        trace_id=trace.trace_id,
        root_span_id=root.span_id if root is not None else None,
        resource=root.resource if root is not None else {},
        root_attributes=root.attributes if root is not None else {},
        truncated=trace.truncated or trace.partial,
        start_unix_nano=start,
        end_unix_nano=end,
    )


def faulted_case(
    rubric: Rubric,
    transcript: Transcript,
    fault: Fault,
    checks: tuple[CheckResult, ...] | None = None,
) -> Case:
    """A case whose planning failed: its checks as far as they ran, else ERROR with the reason."""
    if checks is None:
        checks = tuple(
            CheckResult(spec.name, Outcome.ERROR, gate=spec.gate, detail=fault.reason)
            for spec in rubric.checks
        )
    return Case(
        rubric,
        transcript,
        checks,
        SampleDecision(False, INTERNAL_ERROR),
        NO_JUDGE,
        fault=fault,
    )


def _faulted_verdict(case: Case, fault: Fault) -> Verdict:
    """The verdict of a case an exception interrupted: ``errored`` unless a gating check failed."""
    rubric = case.rubric
    checks = case.checks
    criteria = all_error(rubric, fault.reason)
    if not any(c.gate for c in checks) and not any(c.gate for c in criteria):
        # Advisory checks only: one gating ERROR says the case could not be decided.
        checks = (
            *checks,
            CheckResult(INTERNAL_ERROR, Outcome.ERROR, gate=True, detail=fault.reason),
        )
    return make_verdict(
        case.transcript,
        rubric_id=rubric.id,
        rubric_version=rubric.version,
        judge_model=rubric.judge_model,
        checks=checks,
        criteria=criteria,
        judged=False,
        sample_reason=case.sample.reason,
        injection_suspected=case.screening.suspected,
        judge_error=fault.reason,
    )


def skipped_criteria(rubric: Rubric, reason: str) -> tuple[CriterionResult, ...]:
    if rubric.judge is None:
        return ()
    return tuple(
        CriterionResult(c.name, Outcome.SKIPPED, gate=c.gate, reason=reason)
        for c in rubric.judge.criteria
    )


def missing_evidence(case: Case) -> tuple[str, str] | None:
    """Why the judge cannot grade the case, as (reason, detail), or None when it can.

    The judge is shown the input, the tool calls with arguments and results,
    and the answer; grading a case with any of them not captured would grade
    a guess. A fragment (one LLM call under a rubric that expects an agent
    run) is not the run the criteria speak of.
    """
    transcript = case.transcript
    if is_fragment(case.rubric, transcript):
        return INCOMPLETE, f"{FRAGMENT}; {FRAGMENT_ADVICE}"
    capture = transcript.capture
    if unreadable := capture.unreadable_fields:
        return UNREADABLE_SHAPE, capture.reason(*unreadable)
    missing = capture.missing
    if transcript.answer is None and ContentField.ANSWER not in missing:
        missing = (ContentField.ANSWER, *missing)
    if missing:
        return NOT_CAPTURED, capture.reason(*missing)
    return None


def not_captured(case: Case, reason: str = "not_captured", detail: str = "") -> JudgeResult:
    """The judge cannot grade the case (``missing_evidence``): every criterion is ERROR.

    ``reason`` is the criterion's reason (``error.type`` on its span event),
    ``detail`` its explanation: what is missing and the producer setting to change.
    """
    criteria = tuple(
        dataclasses.replace(c, evidence=detail or None) for c in all_error(case.rubric, reason)
    )
    return JudgeResult(
        criteria=criteria,
        judged=False,
        review=False,
        raw_output=None,
        error_reason=reason,
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
        judge_calls=result.calls if result else (),
    )


async def judge_case(
    case: Case, judge: Judge | None, *, on_fault: OnFault = _ignore, use_cache: bool = True
) -> Verdict:
    """The case's verdict; an exception (not a cancellation) becomes an errored verdict."""
    trace_id = case.transcript.trace_id
    if case.fault is not None:
        return _faulted_verdict(case, case.fault)
    try:
        result = await _judged(case, judge, use_cache=use_cache)
    # Per-case isolation: a judge bug ends this case as ERROR, not the service.
    except Exception as exc:  # noqa: BLE001
        return _faulted_verdict(case, _fault("judge", exc, trace_id, on_fault))
    try:
        return conclude(case, result)
    except Exception as exc:  # noqa: BLE001
        return _faulted_verdict(case, _fault("verdict", exc, trace_id, on_fault))


async def _judged(case: Case, judge: Judge | None, *, use_cache: bool) -> JudgeResult | None:
    if not case.sample.judge or judge is None:
        return None
    missing = missing_evidence(case)
    if missing is not None:
        return not_captured(case, *missing)
    while True:
        try:
            return await judge.judge(
                case.rubric, case.transcript, case.screening, use_cache=use_cache
            )
        except JudgeUnavailable as exc:
            log.warning(
                "judge unavailable (%s); case %s waits", exc.reason, case.transcript.trace_id
            )
            await judge.wait_available()


async def judge_cases(
    cases: Sequence[Case], judge: Judge | None, *, on_fault: OnFault = _ignore
) -> list[Verdict]:
    """The verdicts of one trace's cases, in order; the judge sees one case at a time."""
    return [await judge_case(case, judge, on_fault=on_fault) for case in cases]
