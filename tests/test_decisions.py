"""Every trace read ends on exactly one path of the closed decision set, and they add up.

Three levels, all with real parts: the service on the in-memory broker (records
dead-lettered, traces evicted, revoked, checked only, matched by no rubric, judge
off), the pipeline with the judge service asking the Gemini stand-in (evaluated,
sampled out, over budget, not captured, fragment, judge failed, breaker open), and
``sidecar replay`` over the demo data, whose decisions add up to the traces read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sidecar.adapters.judge_backends import GeminiBackend
from sidecar.cli import main
from sidecar.engine.offline import ReplaySummary, stream_verdicts
from sidecar.evaluate.decision import Decision, case_decision, trace_decision
from sidecar.evaluate.rubric import Rubric
from sidecar.evaluate.sample import Sampler
from sidecar.evaluate.verdict import Verdict
from sidecar.judge.config import JudgeSettings
from sidecar.judge.service import JudgeService
from sidecar.model import CaseOutcome, DecideReason, SpanKind, Trace
from tests.builders import (
    ANSWER,
    genai_trace,
    refund_rubric,
    rubric,
    sampling,
    span,
    trace,
    trace_id,
)
from tests.gemini_server import JudgeServer, Reply, gemini_json, status
from tests.judge_fixtures import GOOD_VERDICTS, FakeClock
from tests.service_rig import RUBRIC, WAIT, Rig, make_rig, spans, started

DEMO = Path(__file__).resolve().parents[1] / "sidecar" / "demo_data"


def all_pass(path: str, body: Any) -> Reply:
    """A judge that passes every criterion it is asked about."""
    schema = body["generationConfig"]["responseSchema"]
    names = schema["properties"]["criteria"]["items"]["properties"]["criterion"]["enum"]
    return gemini_json(
        {"criteria": [{"criterion": n, "evidence": "NONE", "verdict": "PASS"} for n in names]}
    )


def lone_chat() -> Trace:
    """One instrumented LLM call and nothing else: no agent span around it."""
    message = {"role": "user", "parts": [{"type": "text", "content": "Refund A1001"}]}
    answer = {"role": "assistant", "parts": [{"type": "text", "content": "Refunded $40."}]}
    chat = span(
        "chat gpt-4o-mini",
        span_id="1" * 16,
        start=0,
        end=5_000_000,
        scope="opentelemetry.util.genai.handler",
        kind=SpanKind.CLIENT,
        attrs={
            "gen_ai.operation.name": "chat",
            "gen_ai.response.finish_reasons": ["stop"],
            "gen_ai.input.messages": json.dumps([message]),
            "gen_ai.output.messages": json.dumps([answer]),
        },
    )
    return trace(chat)


def decisions(rig: Rig) -> dict[str, float]:
    return {
        d.value: rig.metric("sidecar_trace_decisions_total", decision=d.value) or 0.0
        for d in Decision
    }


def only(decision: Decision, count: float = 1.0) -> dict[str, float]:
    return {d.value: (count if d is decision else 0.0) for d in Decision}


# -- the service: paths before and beside the judge --------------------------------------------


async def test_every_label_is_exported_from_the_start() -> None:
    rig = make_rig()
    async with started(rig):
        assert decisions(rig) == only(Decision.EVALUATED, 0.0)


@pytest.mark.parametrize(
    ("rubrics", "decision"),
    [
        pytest.param([RUBRIC], Decision.CHECKS_ONLY, id="checks-only"),
        pytest.param(
            [rubric(id="elsewhere", applies_to={"service.name": "billing"})],
            Decision.NO_RUBRIC,
            id="no-rubric",
        ),
        pytest.param([refund_rubric()], Decision.JUDGE_OFF, id="judge-off"),
    ],
)
async def test_a_decided_trace_counts_once(rubrics: list[Rubric], decision: Decision) -> None:
    rig = make_rig(rubrics=rubrics)
    rig.topic.append(0, spans(1))
    async with started(rig):
        await rig.round()
        await rig.round(WAIT)
        assert decisions(rig) == only(decision)


async def test_a_dead_lettered_record_counts_once() -> None:
    rig = make_rig()
    rig.topic.append(0, b"{not json")
    rig.topic.append(1, None)
    async with started(rig):
        await rig.round()
        assert len(rig.sink.dead_letters) == 2
        assert decisions(rig) == only(Decision.DEAD_LETTERED, 2)


async def test_an_evicted_trace_counts_as_evicted_not_twice() -> None:
    rig = make_rig(assembler={"max_open_traces": 1})
    rig.topic.append(0, spans(1, root=False))
    rig.topic.append(0, spans(2, root=False))  # trace 1 is evicted to make room
    async with started(rig):
        await rig.round()
        assert decisions(rig) == only(Decision.EVICTED)
        assert rig.sent() == [trace_id(1)]


async def test_a_revoked_open_trace_counts_as_revoked() -> None:
    rig = make_rig()
    rig.topic.append(0, spans(1, root=False))
    async with started(rig):
        await rig.round()
        await rig.source.revoke({0})
        assert decisions(rig) == only(Decision.REVOKED)


# -- the pipeline with the judge ------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[JudgeServer]:
    judge = JudgeServer().start()
    try:
        yield judge
    finally:
        judge.stop()


def judge_service(server: JudgeServer, **settings: Any) -> JudgeService:
    clock = FakeClock()
    return JudgeService(
        GeminiBackend(base_url=server.base_url, api_key="k", timeout_s=2.0),
        JudgeSettings.model_validate({"max_attempts": 1, "backoff_base_s": 0.01, **settings}),
        clock=clock,
        sleep=clock.sleep,
    )


def content_trace(n: int, *, capture_content: bool = True) -> Trace:
    return genai_trace(
        "Where is my refund for order A-1001?",
        [("lookup_order", {"order": "A-1001"}, '{"refund": "approved", "amount": 42.5}')],
        ANSWER,
        trace_id=trace_id(n),
        capture_content=capture_content,
    )


async def replayed(
    traces: list[Trace], rubrics: list[Rubric], sampler: Sampler, judge: JudgeService | None
) -> ReplaySummary:
    summary = ReplaySummary(traces=len(traces))
    async for _ in stream_verdicts(traces, rubrics, sampler, judge=judge, summary=summary):
        pass
    return summary


ALWAYS = refund_rubric(sampling=sampling(1.0))


@pytest.mark.parametrize(
    ("replies", "traces", "rubrics", "sampler", "expected"),
    [
        pytest.param(
            [gemini_json(GOOD_VERDICTS)], [content_trace(1)], [ALWAYS], {}, {"evaluated": 1},
            id="evaluated",
        ),
        pytest.param(
            [], [content_trace(1)], [refund_rubric(sampling=sampling(0.0))], {},
            {"sampled_out": 1}, id="sampled-out",
        ),
        pytest.param(
            [], [content_trace(1)], [ALWAYS], {"per_minute": 0}, {"over_budget": 1},
            id="over-budget",
        ),
        pytest.param(
            [], [content_trace(1, capture_content=False)], [ALWAYS], {}, {"not_captured": 1},
            id="not-captured",
        ),
        pytest.param(
            [], [lone_chat()],
            [rubric(ALWAYS.model_dump(by_alias=True, exclude_unset=True), expects="agent_run")],
            {}, {"fragment": 1}, id="fragment",
        ),
        pytest.param(
            [status(400)], [content_trace(1)], [ALWAYS], {}, {"judge_failed": 1},
            id="judge-failed",
        ),
        pytest.param(
            [status(500)], [content_trace(1), content_trace(2)], [ALWAYS], {},
            {"judge_failed": 1, "breaker_open": 1}, id="breaker-open",
        ),
        pytest.param(
            [gemini_json(GOOD_VERDICTS)], [content_trace(1)],
            [refund_rubric(sampling=sampling(0.0)), ALWAYS.model_copy(update={"id": "always"})],
            {}, {"evaluated": 1}, id="two-rubrics-one-decision",
        ),
    ],
)  # fmt: skip
async def test_each_judge_path_counts_once(
    server: JudgeServer,
    replies: list[Reply],
    traces: list[Trace],
    rubrics: list[Rubric],
    sampler: dict[str, Any],
    expected: dict[str, int],
) -> None:
    server.script(*replies)
    async with judge_service(server, breaker_failures=1, breaker_reset_s=600.0) as judge:
        summary = await replayed(traces, rubrics, Sampler(judge_enabled=True, **sampler), judge)
    assert summary.decisions == expected
    assert sum(summary.decisions.values()) == len(traces)
    assert server.pending == 0  # every scripted answer was asked for


# -- the pure rule ---------------------------------------------------------------------------


def _verdict(**fields: Any) -> Verdict:
    base: dict[str, Any] = {
        "id": "i",
        "trace_id": trace_id(1),
        "root_span_id": None,
        "rubric_id": "r",
        "rubric_version": "1",
        "judge_model": "m",
        "agent": None,
        "agent_version": None,
        "outcome": CaseOutcome.ACCEPTABLE,
        "judged": False,
        "sample_reason": "ratio",
        "injection_suspected": False,
        "review": False,
        "checks": (),
        "criteria": (),
    }
    return Verdict(**(base | fields))


def test_an_internal_error_wins_and_a_turn_is_not_unrouted() -> None:
    faulted = _verdict(judge_error="internal_error: KeyError")
    judged = _verdict(judged=True)
    assert case_decision(faulted) is Decision.INTERNAL_ERROR
    assert trace_decision([judged, faulted]) is Decision.INTERNAL_ERROR
    assert trace_decision([]) is Decision.NO_RUBRIC
    assert trace_decision([], turn=True) is Decision.CONVERSATION
    assert trace_decision([judged], DecideReason.EVICTED) is Decision.EVICTED
    assert trace_decision([judged], DecideReason.MAX_AGE) is Decision.EVALUATED


# -- the demo data ---------------------------------------------------------------------------


def test_the_demo_replay_decisions_add_up_to_the_traces_read(
    no_judge_credentials: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    server = JudgeServer(responder=all_pass).start()
    no_judge_credentials.setenv("GOOGLE_API_KEY", "test-key")
    no_judge_credentials.setenv("GOOGLE_GEMINI_BASE_URL", server.base_url)
    try:
        args = ["replay", str(DEMO / "traces.jsonl"), "--rubrics", str(DEMO / "rubrics")]
        assert main([*args, "--exit-zero"]) == 0
    finally:
        server.stop()
    err = capsys.readouterr().err
    traces = int(re.search(r"(\d+) traces,", err).group(1))  # type: ignore[union-attr]
    found = re.search(r"trace decisions \(([^)]*)\)", err)
    assert found, err
    counts = {k: int(v) for k, v in (item.rsplit(" ", 1) for item in found.group(1).split(", "))}
    assert set(counts) <= {d.value for d in Decision}
    assert sum(counts.values()) == traces == 13
    # Judged ones are as many as the judge was asked for (one rubric per demo trace).
    assert counts.get("evaluated", 0) == len(server.requests) > 0
    print("demo funnel:", counts)
