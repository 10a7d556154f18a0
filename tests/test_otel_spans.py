from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from sidecar.adapters.otel import (
    EVALUATION_SCHEMA,
    EVALUATOR_ID,
    EVALUATOR_TYPE,
    EVALUATOR_VERSION,
    EVENT_NAME,
    SCHEMA_ATTRIBUTE,
    JsonLinesSpanExporter,
    VerdictSpans,
    tracer_provider,
)
from sidecar.evaluate.verdict import Verdict, make_verdict
from sidecar.ingest.decode import decode
from sidecar.model import CheckResult, CriterionResult, Outcome
from sidecar.model import SpanKind as ModelSpanKind
from tests.builders import ROOT_SPAN_ID, TRACE_ID, transcript

PASS, FAIL, ERROR, SKIPPED = Outcome.PASS, Outcome.FAIL, Outcome.ERROR, Outcome.SKIPPED


def verdict(
    checks: list[CheckResult] | None = None,
    criteria: list[CriterionResult] | None = None,
    *,
    root_span_id: str | None = ROOT_SPAN_ID,
    agent: str | None = "refund-agent",
) -> Verdict:
    tx = transcript(root_span_id=root_span_id, agent_name=agent, agent_version="1.4.2")
    return make_verdict(
        tx,
        rubric_id="refund-support",
        rubric_version="3",
        judge_model="gemini-2.5-flash",
        checks=checks if checks is not None else [CheckResult("allowed_tools", PASS, detail="ok")],
        criteria=criteria if criteria is not None else [],
        judged=True,
        sample_reason="ratio",
    )


@pytest.fixture
def exported() -> Iterator[tuple[VerdictSpans, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    spans = VerdictSpans(tracer_provider(exporter, batch=False))
    yield spans, exporter
    spans.shutdown()


def emit_one(exported: tuple[VerdictSpans, InMemorySpanExporter], v: Verdict) -> ReadableSpan:
    spans, exporter = exported
    assert spans.emit(v) is True
    (span,) = exporter.get_finished_spans()
    return span


def test_verdict_span_sits_under_the_root_of_the_evaluated_trace(
    exported: tuple[VerdictSpans, InMemorySpanExporter],
) -> None:
    span = emit_one(exported, verdict())

    assert span.name == "evaluate refund-support"
    assert span.kind is SpanKind.INTERNAL
    assert span.context is not None
    assert span.parent is not None
    assert span.context.trace_id == int(TRACE_ID, 16)
    assert span.parent.trace_id == int(TRACE_ID, 16)
    assert span.parent.span_id == int(ROOT_SPAN_ID, 16)
    assert span.parent.is_remote
    assert span.parent.trace_flags.sampled
    assert span.context.trace_flags.sampled
    assert span.context.span_id != int(ROOT_SPAN_ID, 16)
    (link,) = span.links
    assert (link.context.trace_id, link.context.span_id) == (
        int(TRACE_ID, 16),
        int(ROOT_SPAN_ID, 16),
    )
    assert span.resource.attributes["service.name"] == "sidecar"


def test_verdict_span_attributes(exported: tuple[VerdictSpans, InMemorySpanExporter]) -> None:
    v = verdict()
    attributes = dict(emit_one(exported, v).attributes or {})
    assert attributes == {
        "eval.rubric.id": "refund-support",
        "eval.rubric.version": "3",
        "eval.judge.model": "gemini-2.5-flash",
        "eval.outcome": "acceptable",
        "eval.judged": True,
        "eval.sample_reason": "ratio",
        "eval.injection_suspected": False,
        "eval.review": False,
        "eval.id": v.id,
        "eval.truncated": False,
        "gen_ai.agent.name": "refund-agent",
        "gen_ai.agent.version": "1.4.2",
    }


def test_no_agent_name_attribute_without_an_agent(
    exported: tuple[VerdictSpans, InMemorySpanExporter],
) -> None:
    attributes = emit_one(exported, verdict(agent=None)).attributes or {}
    assert "gen_ai.agent.name" not in attributes


def base(name: str, label: str, kind: str, gate: bool = True) -> dict[str, Any]:
    return {
        "gen_ai.evaluation.name": name,
        "gen_ai.evaluation.score.label": label,
        "eval.kind": kind,
        "eval.gate": gate,
    }


EVENT_CASES = [
    pytest.param(
        CheckResult("allowed_tools", PASS, detail="2 calls, all allowed"),
        {**base("allowed_tools", "pass", "check"), "gen_ai.evaluation.score.value": 1.0,
         "gen_ai.evaluation.explanation": "2 calls, all allowed"},
        id="check-pass",
    ),
    pytest.param(
        CheckResult("allowed_tools", FAIL, detail="called delete_account"),
        {**base("allowed_tools", "fail", "check"), "gen_ai.evaluation.score.value": 0.0,
         "gen_ai.evaluation.explanation": "called delete_account"},
        id="check-fail",
    ),
    pytest.param(
        CheckResult("grounded", ERROR, gate=False, detail="no answer captured"),
        {**base("grounded", "error", "check", gate=False), "error.type": "check_error",
         "gen_ai.evaluation.explanation": "no answer captured"},
        id="check-error-no-score",
    ),
    pytest.param(
        CriterionResult("correct_amount", PASS, evidence="refund of $40"),
        {**base("correct_amount", "pass", "criterion"), "gen_ai.evaluation.score.value": 1.0,
         "gen_ai.evaluation.explanation": "refund of $40"},
        id="criterion-pass-evidence",
    ),
    pytest.param(
        CriterionResult("polite", FAIL, evidence="NONE"),
        {**base("polite", "fail", "criterion"), "gen_ai.evaluation.score.value": 0.0,
         "gen_ai.evaluation.explanation": "NONE"},
        id="criterion-fail",
    ),
    pytest.param(
        CriterionResult("polite", ERROR, reason="unsupported_evidence"),
        {**base("polite", "error", "criterion"), "error.type": "unsupported_evidence",
         "gen_ai.evaluation.explanation": "unsupported_evidence"},
        id="criterion-error-reason-is-error-type",
    ),
    pytest.param(
        CriterionResult("polite", ERROR),
        {**base("polite", "error", "criterion"), "error.type": "error"},
        id="criterion-error-without-reason",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("result", "expected"), EVENT_CASES)
def test_one_evaluation_event_per_result(
    exported: tuple[VerdictSpans, InMemorySpanExporter],
    result: CheckResult | CriterionResult,
    expected: dict[str, Any],
) -> None:
    if isinstance(result, CheckResult):
        v = verdict(checks=[result])
    else:
        v = verdict(checks=[], criteria=[result])
    (event,) = emit_one(exported, v).events
    assert event.name == EVENT_NAME == "gen_ai.evaluation.result"
    attributes = dict(event.attributes or {})
    evaluator = {k: attributes.pop(k) for k in list(attributes) if k in EVALUATOR_KEYS}
    assert attributes == expected
    assert evaluator[EVALUATOR_ID] == f"refund-support/{result.name}"


EVALUATOR_KEYS = {EVALUATOR_ID, EVALUATOR_VERSION, EVALUATOR_TYPE, SCHEMA_ATTRIBUTE}


def test_every_event_names_its_evaluator_and_the_conventions_followed(
    exported: tuple[VerdictSpans, InMemorySpanExporter],
) -> None:
    v = verdict(
        checks=[CheckResult("allowed_tools", FAIL, detail="x")],
        criteria=[CriterionResult("polite", PASS, evidence="hi")],
    )
    v = dataclasses.replace(v, rubric_hash="0123456789ab")
    check, criterion = (dict(e.attributes or {}) for e in emit_one(exported, v).events)
    assert {k: check[k] for k in EVALUATOR_KEYS} == {
        EVALUATOR_ID: "refund-support/allowed_tools",
        EVALUATOR_VERSION: "3+0123456789ab",
        EVALUATOR_TYPE: "deterministic",
        SCHEMA_ATTRIBUTE: EVALUATION_SCHEMA,
    }
    assert {k: criterion[k] for k in EVALUATOR_KEYS} == {
        EVALUATOR_ID: "refund-support/polite",
        EVALUATOR_VERSION: "3+0123456789ab",
        EVALUATOR_TYPE: "llm_judge",
        SCHEMA_ATTRIBUTE: EVALUATION_SCHEMA,
    }
    assert SCHEMA_ATTRIBUTE == "sidecar.semconv.evaluation_schema"


def test_events_in_order_checks_then_judged_criteria(
    exported: tuple[VerdictSpans, InMemorySpanExporter],
) -> None:
    v = verdict(
        checks=[CheckResult("c1", PASS), CheckResult("c2", FAIL)],
        criteria=[
            CriterionResult("k1", PASS, evidence="x"),
            CriterionResult("k2", SKIPPED, reason="not_sampled"),
            CriterionResult("k3", ERROR, reason="missing"),
        ],
    )
    events = emit_one(exported, v).events
    names = [(e.attributes or {})["gen_ai.evaluation.name"] for e in events]
    assert names == ["c1", "c2", "k1", "k3"]  # SKIPPED criteria were not judged: no event


def test_no_span_without_a_root_to_attach_to(
    exported: tuple[VerdictSpans, InMemorySpanExporter],
) -> None:
    spans, exporter = exported
    assert spans.emit(verdict(root_span_id=None)) is False
    assert exporter.get_finished_spans() == ()


def test_disabled_spans_do_no_work() -> None:
    # otel.enabled false: not even an unexported span is built (it cost ~8% of the service).
    spans = VerdictSpans.disabled()
    assert spans.emit(verdict()) is False
    assert spans.flush()
    spans.shutdown()


def test_json_lines_exporter_writes_what_decode_reads(tmp_path: Path) -> None:
    path = tmp_path / "out" / "verdict-spans.jsonl"
    spans = VerdictSpans(tracer_provider(JsonLinesSpanExporter(path), batch=False))
    first = verdict(criteria=[CriterionResult("polite", ERROR, reason="missing")])
    spans.emit(first)
    spans.emit(verdict(checks=[CheckResult("allowed_tools", FAIL)]))
    assert spans.flush()
    spans.shutdown()

    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2  # SimpleSpanProcessor: one request per span
    decoded = [s for line in lines for s in decode(line.encode())]
    assert len(decoded) == 2
    for span in decoded:
        assert (span.trace_id, span.parent_span_id) == (TRACE_ID, ROOT_SPAN_ID)
        assert span.name == "evaluate refund-support"
        assert span.kind is ModelSpanKind.INTERNAL
        assert span.resource["service.name"] == "sidecar"
        assert span.attributes["eval.rubric.id"] == "refund-support"
        assert span.attributes["gen_ai.agent.name"] == "refund-agent"
    assert [s.attributes["eval.outcome"] for s in decoded] == ["errored", "unacceptable"]
    events = decoded[0].events
    assert [e.name for e in events] == [EVENT_NAME, EVENT_NAME]
    assert events[1].attributes["gen_ai.evaluation.score.label"] == "error"
    assert "gen_ai.evaluation.score.value" not in events[1].attributes
    assert events[0].attributes["gen_ai.evaluation.score.value"] == 1.0


def test_json_lines_exporter_appends(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    for _ in range(2):
        spans = VerdictSpans(tracer_provider(JsonLinesSpanExporter(path), batch=False))
        spans.emit(verdict())
        spans.shutdown()
    assert len(path.read_text(encoding="utf-8").splitlines()) == 2
