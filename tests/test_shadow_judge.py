"""The shadow judge: kappa, the deterministic share, the detector, and a run on the real client.

The integration-ish tests run google-genai against the local judge server,
which answers per model: the rubric's model grades ``grounded`` by whether
the answer names the refund amount, the shadow model fails ``grounded``
on every answer that mentions "EUR". The verdicts of a run with the shadow
are those of a run without it; the metrics show the comparison.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from sidecar.adapters.judge_backends import GeminiBackend
from sidecar.adapters.otel import VerdictSpans, tracer_provider
from sidecar.adapters.prometheus import Metrics
from sidecar.commands._wiring import with_shadow
from sidecar.drift.detect import Detector
from sidecar.drift.shadow_agreement import (
    ShadowBoard,
    ShadowPair,
    compare,
    shadow_fraction,
    shadow_selected,
)
from sidecar.engine.offline import ReplaySummary, evaluate_traces
from sidecar.evaluate.sample import Sampler, trace_fraction
from sidecar.evaluate.verdict import Verdict
from sidecar.judge.config import JudgeSettings, ShadowSettings
from sidecar.judge.service import JudgeService
from sidecar.judge.shadow import ShadowJudge
from sidecar.model import Outcome
from sidecar.telemetry import ShadowJudged
from tests.builders import JUDGE_MODEL, genai_trace, refund_rubric
from tests.gemini_server import JudgeServer, Reply, gemini_json

P, F, E, S = Outcome.PASS, Outcome.FAIL, Outcome.ERROR, Outcome.SKIPPED
SHADOW_MODEL = "gemini-3-flash"


# -- the comparison core ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("primary", "shadow", "expected"),
    [
        pytest.param(P, P, "agree", id="pass-pass"),
        pytest.param(F, F, "agree", id="fail-fail"),
        pytest.param(P, F, "disagree", id="pass-fail"),
        pytest.param(F, P, "disagree", id="fail-pass"),
        pytest.param(P, E, "error", id="shadow-error"),
        pytest.param(E, F, "error", id="primary-error"),
        pytest.param(S, P, "error", id="skipped"),
    ],
)
def test_each_pair_of_verdicts_compares(primary: Outcome, shadow: Outcome, expected: str) -> None:
    assert compare(primary, shadow) == expected


def _pairs(table: dict[tuple[Outcome, Outcome], int]) -> list[ShadowPair]:
    return [ShadowPair("c", p, s) for (p, s), n in table.items() for _ in range(n)]


def test_kappa_is_the_worked_example() -> None:
    # The textbook example (Wikipedia, "Cohen's kappa"): 50 items, 20 yes/yes, 5 yes/no,
    # 10 no/yes, 15 no/no: p_o = 0.7, p_e = 0.5, kappa = 0.4.
    board = ShadowBoard(window=500)
    board.add("r", "m", "s", _pairs({(P, P): 20, (P, F): 5, (F, P): 10, (F, F): 15}))
    (agreement,) = board.keys.values()
    assert agreement.kappa == pytest.approx(0.4)
    assert agreement.disagreement == pytest.approx(0.3)
    assert agreement.counts == {"agree": 35, "disagree": 15, "error": 0}


def test_kappa_counts_the_latest_window_only_and_errors_stay_out_of_it() -> None:
    board = ShadowBoard(window=50)
    # 50 disagreements, then the worked example's 50 cases and 7 errors: only the latter count.
    board.add("r", "m", "s", _pairs({(P, F): 50}))
    board.add("r", "m", "s", _pairs({(P, P): 20, (P, F): 5, (F, P): 10, (F, F): 15, (P, E): 7}))
    (agreement,) = board.keys.values()
    assert agreement.kappa == pytest.approx(0.4)
    assert agreement.counts == {"agree": 35, "disagree": 65, "error": 7}


def test_kappa_is_undefined_when_both_judges_use_one_class() -> None:
    board = ShadowBoard()
    board.add("r", "m", "s", _pairs({(P, P): 30}))
    assert next(iter(board.keys.values())).kappa is None


def test_keys_are_bounded_and_drops_counted() -> None:
    board = ShadowBoard(max_keys=2)
    for name in ("a", "b", "c", "d"):
        board.add("r", "m", "s", [ShadowPair(name, P, P)])
    assert len(board.keys) == 2
    assert board.dropped == 2


def test_the_share_is_deterministic_uniform_and_nested() -> None:
    ids = [f"{n:032x}" for n in range(20_000)]
    chosen = {share: {t for t in ids if shadow_selected(t, share)} for share in (0.05, 0.2)}
    assert chosen[0.05] < chosen[0.2]  # a lower share picks a subset
    assert len(chosen[0.2]) / len(ids) == pytest.approx(0.2, abs=0.01)
    assert {t for t in ids if shadow_selected(t, 0.2)} == chosen[0.2]  # same answer again
    assert not any(shadow_selected(t, 0.0) for t in ids[:100])
    # Independent of the judge sampler: of the traces a 10% judge_ratio judges, ~20% are shadowed.
    judged = [t for t in ids if trace_fraction(t) < 0.1]
    shadowed = [t for t in judged if t in chosen[0.2]]
    assert len(shadowed) / len(judged) == pytest.approx(0.2, abs=0.03)
    assert shadow_fraction(ids[0]) != trace_fraction(ids[0])


@pytest.mark.parametrize(
    ("rate", "alarms"),
    [pytest.param(0.05, False, id="under-the-limit"), pytest.param(0.3, True, id="over-it")],
)
def test_the_disagreement_detector_tests_against_the_fixed_limit(rate: float, alarms: bool) -> None:
    detector = Detector(0.01, "up", fixed=0.1)
    assert detector.testing  # no baseline: it bets from the first case
    # A deterministic stream with the given share of disagreements.
    outcomes = [(n * rate) % 1.0 + rate >= 1.0 for n in range(1, 1501)]
    raised = [a for a in map(detector.update, outcomes) if a is not None]
    assert bool(raised) is alarms
    if raised:
        assert raised[0].reference == pytest.approx(0.1)
        assert raised[0].recent_rate > 0.2
        assert raised[0].at < 200


def test_metrics_show_kappa_outcomes_and_evidence() -> None:
    metrics = Metrics(CollectorRegistry(), shadow=ShadowSettings(window=500, alpha=0.01))
    table = {(P, P): 20, (P, F): 5, (F, P): 10, (F, F): 15}
    for pair in _pairs(table):
        metrics.event(ShadowJudged("r", "t", "m", "s", "v1", (("c", pair.primary, pair.shadow),)))
    labels = {"rubric": "r", "criterion": "c", "judge_model": "m", "shadow_model": "s"}
    get = metrics.registry.get_sample_value
    assert get("sidecar_shadow_kappa", labels) == pytest.approx(0.4)
    assert get("sidecar_shadow_disagreement", labels) == pytest.approx(0.3)
    assert get("sidecar_shadow_comparisons_total", {**labels, "outcome": "agree"}) == 35
    assert get("sidecar_shadow_comparisons_total", {**labels, "outcome": "disagree"}) == 15
    # 15 disagreements in a row against a 10% limit: the detector alarmed (and started over).
    assert (get("sidecar_shadow_alarms_total", labels) or 0) >= 1
    assert get("sidecar_shadow_evalue_threshold") == pytest.approx(200.0)


# -- on the real client against the local judge server -------------------------------------

_MODEL = re.compile(r"/models/(?P<model>[^/:]+):generateContent$")
_RESPONSE = re.compile(r"<<<BEGIN RESPONSE (\w+)>>>\n(.*?)\n<<<END RESPONSE \1>>>", re.S)


def two_judges(shadow_delay_s: float = 0.0) -> Callable[[str, Any], Reply]:
    """The rubric's model and the shadow model, answering differently (module docstring)."""

    def respond(path: str, body: Any) -> Reply:
        match = _MODEL.search(path)
        assert match is not None
        model = match.group("model")
        text = body["contents"][0]["parts"][0]["text"]
        found = _RESPONSE.search(text)
        answer = found.group(2) if found else ""
        if model == SHADOW_MODEL:
            grounded = "FAIL" if "EUR" in answer else "PASS"
            version = "shadow-002"
        else:
            grounded = "PASS" if "EUR" in answer else "FAIL"
            version = "primary-001"
        criteria = [
            {"criterion": "grounded", "evidence": "NONE", "verdict": grounded},
            {"criterion": "polite", "evidence": "NONE", "verdict": "PASS"},
        ]
        reply = gemini_json({"criteria": criteria}, model_version=version)
        if model == SHADOW_MODEL and shadow_delay_s:
            return Reply(body=reply.body, delay_s=shadow_delay_s)
        return reply

    return respond


def _traces(n: int) -> list[Any]:
    # Every third answer names no amount (the primary fails it), the others do.
    return [
        genai_trace(
            f"Refund order A-{i}?",
            answer=(f"Refunded {i}.50 EUR for A-{i}." if i % 3 else f"Done with A-{i}."),
            trace_id=f"{i + 1:032x}",
        )
        for i in range(n)
    ]


def _outcomes(verdicts: list[Verdict]) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    return [(v.trace_id, tuple((c.name, c.outcome.value) for c in v.criteria)) for v in verdicts]


async def _run(
    server: JudgeServer, shadow: ShadowSettings | None, n: int = 60, spans: Any = None
) -> tuple[list[Verdict], Metrics, float]:
    settings = JudgeSettings(
        max_attempts=1, requests_per_minute=100_000, shadow=shadow or ShadowSettings()
    )
    metrics = Metrics(CollectorRegistry(), shadow=settings.shadow)
    primary = JudgeService(
        GeminiBackend(base_url=server.base_url, api_key="test-key"), settings, metrics
    )
    judge = with_shadow(primary, settings, metrics, spans)
    assert (judge is not primary) is (shadow is not None)
    assert judge is not None
    started = time.monotonic()
    try:
        verdicts = await evaluate_traces(
            _traces(n),
            [refund_rubric(sampling={"judge_ratio": 1.0})],
            Sampler(judge_enabled=True),
            judge=judge,
            summary=ReplaySummary(),
        )
        took = time.monotonic() - started
        if isinstance(judge, ShadowJudge):
            assert await judge.drain(30.0)
    finally:
        await judge.aclose()
    return verdicts, metrics, took


def _labels(criterion: str) -> dict[str, str]:
    return {
        "rubric": "refunds",
        "criterion": criterion,
        "judge_model": JUDGE_MODEL,
        "shadow_model": SHADOW_MODEL,
    }


async def test_a_shadow_model_is_measured_and_never_changes_a_verdict() -> None:
    server = JudgeServer(responder=two_judges()).start()
    try:
        plain, _, _ = await _run(server, None)
        server.reset()
        share = 0.5
        shadowed, metrics, _ = await _run(
            server, ShadowSettings(model=SHADOW_MODEL, share=share, max_inflight=100)
        )
        requests = server.requests
    finally:
        server.stop()
    assert _outcomes(shadowed) == _outcomes(plain)
    assert {c.outcome for v in plain for c in v.criteria if c.name == "grounded"} == {P, F}
    chosen = [v.trace_id for v in plain if shadow_selected(v.trace_id, share)]
    assert 15 <= len(chosen) <= 45
    # Every case once to the rubric's model, the chosen ones once more to the shadow.
    to_shadow = [r for r in requests if f"/models/{SHADOW_MODEL}:" in r.path]
    assert len(to_shadow) == len(chosen)
    assert len(requests) == len(plain) + len(chosen)

    # The same request: same instructions, data and nonce; only the model differs.
    def text(r: Any) -> str:
        return str(r.body["contents"][0]["parts"][0]["text"])

    to_primary = [r for r in requests if f"/models/{JUDGE_MODEL}:" in r.path]
    assert len(to_primary) == len(plain)
    assert {text(r) for r in to_shadow} <= {text(r) for r in to_primary}
    system = {str(r.body["systemInstruction"]) for r in requests}
    assert len(system) == len({text(r) for r in to_primary})  # one per case, shared by both

    get = metrics.registry.get_sample_value
    # The shadow disagrees with the primary on grounded on every case: p_o = 0, and
    # p_e = 2 * (passes / n) * (fails / n) from the primary's PASS/FAIL split.
    grounded = {v.trace_id: c.outcome for v in plain for c in v.criteria if c.name == "grounded"}
    passes = sum(grounded[t] is P for t in chosen)
    p_e = 2 * passes * (len(chosen) - passes) / len(chosen) ** 2
    assert 0 < passes < len(chosen)
    assert get("sidecar_shadow_kappa", _labels("grounded")) == pytest.approx(-p_e / (1 - p_e))
    assert get("sidecar_shadow_disagreement", _labels("grounded")) == pytest.approx(1.0)
    disagree = {**_labels("grounded"), "outcome": "disagree"}
    assert get("sidecar_shadow_comparisons_total", disagree) == len(chosen)
    assert (get("sidecar_shadow_alarms_total", _labels("grounded")) or 0) >= 1
    # polite: both always PASS, they agree and kappa is undefined.
    agree = {**_labels("polite"), "outcome": "agree"}
    assert get("sidecar_shadow_comparisons_total", agree) == len(chosen)
    assert math.isnan(get("sidecar_shadow_kappa", _labels("polite")) or 0.0)
    assert get("sidecar_shadow_alarms_total", _labels("polite")) == 0
    # Production figures hold production calls only; shadow calls are counted apart.
    calls = {"shadow_model": SHADOW_MODEL, "result": "ok"}
    assert get("sidecar_shadow_judge_requests_total", calls) == len(chosen)
    assert get("sidecar_judge_request_duration_seconds_count", {"judge_model": SHADOW_MODEL}) in (
        None,
        0.0,
    )
    versions = {"judge_model": SHADOW_MODEL, "judge_model_version": "shadow-002"}
    assert get("sidecar_judge_model_version_info", versions) == 1.0


async def test_a_slow_shadow_is_dropped_over_budget_and_does_not_hold_up_verdicts() -> None:
    server = JudgeServer(responder=two_judges(shadow_delay_s=2.0)).start()
    try:
        settings = ShadowSettings(model=SHADOW_MODEL, share=1.0, max_inflight=2)
        verdicts, metrics, took = await _run(server, settings, n=20)
    finally:
        server.stop()
    assert len(verdicts) == 20
    assert took < 2.0  # the verdicts did not wait for the 2 s shadow answers
    get = metrics.registry.get_sample_value
    dropped = get("sidecar_shadow_dropped_total", {"rubric": "refunds", "reason": "over_budget"})
    compared = get(
        "sidecar_shadow_judge_requests_total", {"shadow_model": SHADOW_MODEL, "result": "ok"}
    )
    assert dropped is not None
    assert compared is not None
    assert dropped >= 15
    assert dropped + compared == 20


async def test_closing_cancels_shadow_calls_still_running_and_counts_them() -> None:
    server = JudgeServer(responder=two_judges(shadow_delay_s=5.0)).start()
    settings = JudgeSettings(
        max_attempts=1, shadow=ShadowSettings(model=SHADOW_MODEL, share=1.0, max_inflight=4)
    )
    metrics = Metrics(CollectorRegistry(), shadow=settings.shadow)
    primary = JudgeService(
        GeminiBackend(base_url=server.base_url, api_key="test-key"), settings, metrics
    )
    judge = ShadowJudge(primary, primary.for_shadow(1), settings.shadow, metrics, close_wait_s=0.2)
    try:
        await evaluate_traces(
            _traces(3),
            [refund_rubric(sampling={"judge_ratio": 1.0})],
            Sampler(judge_enabled=True),
            judge=judge,
            summary=ReplaySummary(),
        )
        assert judge.inflight == 3
        started = time.monotonic()
        await judge.aclose()
        assert time.monotonic() - started < 2.0
    finally:
        server.stop()
    assert judge.inflight == 0
    get = metrics.registry.get_sample_value
    assert get("sidecar_shadow_dropped_total", {"rubric": "refunds", "reason": "shutdown"}) == 3


async def test_each_shadow_judgment_is_a_span_over_the_shadow_call() -> None:
    exporter = InMemorySpanExporter()
    spans = VerdictSpans(tracer_provider(exporter, batch=False))
    server = JudgeServer(responder=two_judges()).start()
    try:
        settings = ShadowSettings(model=SHADOW_MODEL, share=1.0, max_inflight=100)
        verdicts, _, _ = await _run(server, settings, n=6, spans=spans)
    finally:
        server.stop()
    finished = exporter.get_finished_spans()
    roots = [s for s in finished if s.name == "shadow refunds"]
    assert len(roots) == len(verdicts) == 6
    assert {str((r.attributes or {})["sidecar.shadow.trace_id"]) for r in roots} == {
        v.trace_id for v in verdicts
    }
    for root in roots:
        attributes = root.attributes or {}
        assert attributes["sidecar.shadow.model"] == SHADOW_MODEL
        assert attributes["eval.judge.model"] == JUDGE_MODEL
        assert attributes["sidecar.shadow.disagree"] == 1  # grounded
        assert attributes["sidecar.shadow.agree"] == 1  # polite
        (chat,) = [s for s in finished if s.parent and s.parent.span_id == root.context.span_id]
        assert chat.name == f"chat {SHADOW_MODEL}"
        assert (chat.attributes or {})["sidecar.judge.purpose"] == "shadow"
