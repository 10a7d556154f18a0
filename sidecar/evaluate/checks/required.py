"""required_tool_calls: the expected calls were made, with the expected arguments.

An expected call names a tool and a subset of its arguments; an actual call
satisfies it when the name is equal and every listed key is present with a
JSON-equal value (nested values must be equal as a whole). Each actual call
satisfies at most one expected call, so two identical expected calls need two
actual calls.

``in_order``: the expected calls appear as a subsequence of the actual calls.
``any_order``: a one-to-one assignment of actual calls to expected calls
exists (a bipartite matching, not a greedy pass: a greedy pass could spend the
only call that fits a specific expectation on a looser one).

Three-valued: a call whose arguments were not captured *might* satisfy an
expectation that lists arguments. The check PASSes if the expectations can be
met without such calls, FAILs if they cannot be met even when every such call
is assumed to fit, and is ERROR in between. Calls the model asked for that
the trace does not show at all (``Capture.tool_calls`` not captured) might be
any expected call: then only a PASS is decided, anything else is ERROR.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sidecar.evaluate.checks._common import (
    Finding,
    calls_unseen,
    compact,
    errored,
    failed,
    json_equal,
    parse_json,
    passed,
    plural,
    unseen_calls,
)
from sidecar.evaluate.checks.base import CheckConfig, CheckType, Part
from sidecar.model import Outcome, ToolCall, Transcript


class ExpectedCall(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    # Subset of the arguments that must match exactly (JSON equality per key).
    arguments: dict[str, Any] = Field(default_factory=dict)


class RequiredToolCalls(CheckConfig):
    type: Literal["required_tool_calls"]
    calls: Annotated[list[ExpectedCall], Field(min_length=1)]
    order: Literal["in_order", "any_order"] = "any_order"


class _Fit(enum.Enum):
    YES = "yes"
    NO = "no"
    UNKNOWN = "unknown"  # arguments not captured


@dataclass(frozen=True, slots=True)
class _Actual:
    name: str
    captured: bool
    arguments: dict[str, Any] | None  # None when captured but not a JSON object


def _actual(call: ToolCall, *, read_arguments: bool = True) -> _Actual:
    """The call as ``_fit`` sees it; its arguments are parsed only when ``read_arguments``.

    ``_fit`` reads them only for an expected call that lists arguments.
    """
    if call.arguments is None:
        return _Actual(call.name, captured=False, arguments=None)
    if not read_arguments:
        return _Actual(call.name, captured=True, arguments=None)
    try:
        parsed = parse_json(call.arguments)
    except ValueError:
        parsed = None
    return _Actual(call.name, captured=True, arguments=parsed if isinstance(parsed, dict) else None)


def _fit(expected: ExpectedCall, actual: _Actual) -> _Fit:
    if expected.name != actual.name:
        return _Fit.NO
    if not expected.arguments:
        return _Fit.YES
    if not actual.captured:
        return _Fit.UNKNOWN
    got = actual.arguments
    if got is not None and all(
        key in got and json_equal(value, got[key]) for key, value in expected.arguments.items()
    ):
        return _Fit.YES
    return _Fit.NO


Accept = Callable[[int, int], bool]


def _unplaced_in_order(n_expected: int, n_actual: int, accept: Accept) -> tuple[int, int] | None:
    """First expected call that cannot follow the previous ones, and where the scan stood.

    Taking the earliest fitting call each time is optimal for a subsequence.
    """
    position = 0
    for i in range(n_expected):
        j = next((j for j in range(position, n_actual) if accept(i, j)), None)
        if j is None:
            return i, position
        position = j + 1
    return None


def _unplaced_any_order(n_expected: int, n_actual: int, accept: Accept) -> int | None:
    """First expected call left out of a maximum matching (Kuhn's augmenting paths)."""
    owner: dict[int, int] = {}  # actual index -> expected index

    def augment(i: int, seen: set[int]) -> bool:
        for j in range(n_actual):
            if j in seen or not accept(i, j):
                continue
            seen.add(j)
            if j not in owner or augment(owner[j], seen):
                owner[j] = i
                return True
        return False

    for i in range(n_expected):
        if not augment(i, set()):
            return i
    return None


def _describe(expected: ExpectedCall) -> str:
    if not expected.arguments:
        return expected.name
    return f"{expected.name} {compact(expected.arguments)}"


def required_tool_calls(spec: RequiredToolCalls, transcript: Transcript) -> Finding:
    expected: Sequence[ExpectedCall] = spec.calls
    read_arguments = any(e.arguments for e in expected)
    actual = [_actual(c, read_arguments=read_arguments) for c in transcript.tool_calls]
    grid = [[_fit(e, a) for a in actual] for e in expected]

    def strict(i: int, j: int) -> bool:
        return grid[i][j] is _Fit.YES

    def loose(i: int, j: int) -> bool:
        return grid[i][j] is not _Fit.NO

    n, m = len(expected), len(actual)
    unseen = calls_unseen(transcript)
    if spec.order == "in_order":
        sure = _unplaced_in_order(n, m, strict)
        if sure is None:
            return passed(f"{plural(n, 'expected call')} found in order")
        if unseen:
            return unseen_calls(transcript)
        miss = _unplaced_in_order(n, m, loose)
        if miss is not None:
            i, position = miss
            early = any(loose(i, j) for j in range(position))
            note = " (a fitting call comes too early)" if early else ""
            return failed(f"missing {_describe(expected[i])} in order{note}")
        return _undecided(expected[sure[0]])

    sure_any = _unplaced_any_order(n, m, strict)
    if sure_any is None:
        return passed(f"{plural(n, 'expected call')} found")
    if unseen:
        return unseen_calls(transcript)
    missing = _unplaced_any_order(n, m, loose)
    if missing is not None:
        name = expected[missing].name
        same_name = sum(1 for a in actual if a.name == name)
        note = f" ({plural(same_name, 'call')} of {name}, none fits)" if same_name else ""
        return failed(f"missing {_describe(expected[missing])}{note}")
    return _undecided(expected[sure_any])


def _undecided(expected: ExpectedCall) -> Finding:
    return errored(f"cannot tell if {_describe(expected)} was made: arguments not captured")


# The expected call may be among the spans a truncated trace lost.
REQUIRED_TOOL_CALLS = CheckType(
    RequiredToolCalls,
    required_tool_calls,
    inconclusive_if_truncated=Outcome.FAIL,
    about_tools=True,
    reads=frozenset({Part.TOOL_CALLS, Part.CAPTURE}),
)
