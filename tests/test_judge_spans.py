"""The judge's own span: every judge call is a child of the verdict span, in GenAI client terms.

The whole path runs for real: the pipeline plans a trace, the judge service asks
the Gemini stand-in server through the real google-genai backend, the verdict
carries the calls as plain data, and the verdict spans go to an in-memory exporter.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from sidecar.adapters.judge_backends import GeminiBackend
from sidecar.adapters.otel import VerdictSpans, tracer_provider
from sidecar.evaluate.pipeline import judge_cases, plan
from sidecar.evaluate.sample import Sampler
from sidecar.evaluate.verdict import Verdict
from sidecar.judge.config import JudgeSettings
from sidecar.judge.service import JudgeService
from sidecar.telemetry import CANARY
from tests.builders import ANSWER, JUDGE_MODEL, TRACE_ID, genai_trace, refund_rubric, sampling
from tests.gemini_server import JudgeServer, gemini_blocked, gemini_json, status
from tests.judge_fixtures import GOOD_VERDICTS, FakeClock

QUESTION = "Where is my refund for order A-1001? My card ends 4242."
SETTINGS: dict[str, Any] = {
    "timeout_s": 2.0,
    "max_attempts": 3,
    "backoff_base_s": 0.01,
    "backoff_max_s": 0.05,
    "breaker_failures": 2,
    "breaker_reset_s": 30.0,
}


class WallClock:
    """Wall-clock nanoseconds that move 5 ms per reading, so spans have lengths."""

    def __init__(self) -> None:
        self.now = 1_700_000_000_000_000_000

    def __call__(self) -> int:
        self.now += 5_000_000
        return self.now


@pytest.fixture
def exported() -> Iterator[tuple[VerdictSpans, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    spans = VerdictSpans(tracer_provider(exporter, batch=False))
    yield spans, exporter
    spans.shutdown()


@asynccontextmanager
async def judge(server: JudgeServer, **overrides: Any) -> AsyncIterator[JudgeService]:
    clock = FakeClock()
    backend = GeminiBackend(base_url=server.base_url, api_key="test-key", timeout_s=2.0)
    service = JudgeService(
        backend,
        JudgeSettings.model_validate(SETTINGS | overrides),
        clock=clock,
        sleep=clock.sleep,
        rand=lambda: 0.5,
        wall_ns=WallClock(),
    )
    async with service:
        yield service


async def evaluate(service: JudgeService, answer: str = ANSWER) -> Verdict:
    trace = genai_trace(
        QUESTION,
        [("lookup_order", {"order": "A-1001"}, '{"refund": "approved", "amount": 42.5}')],
        answer,
        trace_id=TRACE_ID,
    )
    rubric = refund_rubric(sampling=sampling(1.0))
    _, cases = plan(trace, [rubric], Sampler(judge_enabled=True), 0.0)
    (verdict,) = await judge_cases(cases, service)
    return verdict


def emitted(
    exported: tuple[VerdictSpans, InMemorySpanExporter], verdict: Verdict
) -> tuple[ReadableSpan, list[ReadableSpan]]:
    spans, exporter = exported
    exporter.clear()
    assert spans.record(verdict) is not None
    finished = list(exporter.get_finished_spans())
    (parent,) = [s for s in finished if s.name.startswith("evaluate ")]
    children = [s for s in finished if s is not parent]
    return parent, children


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_a_judged_case_has_one_chat_span_under_its_verdict_span(
    judge_server: JudgeServer, exported: tuple[VerdictSpans, InMemorySpanExporter]
) -> None:
    judge_server.script(
        gemini_json(GOOD_VERDICTS, prompt_tokens=900, output_tokens=70, model_version="g-2.5-0417")
    )
    async with judge(judge_server) as service:
        verdict = await evaluate(service)
    assert verdict.judged
    assert [c.outcome.value for c in verdict.criteria] == ["PASS", "PASS"]

    parent, (chat,) = emitted(exported, verdict)
    assert parent.context is not None
    assert chat.context is not None
    assert chat.parent is not None
    assert parent.parent is not None
    assert parent.parent.span_id == int(verdict.root_span_id or "0", 16)
    assert chat.context.trace_id == int(TRACE_ID, 16)
    assert chat.parent.span_id == parent.context.span_id
    assert chat.name == f"chat {JUDGE_MODEL}"
    assert chat.kind is SpanKind.CLIENT
    assert chat.status.status_code is StatusCode.UNSET
    assert attrs(chat) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "gcp.gemini",
        "gen_ai.request.model": JUDGE_MODEL,
        "gen_ai.response.model": "g-2.5-0417",
        "gen_ai.usage.input_tokens": 900,
        "gen_ai.usage.output_tokens": 70,
        "sidecar.judge.attempt": 1,
        "sidecar.judge.cache_hit": False,
        "sidecar.judge.purpose": "production",
        "eval.id": verdict.id,
        "eval.rubric.id": "refunds",
        "sidecar.semconv.evaluation_schema": attrs(chat)["sidecar.semconv.evaluation_schema"],
    }
    # The call lies inside the verdict span, and lasted what the wall clock says.
    assert parent.start_time is not None
    assert parent.end_time is not None
    assert chat.start_time is not None
    assert chat.end_time is not None
    assert parent.start_time <= chat.start_time < chat.end_time <= parent.end_time
    # No content: nothing of the question, the answer, the tool result or the judge's reply.
    text = json.dumps([attrs(chat), [dict(e.attributes or {}) for e in chat.events]])
    for secret in ("4242", "A-1001", "refund of", "approved", "grounded"):
        assert secret not in text


async def test_each_attempt_is_a_span_and_a_failed_one_says_why(
    judge_server: JudgeServer, exported: tuple[VerdictSpans, InMemorySpanExporter]
) -> None:
    judge_server.script(status(429), gemini_json(GOOD_VERDICTS))
    async with judge(judge_server) as service:
        verdict = await evaluate(service)

    parent, children = emitted(exported, verdict)
    first, second = sorted(children, key=lambda s: attrs(s)["sidecar.judge.attempt"])
    assert attrs(first)["sidecar.judge.attempt"] == 1
    assert attrs(first)["error.type"] == "http_429"
    assert first.status.status_code is StatusCode.ERROR
    assert "gen_ai.response.model" not in attrs(first)
    assert "gen_ai.usage.input_tokens" not in attrs(first)
    assert attrs(second)["sidecar.judge.attempt"] == 2
    assert "error.type" not in attrs(second)
    assert attrs(second)["gen_ai.response.model"] == "scripted"
    assert {c.parent.span_id for c in children if c.parent} == {
        parent.context.span_id if parent.context else 0
    }


async def test_an_unusable_answer_and_an_open_breaker_are_marked(
    judge_server: JudgeServer, exported: tuple[VerdictSpans, InMemorySpanExporter]
) -> None:
    judge_server.script(gemini_blocked(), status(500), status(500))
    async with judge(judge_server, max_attempts=1) as service:
        blocked = await evaluate(service)
        # Two failures open the breaker; the next case is refused without a call.
        await evaluate(service, answer="Second answer.")
        await evaluate(service, answer="Third answer.")
        refused = await evaluate(service, answer="Fourth answer.")

    _, (chat,) = emitted(exported, blocked)
    assert attrs(chat)["error.type"] == "blocked"
    # It answered (tokens are known) but did not say what served it: no response model.
    assert attrs(chat)["gen_ai.usage.input_tokens"] == 120
    assert "gen_ai.response.model" not in attrs(chat)
    assert chat.status.status_code is StatusCode.ERROR

    assert refused.judge_error == "judge_unavailable"
    _, (chat,) = emitted(exported, refused)
    assert attrs(chat)["error.type"] == "breaker_open"
    assert chat.start_time == chat.end_time  # no call was made


async def test_a_cache_hit_is_a_span_without_usage(
    judge_server: JudgeServer, exported: tuple[VerdictSpans, InMemorySpanExporter]
) -> None:
    judge_server.script(gemini_json(GOOD_VERDICTS, model_version="g-served"))
    async with judge(judge_server) as service:
        await evaluate(service)
        again = await evaluate(service)

    assert len(judge_server.requests) == 1
    _, (chat,) = emitted(exported, again)
    assert attrs(chat)["sidecar.judge.cache_hit"] is True
    assert attrs(chat)["gen_ai.response.model"] == "g-served"
    assert "gen_ai.usage.input_tokens" not in attrs(chat)


async def test_canary_calls_say_who_they_were_made_for(
    judge_server: JudgeServer, exported: tuple[VerdictSpans, InMemorySpanExporter]
) -> None:
    judge_server.script(gemini_json(GOOD_VERDICTS))
    async with judge(judge_server) as service:
        verdict = await evaluate(service.for_purpose(CANARY))

    _, (chat,) = emitted(exported, verdict)
    assert attrs(chat)["sidecar.judge.purpose"] == "canary"
    assert attrs(chat)["sidecar.judge.cache_hit"] is False


async def test_an_unjudged_verdict_has_no_judge_span(
    exported: tuple[VerdictSpans, InMemorySpanExporter],
) -> None:
    trace = genai_trace(QUESTION, answer=ANSWER)
    rubric = refund_rubric(sampling=sampling(0.0))
    _, cases = plan(trace, [rubric], Sampler(judge_enabled=True), 0.0)
    (verdict,) = await judge_cases(cases, None)
    _, children = emitted(exported, verdict)
    assert children == []
