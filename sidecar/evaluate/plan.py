"""Rubrics compiled into a plan: what their checks read, and the checks as code.

``compile_plan(rubrics)`` is done once per rubric set (the service's, a
replay's) and remembered: for each trace-scope rubric the checks with their
evaluation resolved, and the parts of the transcript its checks read (``CheckType.reads``,
:class:`~sidecar.evaluate.checks.base.Part`); for the set, the union.

A plan's check is concluded by ``run_finding``, as ``run_checks`` concludes
it, so it concludes the same on the same transcript, check for check
(tests/test_rubric_plans.py): the same faults
become ERROR, and truncation and fragments make the same outcomes
inconclusive.

The transcript itself is read once per trace whatever the plan reads: routing
needs the root and agent spans' attributes (the agent span is known only by
reading every span's convention), and every caller of ``plan`` counts what was
not captured (``Transcript.capture``), which depends on the messages of every
chat/LLM span and on every tool span; the judge, review and turn records read
the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sidecar.evaluate.checks import check_type_of, run_finding
from sidecar.evaluate.checks._common import Finding
from sidecar.evaluate.checks.base import CheckConfig, Part
from sidecar.evaluate.rubric import Rubric, Scope
from sidecar.model import CheckResult, Transcript

__all__ = [
    "PART_FIELDS",
    "CompiledCheck",
    "Plan",
    "RubricPlan",
    "compile_plan",
    "compile_rubric",
    "only_parts",
]

# The fields of a transcript each part is; every check also reads ``truncated``.
PART_FIELDS: dict[Part, tuple[str, ...]] = {
    Part.TOOL_CALLS: ("tool_calls",),
    Part.ANSWER: ("answer",),
    Part.USER_INPUT: ("user_input",),
    Part.CAPTURE: ("capture",),
    Part.LATENCY: ("latency_ms", "latency_error"),
    Part.ERROR_SPANS: ("error_spans",),
    Part.FLAGS: ("flags",),
    Part.TURNS: ("turns",),
}


def only_parts(transcript: Transcript, parts: frozenset[Part]) -> Transcript:
    """``transcript`` with only ``parts`` (and its ids and ``truncated``); the rest as unset.

    What a check declaring ``parts`` concludes on it is what it concludes on
    ``transcript``: the declarations are tested so.
    """
    kept = {name: getattr(transcript, name) for part in parts for name in PART_FIELDS[part]}
    return Transcript(
        trace_id=transcript.trace_id,
        root_span_id=transcript.root_span_id,
        truncated=transcript.truncated,
        **kept,
    )


@dataclass(frozen=True, slots=True)
class CompiledCheck:
    """One check of a rubric with its type resolved."""

    spec: CheckConfig
    evaluate: Callable[[Any, Transcript], Finding]
    reads: frozenset[Part]

    def run(self, transcript: Transcript, fragment: str | None) -> CheckResult:
        """What ``run_check(spec, transcript, fragment=fragment)`` gives."""
        spec, evaluate = self.spec, self.evaluate
        return run_finding(
            spec,
            lambda: evaluate(spec, transcript),
            truncated=transcript.truncated,
            fragment=fragment,
        )


@dataclass(frozen=True, slots=True)
class RubricPlan:
    """One rubric compiled: its checks, and what they read."""

    rubric: Rubric
    checks: tuple[CompiledCheck, ...]
    reads: frozenset[Part]

    def run_checks(
        self, transcript: Transcript, *, fragment: str | None = None
    ) -> tuple[CheckResult, ...]:
        """What ``run_checks(rubric, transcript, fragment=fragment)`` gives."""
        return tuple(check.run(transcript, fragment) for check in self.checks)


@dataclass(frozen=True, slots=True)
class Plan:
    """A rubric set compiled: its trace-scope rubrics in order, and what they read together."""

    rubrics: tuple[RubricPlan, ...]
    reads: frozenset[Part]


def compile_rubric(rubric: Rubric) -> RubricPlan:
    checks = []
    for spec in rubric.checks:
        check_type = check_type_of(spec)
        checks.append(CompiledCheck(spec, check_type.evaluate, check_type.reads))
    return RubricPlan(rubric, tuple(checks), frozenset().union(*(c.reads for c in checks)))


# Plans by the identity of the rubric set's members; the rubrics are held by the entry,
# so an id cannot be reused while it is cached. Services hold one set, tests a few.
_PLANS: dict[tuple[int, ...], tuple[tuple[Rubric, ...], Plan]] = {}
_MAX_PLANS = 64


def compile_plan(rubrics: Sequence[Rubric]) -> Plan:
    """The plan of ``rubrics`` (compiled on first use, then remembered)."""
    members = tuple(rubrics)
    key = tuple(map(id, members))
    cached = _PLANS.get(key)
    if cached is not None and all(a is b for a, b in zip(cached[0], members, strict=True)):
        return cached[1]
    trace_scope = tuple(compile_rubric(r) for r in members if r.scope is not Scope.CONVERSATION)
    plan = Plan(trace_scope, frozenset().union(*(r.reads for r in trace_scope)))
    if len(_PLANS) >= _MAX_PLANS:
        _PLANS.clear()
    _PLANS[key] = (members, plan)
    return plan
