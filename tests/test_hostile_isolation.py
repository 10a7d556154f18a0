"""Per-trace isolation and streaming replay (class 3).

An exception while evaluating one trace (its transcript, a check, the
screening, the judge, the verdict) affects only that trace, and only the
cases it reaches: the case gets an ``errored`` verdict whose checks or
criteria are ERROR with reason ``internal_error: <ExceptionType>``, the fault
is counted (``sidecar_internal_errors_total{stage}``) and the partition moves
on. ``sidecar replay`` does the same, streams each trace's verdicts as they
are decided and evaluates ``judge.concurrency`` traces at a time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Sequence

from sidecar.engine.offline import ReplaySummary, evaluate_traces, stream_verdicts
from sidecar.evaluate.pipeline import Fault, judge_cases, plan
from sidecar.evaluate.rubric import Rubric
from sidecar.evaluate.sample import Sampler
from sidecar.judge import JudgeResult, Screening
from sidecar.model import CaseOutcome, CriterionResult, Outcome, Trace, Transcript
from sidecar.wire.verdicts import verdict_json
from tests.builders import genai_trace, refund_rubric
from tests.fakes import MemoryTopic
from tests.otlp_records import record
from tests.service_rig import INTERVAL, WAIT, make_rig, quiesce

JUDGED = refund_rubric(
    checks=[{"name": "few_calls", "type": "max_tool_calls", "limit": 5}],
    sampling={"judge_ratio": 1.0},
)
CHECKS_ONLY = Rubric.model_validate(
    {
        "id": "checks-only",
        "version": "1",
        "checks": [{"name": "few_calls", "type": "max_tool_calls", "limit": 5}],
    }
)


class PassingJudge:
    """A ``Judge`` that passes every criterion; raises for trace ids in ``broken``."""

    def __init__(self, broken: Sequence[str] = (), gate: asyncio.Event | None = None) -> None:
        self.broken = set(broken)
        self.calls: list[str] = []
        self.running = 0
        self.most_at_once = 0
        self._gate = gate

    async def judge(
        self,
        rubric: Rubric,
        transcript: Transcript,
        screening: Screening,
        *,
        use_cache: bool = True,
    ) -> JudgeResult:
        self.calls.append(transcript.trace_id)
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            await asyncio.sleep(0)
            if self._gate is not None and transcript.trace_id == trace_id(1):
                await self._gate.wait()
            if transcript.trace_id in self.broken:
                raise RuntimeError("a judge bug; this message may quote the answer")
            assert rubric.judge is not None
            criteria = tuple(
                CriterionResult(c.name, Outcome.PASS, gate=c.gate) for c in rubric.judge.criteria
            )
            return JudgeResult(criteria, True, False, "{}", None, rubric.judge_model)
        finally:
            self.running -= 1

    async def wait_available(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


def trace_id(n: int) -> str:
    return f"{n:032x}"


def a_trace(n: int) -> Trace:
    return genai_trace("Refund order A1", answer="Your refund is on its way.", trace_id=trace_id(n))


def raising_screen(rubric: Rubric, transcript: Transcript) -> Screening:
    raise KeyError("a screening bug")


class Faults(list[Fault]):
    def __call__(self, fault: Fault) -> None:
        self.append(fault)


# -- the pipeline -----------------------------------------------------------------------


async def test_a_screening_fault_errors_that_case_and_keeps_its_checks() -> None:
    faults = Faults()
    _, cases = plan(
        a_trace(1),
        [JUDGED, CHECKS_ONLY],
        Sampler(judge_enabled=True),
        0.0,
        screen=raising_screen,
        on_fault=faults,
    )
    judged, checks_only = await judge_cases(cases, PassingJudge(), on_fault=faults)
    assert faults == [Fault("screen", "KeyError")]
    assert judged.outcome is CaseOutcome.ERRORED
    assert [(c.outcome, c.reason) for c in judged.criteria] == [
        (Outcome.ERROR, "internal_error: KeyError")
    ] * len(judged.criteria)
    assert [c.outcome for c in judged.checks] == [Outcome.PASS]  # they ran before the fault
    assert checks_only.outcome is CaseOutcome.ACCEPTABLE


async def test_a_transcript_fault_errors_every_case_of_that_trace_only() -> None:
    good = a_trace(1)
    broken = a_trace(2)
    # An ill-typed span (attributes that are no mapping) makes reading the trace raise.
    spans = (dataclasses.replace(broken.spans[0], attributes=None), *broken.spans[1:])
    broken = dataclasses.replace(broken, spans=spans)
    faults = Faults()
    verdicts = []
    for each in (good, broken):
        _, cases = plan(each, [CHECKS_ONLY], Sampler(judge_enabled=False), 0.0, on_fault=faults)
        verdicts += await judge_cases(cases, None, on_fault=faults)
    assert faults == [Fault("transcript", "AttributeError")]
    assert [v.outcome for v in verdicts] == [CaseOutcome.ACCEPTABLE, CaseOutcome.ERRORED]
    [check] = verdicts[1].checks
    assert (check.outcome, check.detail) == (Outcome.ERROR, "internal_error: AttributeError")
    assert verdicts[1].trace_id == trace_id(2)


async def test_a_judge_fault_errors_the_criteria_and_keeps_the_message_out() -> None:
    faults = Faults()
    _, cases = plan(a_trace(1), [JUDGED], Sampler(judge_enabled=True), 0.0, on_fault=faults)
    [verdict] = await judge_cases(cases, PassingJudge(broken=[trace_id(1)]), on_fault=faults)
    assert faults == [Fault("judge", "RuntimeError")]
    assert verdict.outcome is CaseOutcome.ERRORED
    assert {c.reason for c in verdict.criteria} == {"internal_error: RuntimeError"}
    assert "quote" not in verdict_json(verdict)


async def test_advisory_checks_only_still_give_an_errored_verdict() -> None:
    advisory = Rubric.model_validate(
        {
            "id": "a",
            "version": "1",
            "checks": [{"name": "n", "type": "max_tool_calls", "limit": 5, "gate": False}],
        }
    )
    first = a_trace(1).spans[0]
    broken = dataclasses.replace(a_trace(1), spans=(dataclasses.replace(first, attributes=None),))
    _, cases = plan(broken, [advisory], Sampler(judge_enabled=False), 0.0)
    [verdict] = await judge_cases(cases, None)
    assert verdict.outcome is CaseOutcome.ERRORED
    assert [(c.name, c.gate) for c in verdict.checks] == [("n", False), ("internal_error", True)]


# -- the service ----------------------------------------------------------------------------


async def test_one_faulty_trace_gets_an_errored_verdict_and_the_partition_moves_on() -> None:
    topic = MemoryTopic(partitions=1)
    for n in (1, 2, 3):
        topic.append(0, record(a_trace(n).spans))
    rig = make_rig(
        topic,
        rubrics=[JUDGED],
        judge=PassingJudge(broken=[trace_id(2)]),
        review={"enabled": False},
    )
    service, sink, clock = rig.service, rig.sink, rig.clock
    await service.start()
    try:
        await service.step()
        clock.advance(WAIT)
        await service.step()
        await quiesce()
        clock.advance(INTERVAL)
        await service.step()
    finally:
        await service.close()
    outcomes = {trace: json.loads(payload)["outcome"] for trace, payload in sink.verdicts}
    assert outcomes == {
        trace_id(1): "acceptable",
        trace_id(2): "errored",
        trace_id(3): "acceptable",
    }
    errored = next(json.loads(p) for t, p in sink.verdicts if t == trace_id(2))
    assert {c["reason"] for c in errored["criteria"]} == {"internal_error: RuntimeError"}
    registry = service.telemetry.registry
    assert registry.get_sample_value("sidecar_internal_errors_total", {"stage": "judge"}) == 1
    assert topic.committed == {0: 3}


# -- replay ---------------------------------------------------------------------------------


async def test_replay_streams_verdicts_as_decided_and_judges_concurrently() -> None:
    gate = asyncio.Event()
    judge = PassingJudge(gate=gate)
    traces = [a_trace(n) for n in (1, 2, 3, 4, 5)]
    summary = ReplaySummary()
    seen: list[str] = []
    stream = stream_verdicts(
        traces, [JUDGED], Sampler(judge_enabled=True), judge=judge, summary=summary, concurrency=2
    )
    async for _, verdicts in stream:
        seen += [v.trace_id for v in verdicts]
        if len(seen) == 4:
            # Trace 1 is still being judged while the others went out one by one.
            assert trace_id(1) not in seen
            gate.set()
    assert seen[-1] == trace_id(1)
    assert sorted(seen) == [trace_id(n) for n in (1, 2, 3, 4, 5)]
    assert judge.most_at_once == 2
    assert summary.verdicts == 5


async def test_replay_gives_a_faulty_trace_an_errored_verdict_and_goes_on() -> None:
    summary = ReplaySummary()
    verdicts = await evaluate_traces(
        [a_trace(n) for n in (1, 2, 3)],
        [JUDGED],
        Sampler(judge_enabled=True),
        judge=PassingJudge(broken=[trace_id(2)]),
        summary=summary,
        concurrency=3,
    )
    assert [(v.trace_id, v.outcome.value) for v in verdicts] == [
        (trace_id(1), "acceptable"),
        (trace_id(2), "errored"),
        (trace_id(3), "acceptable"),
    ]
    assert summary.internal_errors == {"judge": 1}
