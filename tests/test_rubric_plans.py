"""A rubric compiled into a plan concludes what the checks conclude on the full transcript.

- every check type declares the transcript parts it reads, and reads no other:
  on a transcript holding only those parts (``only_parts``) it concludes what
  it concludes on the full one;
- a rubric's plan gives, check for check, what ``run_checks`` gives on the full
  transcript, on truncated traces and fragments too;
- ``pipeline.plan`` through the compiled plan plans the cases ``plan`` with
  ``run_checks`` plans;

over generated traces of every convention (hypothesis), the recorded ADK 1.14
traces of tests/data/adk1 and the OTel GenAI traces the replay bench uses.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given

from sidecar.evaluate.checks import CHECK_TYPES, run_checks
from sidecar.evaluate.checks.base import Part
from sidecar.evaluate.pipeline import FRAGMENT, RunChecks, as_fragment, plan
from sidecar.evaluate.plan import (
    PART_FIELDS,
    compile_plan,
    compile_rubric,
    only_parts,
)
from sidecar.evaluate.rubric import Rubric, load_rubrics
from sidecar.evaluate.sample import Sampler
from sidecar.evaluate.transcript import build_transcript
from sidecar.ingest.assemble import Assembler
from sidecar.ingest.decode import decode
from sidecar.model import CheckResult, DecideReason, Span, Trace, Transcript
from tests.agents.adk_traces import ALL as ADK_SCENARIOS
from tests.agents.adk_traces import adk1_spans
from tests.agents.genai_spans import make_cases
from tests.agents.otlp import split_requests
from tests.fuzz_shapes import traces
from tests.fuzz_strategies import FUZZ

REPO = Path(__file__).resolve().parents[1]

# One rubric with every trace-scope check type, some twice with other settings.
EVERY_CHECK = Rubric.model_validate(
    {
        "id": "every-check",
        "version": "1",
        "untrusted_tools": ["lookup_order"],
        "checks": [
            {"name": "allow", "type": "tool_allowlist", "tools": ["lookup_order", "issue_refund"]},
            {"name": "deny", "type": "tool_denylist", "tools": ["delete_account"]},
            {
                "name": "required",
                "type": "required_tool_calls",
                "calls": [{"name": "lookup_order"}, {"name": "issue_refund"}],
                "order": "in_order",
            },
            {
                "name": "required_args",
                "type": "required_tool_calls",
                "calls": [{"name": "issue_refund", "arguments": {"amount": 40}}],
            },
            {
                "name": "arguments",
                "type": "tool_arguments",
                "tool": "issue_refund",
                "schema": {"type": "object", "required": ["order_id"]},
            },
            {"name": "calls", "type": "max_tool_calls", "limit": 3},
            {"name": "calls_of", "type": "max_tool_calls", "limit": 1, "tool": "lookup_order"},
            {"name": "regex", "type": "answer_regex", "must_match": "(?i)refund"},
            {"name": "not_regex", "type": "answer_regex", "must_not_match": "[0-9]{4}"},
            {"name": "json", "type": "answer_json_schema", "schema": {"type": "object"}},
            {"name": "latency", "type": "max_latency_ms", "limit": 2000},
            {"name": "errors", "type": "no_error_spans"},
            {"name": "grounded", "type": "grounded_numbers", "allow": [24]},
            {"name": "turns", "type": "max_turns", "limit": 1},
        ],
    }
)


@functools.cache
def _loaded() -> tuple[Rubric, ...]:
    return (EVERY_CHECK, *load_rubrics(REPO / "rubrics"))


def _rubrics() -> list[Rubric]:
    return list(_loaded())


def _assembled(spans: Sequence[Span]) -> list[Trace]:
    assembler = Assembler(decision_wait=0.0, max_trace_age=1e9, max_open_traces=10**9)
    traces = list(assembler.add(list(spans), 0.0))
    traces.extend(assembler.drain(DecideReason.FLUSH))
    return traces


@functools.cache
def _recorded_traces() -> list[Trace]:
    traces = [t for name in ADK_SCENARIOS for t in _assembled(adk1_spans(name))]
    records = [part for case in make_cases(60, seed=3) for part in split_requests(case.spans, 2)]
    traces += _assembled([span for record in records for span in decode(record)])
    return traces


def _variants(transcript: Transcript) -> list[tuple[Transcript, str | None]]:
    """The transcript as read, truncated, and as a fragment."""
    from dataclasses import replace

    return [
        (transcript, None),
        (replace(transcript, truncated=True), None),
        (as_fragment(transcript), FRAGMENT),
    ]


def _agree(trace: Trace) -> None:
    transcript = build_transcript(trace)
    for rubric in _rubrics():
        compiled = compile_rubric(rubric)
        for seen, fragment in _variants(transcript):
            expected = run_checks(rubric, seen, fragment=fragment)
            assert compiled.run_checks(seen, fragment=fragment) == expected
            for check, result in zip(compiled.checks, expected, strict=True):
                partial = only_parts(seen, check.reads)
                assert check.run(partial, fragment) == result, (check.spec.name, trace.trace_id)


def _same_cases(trace: Trace) -> None:
    rubrics = _rubrics()

    def general(
        rubric: Rubric, transcript: Transcript, *, fragment: str | None = None
    ) -> tuple[CheckResult, ...]:
        return run_checks(rubric, transcript, fragment=fragment)

    unplanned: RunChecks = general
    base, cases = plan(trace, rubrics, Sampler(judge_enabled=False), 0.0)
    base_general, cases_general = plan(
        trace, rubrics, Sampler(judge_enabled=False), 0.0, checks=unplanned
    )
    assert base == base_general == build_transcript(trace)
    assert cases == cases_general


def test_every_check_type_declares_what_it_reads() -> None:
    for check_type in CHECK_TYPES:
        assert check_type.reads, check_type.name
        assert check_type.reads <= set(Part)
    assert set(PART_FIELDS) == set(Part)
    transcript_fields = set(Transcript.__dataclass_fields__)
    assert {f for fields in PART_FIELDS.values() for f in fields} <= transcript_fields


def test_a_plan_is_compiled_once_per_rubric_set() -> None:
    rubrics = _rubrics()
    first = compile_plan(rubrics)
    assert compile_plan(list(rubrics)) is first
    assert [r.rubric for r in first.rubrics] == rubrics
    assert first.reads == set(Part)
    fast = Rubric.model_validate(
        {
            "id": "fast",
            "version": "1",
            "checks": [
                {"name": "latency", "type": "max_latency_ms", "limit": 10},
                {"name": "errors", "type": "no_error_spans"},
            ],
        }
    )
    assert compile_plan([fast]).reads == {Part.LATENCY, Part.ERROR_SPANS}


def test_only_parts_leaves_out_what_is_not_declared() -> None:
    trace = _recorded_traces()[0]
    transcript = build_transcript(trace)
    assert transcript.tool_calls
    assert transcript.answer is not None
    partial = only_parts(transcript, frozenset({Part.LATENCY}))
    assert partial.latency_ms == transcript.latency_ms
    assert partial.tool_calls == ()
    assert partial.answer is None


@pytest.mark.parametrize("index", range(4 + 60))
def test_plan_and_full_transcript_agree_on_recorded_traces(index: int) -> None:
    traces = _recorded_traces()
    if index < len(traces):
        _agree(traces[index])
        _same_cases(traces[index])


@FUZZ
@given(traces())
def test_plan_and_full_transcript_agree_on_generated_traces(trace: Trace) -> None:
    _agree(trace)
    _same_cases(trace)
