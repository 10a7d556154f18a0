"""Deterministic checks: the hard gates run on every trace a rubric applies to.

``run_checks(rubric, transcript)`` returns one ``CheckResult`` per check, in
rubric order, carrying the check's name and gate. Every check is a pure
function of its spec and the transcript and ends in exactly one of:

- PASS / FAIL: the evidence decides it;
- ERROR: the evidence cannot decide it (content not captured, trace
  truncated, or the check itself raised). ERROR is never read as a PASS or
  a FAIL, and a check never takes the pipeline down.

Check families live in one module each: ``tools`` (allow/deny lists, call
counts, argument schemas), ``required`` (expected calls), ``answer`` (regex,
JSON schema), ``trace`` (latency, error spans) and ``grounding`` (numbers).
"""

from __future__ import annotations

import re
from typing import assert_never

import jsonschema
from referencing.exceptions import Unresolvable

from sidecar.checks._common import Finding, errored
from sidecar.checks.answer import answer_json_schema, answer_regex
from sidecar.checks.grounding import grounded_numbers
from sidecar.checks.required import required_tool_calls
from sidecar.checks.tools import max_tool_calls, tool_allowlist, tool_arguments, tool_denylist
from sidecar.checks.trace import max_latency_ms, no_error_spans
from sidecar.model import CheckResult, Outcome, Transcript
from sidecar.rubric import (
    AnswerJsonSchema,
    AnswerRegex,
    CheckSpec,
    GroundedNumbers,
    MaxLatencyMs,
    MaxToolCalls,
    NoErrorSpans,
    RequiredToolCalls,
    Rubric,
    ToolAllowlist,
    ToolArguments,
    ToolDenylist,
)

__all__ = ["run_check", "run_checks"]

# What a check may raise on hostile or odd input (a spec built without
# validation, a $ref that cannot be resolved, absurd nesting or numbers).
_CHECK_FAULTS = (
    ArithmeticError,
    IndexError,
    KeyError,
    RecursionError,
    TypeError,
    ValueError,
    re.error,
    jsonschema.SchemaError,
    Unresolvable,
)

# A truncated trace lost spans we will never see. A check claiming that nothing
# bad happened can only lose its PASS to them; a check claiming that something
# needed happened can only lose its FAIL. That outcome becomes ERROR; checks on
# the answer and the root span are not affected.
_INCONCLUSIVE_WHEN_TRUNCATED: dict[str, Outcome] = {
    "tool_allowlist": Outcome.PASS,
    "tool_denylist": Outcome.PASS,
    "max_tool_calls": Outcome.PASS,
    "tool_arguments": Outcome.PASS,
    "no_error_spans": Outcome.PASS,
    "required_tool_calls": Outcome.FAIL,
    "grounded_numbers": Outcome.FAIL,
}


def run_checks(rubric: Rubric, transcript: Transcript) -> tuple[CheckResult, ...]:
    """Run every check of ``rubric`` on ``transcript``, in rubric order."""
    return tuple(run_check(spec, transcript) for spec in rubric.checks)


def run_check(spec: CheckSpec, transcript: Transcript) -> CheckResult:
    """Run one check; never raises for anything the transcript or spec may hold."""
    try:
        finding = _evaluate(spec, transcript)
    except _CHECK_FAULTS as exc:
        finding = errored(f"check raised {type(exc).__name__}: {exc}")
    if transcript.truncated and finding.outcome is _INCONCLUSIVE_WHEN_TRUNCATED.get(spec.type):
        finding = errored(f"trace truncated, inconclusive: {finding.detail}")
    return CheckResult(
        name=spec.name, outcome=finding.outcome, gate=spec.gate, detail=finding.detail
    )


def _evaluate(spec: CheckSpec, transcript: Transcript) -> Finding:
    match spec:
        case ToolAllowlist():
            return tool_allowlist(spec, transcript)
        case ToolDenylist():
            return tool_denylist(spec, transcript)
        case RequiredToolCalls():
            return required_tool_calls(spec, transcript)
        case ToolArguments():
            return tool_arguments(spec, transcript)
        case MaxToolCalls():
            return max_tool_calls(spec, transcript)
        case AnswerRegex():
            return answer_regex(spec, transcript)
        case AnswerJsonSchema():
            return answer_json_schema(spec, transcript)
        case MaxLatencyMs():
            return max_latency_ms(spec, transcript)
        case NoErrorSpans():
            return no_error_spans(spec, transcript)
        case GroundedNumbers():
            return grounded_numbers(spec, transcript)
        case _:
            assert_never(spec)
