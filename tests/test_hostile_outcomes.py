"""Honest outcomes: what cannot be read is ERROR or flagged, never PASS (class 5).

- a root span that ends before it starts: latency ERROR, not 0 ms and PASS;
- a trace whose root never came: flagged ``incomplete``, latency and the
  answer unknown, so latency, answer checks and the judge are ERROR;
- two different spans under one id: both kept, counted, the trace flagged;
- an unreadable number in a tool result: the answer's numbers are still
  decided, so an ungrounded answer stays FAIL (``unacceptable``).
"""

from __future__ import annotations

import json

import pytest

from sidecar.evaluate.checks import run_checks
from sidecar.evaluate.pipeline import judge_cases, plan
from sidecar.evaluate.rubric import Rubric
from sidecar.evaluate.sample import Sampler
from sidecar.evaluate.transcript import build_transcript
from sidecar.evaluate.verdict import Verdict
from sidecar.ingest.assemble import Assembler
from sidecar.model import CaseOutcome, DecideReason, Flag, Outcome, SpanKind, Trace
from sidecar.wire.verdicts import verdict_json
from tests.builders import MS, genai_trace, span, trace

RUBRIC = Rubric.model_validate(
    {
        "id": "shop",
        "version": "1",
        "checks": [
            {"name": "fast", "type": "max_latency_ms", "limit": 30_000},
            {"name": "grounded", "type": "grounded_numbers"},
            {"name": "polite", "type": "answer_regex", "must_not_match": "idiot"},
            {"name": "clean", "type": "no_error_spans"},
        ],
    }
)


async def verdict_of(assembled: Trace) -> Verdict:
    _, cases = plan(assembled, [RUBRIC], Sampler(judge_enabled=False), 0.0)
    [verdict] = await judge_cases(cases, None)
    return verdict


# -- impossible timing ------------------------------------------------------------------


async def test_a_root_that_ends_before_it_starts_has_unknown_latency_not_zero() -> None:
    root = span("invoke_agent shop", span_id="a" * 16, start=10 * MS, end=2 * MS)
    transcript = build_transcript(trace(root))
    assert transcript.latency_ms is None
    assert transcript.latency_error == "the root span ends before it starts"
    assert Flag.IMPOSSIBLE_TIMING in transcript.flags
    [latency] = run_checks(
        Rubric.model_validate(
            {
                "id": "l",
                "version": "1",
                "checks": [{"name": "fast", "type": "max_latency_ms", "limit": 1}],
            }
        ),
        transcript,
    )
    assert latency.outcome is Outcome.ERROR
    assert latency.detail == "latency unknown: the root span ends before it starts"
    verdict = await verdict_of(trace(root))
    assert "impossible_timing" in verdict.flags


def test_a_child_that_ends_before_it_starts_flags_the_trace_only() -> None:
    root = span("invoke_agent shop", span_id="a" * 16, start=0, end=10 * MS)
    child = span("execute_tool x", span_id="b" * 16, parent=root, start=5 * MS, end=4 * MS)
    transcript = build_transcript(trace(root, child))
    assert transcript.latency_ms == 10.0
    assert transcript.flags == (Flag.IMPOSSIBLE_TIMING,)


# -- a root that never came ---------------------------------------------------------------


def rootless_trace(answer: str = "Your refund of $40 is on its way.") -> Trace:
    """An agent run whose root span (``invoke_agent``) never arrived."""
    full = genai_trace("Refund order A1", [("lookup", {"id": "A1"}, '{"amount": 40}')], answer)
    root = next(s for s in full.spans if s.parent_span_id is None)
    return trace(*(s for s in full.spans if s is not root), reason=DecideReason.MAX_AGE)


async def test_a_trace_without_its_root_is_incomplete_and_never_judged_complete() -> None:
    transcript = build_transcript(rootless_trace())
    assert Flag.INCOMPLETE in transcript.flags
    # Not the duration of the child span that happens to be on top, and not its output.
    assert transcript.latency_ms is None
    assert transcript.answer is None
    verdict = await verdict_of(rootless_trace())
    assert verdict.outcome is CaseOutcome.ERRORED
    assert verdict.flags == ("incomplete",)
    checks = {c.name: c for c in verdict.checks}
    assert checks["fast"].outcome is Outcome.ERROR
    assert checks["fast"].detail == "latency unknown: the root span never arrived"
    assert checks["grounded"].outcome is Outcome.ERROR
    assert checks["grounded"].detail == "answer unknown: the root span never arrived"
    assert checks["polite"].outcome is Outcome.ERROR
    # The answer was not switched off at the producer: it comes with the root, not yet here.
    assert checks["polite"].detail == "answer unknown: the root span never arrived"


@pytest.mark.parametrize(
    ("name", "kind", "attrs"),
    [
        pytest.param("POST /chat", SpanKind.SERVER, {}, id="server-span-of-this-process"),
        pytest.param("invoke_agent shop", SpanKind.INTERNAL, {}, id="agent-span"),
        pytest.param("orders", SpanKind.CONSUMER, {}, id="consumer-span"),
    ],
)
def test_an_entry_span_under_a_remote_parent_is_a_root_that_came(
    name: str, kind: SpanKind, attrs: dict[str, str]
) -> None:
    root = span(name, span_id="a" * 16, parent="f" * 16, kind=kind, attrs=attrs, end=7 * MS)
    child = span("execute_tool x", span_id="b" * 16, parent=root, start=MS)
    transcript = build_transcript(trace(root, child))
    assert transcript.flags == ()
    assert transcript.latency_ms == 7.0


# -- duplicate span ids -------------------------------------------------------------------


def test_a_different_span_under_a_known_id_is_kept_and_counted() -> None:
    assembler = Assembler(decision_wait=1.0)
    root = span("invoke_agent shop", span_id="a" * 16, end=5 * MS)
    tool = span("execute_tool refund", span_id="b" * 16, parent=root, start=MS)
    forged = span(
        "execute_tool refund", span_id="b" * 16, parent=root, start=MS, status_error="denied"
    )
    assembler.add([root, tool], now=0.0)
    assembler.add([tool], now=0.1)  # redelivered: the same span again
    assembler.add([forged], now=0.2)
    [decided] = assembler.due(now=5.0)
    assert assembler.stats.redelivered_spans == 1
    assert assembler.stats.duplicate_span_ids == 1
    assert sorted(s.status_message for s in decided.spans) == ["", "", "denied"]
    transcript = build_transcript(decided)
    assert Flag.DUPLICATE_SPAN_IDS in transcript.flags
    # The failed copy is not hidden by the first one.
    assert [e.message for e in transcript.error_spans] == ["denied"]
    assert run_checks(RUBRIC, transcript)[3].outcome is Outcome.FAIL


def test_a_duplicated_root_id_makes_latency_unknown() -> None:
    root = span("invoke_agent shop", span_id="a" * 16, end=5 * MS)
    twin = span("invoke_agent shop", span_id="a" * 16, start=MS, end=900 * MS)
    transcript = build_transcript(trace(root, twin))
    assert transcript.latency_ms is None
    assert transcript.latency_error == "the root span's id is shared by several spans"
    assert transcript.flags == (Flag.DUPLICATE_SPAN_IDS,)


async def test_the_verdict_record_names_its_flags_and_unflagged_records_are_unchanged() -> None:
    root = span("invoke_agent shop", span_id="a" * 16, end=5 * MS)
    flagged = await verdict_of(trace(root, span("x", span_id="a" * 16, start=MS)))
    plain = await verdict_of(trace(root))
    assert json.loads(verdict_json(flagged))["flags"] == ["duplicate_span_ids"]
    assert "flags" not in json.loads(verdict_json(plain))


# -- unreadable numbers in evidence -------------------------------------------------------

GROUNDED = Rubric.model_validate(
    {"id": "g", "version": "1", "checks": [{"name": "grounded", "type": "grounded_numbers"}]}
)


@pytest.mark.parametrize(
    "result",
    [
        pytest.param('{"amount": 1e999999999, "price": 40}', id="huge-exponent"),
        pytest.param('{"amount": -1E-999999999, "price": 40}', id="tiny-exponent"),
        pytest.param('{"n": ' + "9" * 5000 + ', "price": 40}', id="5000-digit-integer"),
        pytest.param('{"n": 1' + "0" * 40 + ', "price": 40.00}', id="past-decimal-precision"),
    ],
)
async def test_an_unreadable_number_in_a_tool_result_does_not_spoil_the_check(result: str) -> None:
    ungrounded = genai_trace("refund?", [("lookup", {"id": 1}, result)], "You get $45 back.")
    grounded = genai_trace("refund?", [("lookup", {"id": 1}, result)], "You get $40 back.")
    _, [case] = plan(ungrounded, [GROUNDED], Sampler(judge_enabled=False), 0.0)
    [verdict] = await judge_cases([case], None)
    assert case.checks[0].outcome is Outcome.FAIL, case.checks[0].detail
    assert verdict.outcome is CaseOutcome.UNACCEPTABLE
    _, [case] = plan(grounded, [GROUNDED], Sampler(judge_enabled=False), 0.0)
    assert case.checks[0].outcome is Outcome.PASS, case.checks[0].detail
