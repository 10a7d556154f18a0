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
JSON schema), ``trace`` (latency, error spans), ``grounding`` (numbers) and
``conversation`` (turns).
Each check type is one ``CheckType`` declaration in its family module
(``sidecar.evaluate.checks.base``); ``CHECK_TYPES`` below is the one registry. The
rubric's tagged union ``CheckSpec`` and the dispatch of ``run_check`` are
derived from it. Adding a check type: declare it in a family module, list it
here, add its PASS/FAIL/ERROR cases to tests/test_checks.py and its name to
the README (a test fails until all four are done).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Protocol, TypeAlias, Union

import jsonschema
from pydantic import Field
from referencing.exceptions import Unresolvable

from sidecar.evaluate.checks._common import Finding, errored
from sidecar.evaluate.checks.answer import ANSWER_JSON_SCHEMA, ANSWER_REGEX
from sidecar.evaluate.checks.base import CheckConfig, CheckType
from sidecar.evaluate.checks.conversation import MAX_TURNS
from sidecar.evaluate.checks.grounding import GROUNDED_NUMBERS
from sidecar.evaluate.checks.required import REQUIRED_TOOL_CALLS
from sidecar.evaluate.checks.tools import (
    MAX_TOOL_CALLS,
    TOOL_ALLOWLIST,
    TOOL_ARGUMENTS,
    TOOL_DENYLIST,
)
from sidecar.evaluate.checks.trace import MAX_LATENCY_MS, NO_ERROR_SPANS
from sidecar.model import CheckResult, Transcript, new_check_result

__all__ = [
    "CHECK_FAULTS",
    "CHECK_TYPES",
    "CheckSpec",
    "about_tools",
    "check_type_of",
    "run_check",
    "run_checks",
]

# The registry. Its order is the order of the tags in "unknown check type" errors.
CHECK_TYPES: tuple[CheckType[Any], ...] = (
    TOOL_ALLOWLIST,
    TOOL_DENYLIST,
    REQUIRED_TOOL_CALLS,
    TOOL_ARGUMENTS,
    MAX_TOOL_CALLS,
    ANSWER_REGEX,
    ANSWER_JSON_SCHEMA,
    MAX_LATENCY_MS,
    NO_ERROR_SPANS,
    GROUNDED_NUMBERS,
    MAX_TURNS,
)

_BY_CONFIG: dict[type[CheckConfig], CheckType[Any]] = {t.config: t for t in CHECK_TYPES}

if TYPE_CHECKING:
    # mypy sees the common base; every type's own fields are its module's business.
    CheckSpec: TypeAlias = CheckConfig
else:
    # pydantic sees the union of every registered config, tagged by `type`
    # (written with Union because it is built from a tuple).
    CheckSpec = Annotated[Union[tuple(_BY_CONFIG)], Field(discriminator="type")]  # noqa: UP007


class HasChecks(Protocol):
    """What ``run_checks`` reads of a rubric (``sidecar.evaluate.rubric`` imports this package, not back)."""

    @property
    def checks(self) -> Sequence[CheckConfig]: ...


# What a check may raise on hostile or odd input (a spec built without
# validation, a $ref that cannot be resolved, absurd nesting or numbers).
CHECK_FAULTS = (
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


def check_type_of(spec: CheckConfig) -> CheckType[Any]:
    """The registered type of a check entry (a rubric's plan resolves it once)."""
    return _BY_CONFIG[type(spec)]


def about_tools(spec: CheckConfig) -> bool:
    """The check judges an agent run's tool calls (``CheckType.about_tools``)."""
    return _BY_CONFIG[type(spec)].about_tools


def run_checks(
    rubric: HasChecks, transcript: Transcript, *, fragment: str | None = None
) -> tuple[CheckResult, ...]:
    """Run every check of ``rubric`` on ``transcript``, in rubric order.

    ``fragment``: why the trace is only part of the run the rubric expects (one
    LLM call of an agent run); it is then inconclusive as a truncated trace is.
    """
    return tuple(run_check(spec, transcript, fragment=fragment) for spec in rubric.checks)


def run_check(
    spec: CheckConfig, transcript: Transcript, *, fragment: str | None = None
) -> CheckResult:
    """Run one check; never raises for anything the transcript or spec may hold."""
    return run_finding(
        spec,
        lambda: _BY_CONFIG[type(spec)].evaluate(spec, transcript),
        truncated=transcript.truncated,
        fragment=fragment,
    )


def run_finding(
    spec: CheckConfig,
    evaluate: Callable[[], Finding],
    *,
    truncated: bool,
    fragment: str | None = None,
) -> CheckResult:
    """:func:`run_check` with the finding made by ``evaluate`` (a conversation's turn)."""
    check_type = _BY_CONFIG[type(spec)]
    try:
        finding = evaluate()
    except CHECK_FAULTS as exc:
        finding = errored(f"check raised {type(exc).__name__}: {exc}")
    if truncated and finding.outcome is check_type.inconclusive_if_truncated:
        finding = errored(f"trace truncated, inconclusive: {finding.detail}")
    elif fragment is not None and finding.outcome is check_type.inconclusive_if_truncated:
        finding = errored(f"{fragment}, inconclusive: {finding.detail}")
    return new_check_result(spec.name, finding.outcome, spec.gate, finding.detail)
