"""Checks over which tools were called and with what arguments.

``tool_allowlist``, ``tool_denylist``, ``max_tool_calls`` and ``tool_arguments``.

When the model asked for tool calls the trace does not show (content capture
off and no tool spans: ``Capture.tool_calls`` not captured), what was seen can
still FAIL a check (a forbidden call, too many calls, a bad argument), but
nothing can PASS it: the unseen calls may be the ones that break it. That is
ERROR, with the producer setting to change.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Literal

from pydantic import Field

from sidecar.evaluate.checks._common import (
    Finding,
    calls_unseen,
    errored,
    failed,
    parse_json,
    passed,
    plural,
    schema_violation,
    unseen_calls,
)
from sidecar.evaluate.checks.base import CheckConfig, CheckType, Limit, Part, SchemaCheckConfig
from sidecar.model import Captured, Outcome, Transcript


class ToolAllowlist(CheckConfig):
    type: Literal["tool_allowlist"]
    tools: list[str]


class ToolDenylist(CheckConfig):
    type: Literal["tool_denylist"]
    tools: list[str]


class ToolArguments(SchemaCheckConfig):
    type: Literal["tool_arguments"]
    tool: str


class MaxToolCalls(CheckConfig):
    type: Literal["max_tool_calls"]
    limit: Annotated[int, Field(ge=0), Limit]
    tool: str | None = None  # count only this tool when given


def _names(names: Iterable[str], limit: int = 5) -> str:
    distinct = list(dict.fromkeys(names))
    shown = ", ".join(distinct[:limit])
    return shown if len(distinct) <= limit else f"{shown} (+{len(distinct) - limit} more)"


def tool_allowlist(spec: ToolAllowlist, transcript: Transcript) -> Finding:
    allowed = set(spec.tools)
    outside = [c.name for c in transcript.tool_calls if c.name not in allowed]
    if outside:
        return failed(f"called {_names(outside)}")
    if calls_unseen(transcript):
        return unseen_calls(transcript)
    return passed(f"{plural(len(transcript.tool_calls), 'call')}, all allowed")


def tool_denylist(spec: ToolDenylist, transcript: Transcript) -> Finding:
    denied = set(spec.tools)
    hits = [c.name for c in transcript.tool_calls if c.name in denied]
    if hits:
        return failed(f"called {_names(hits)}")
    if calls_unseen(transcript):
        return unseen_calls(transcript)
    return passed("no denied tool called")


def max_tool_calls(spec: MaxToolCalls, transcript: Transcript) -> Finding:
    calls = [c for c in transcript.tool_calls if spec.tool is None or c.name == spec.tool]
    what = plural(len(calls), "call") + (f" of {spec.tool}" if spec.tool else "")
    if len(calls) > spec.limit:
        return failed(f"{what} > limit {spec.limit}")
    if calls_unseen(transcript):
        # Each turn that asked for tools made one call at least.
        at_least = len(calls) + transcript.capture.unseen_tool_calls
        if spec.tool is None and at_least > spec.limit:
            return failed(f"at least {plural(at_least, 'call')} > limit {spec.limit}")
        return unseen_calls(transcript)
    return passed(f"{what} <= limit {spec.limit}")


def tool_arguments(spec: ToolArguments, transcript: Transcript) -> Finding:
    """Every call of ``spec.tool`` must carry arguments valid under the schema.

    A definite violation wins over calls whose arguments were not captured:
    one bad call is enough to FAIL, whatever the uncaptured ones held.
    """
    calls = [c for c in transcript.tool_calls if c.name == spec.tool]
    if not calls:
        return unseen_calls(transcript) if calls_unseen(transcript) else passed("not called")
    uncaptured = 0
    for number, call in enumerate(calls, start=1):
        where = f"call {number} of {spec.tool}"
        if call.arguments is None:
            uncaptured += 1
            continue
        try:
            arguments = parse_json(call.arguments)
        except ValueError:
            return failed(f"{where}: arguments are not JSON")
        problem = schema_violation(spec.schema_, arguments)
        if problem is not None:
            return failed(f"{where}: {problem}")
    if uncaptured:
        capture = transcript.capture
        counted = f"arguments of {uncaptured} of {plural(len(calls), 'call')}"
        if capture.tool_call_arguments is Captured.UNREADABLE:
            return errored(f"{counted} {capture.unreadable_note}")
        advice = capture.advice
        return errored(f"{counted} not captured" + (f"; {advice}" if advice else ""))
    if calls_unseen(transcript):
        return unseen_calls(transcript)
    return passed(f"{plural(len(calls), 'call')} of {spec.tool} valid")


# The calls, and what was captured of them (a call the trace cannot show).
_READS = frozenset({Part.TOOL_CALLS, Part.CAPTURE})

# A truncated trace may hide a call: none of these can claim a PASS on it.
TOOL_ALLOWLIST = CheckType(
    ToolAllowlist,
    tool_allowlist,
    inconclusive_if_truncated=Outcome.PASS,
    about_tools=True,
    reads=_READS,
)
TOOL_DENYLIST = CheckType(
    ToolDenylist,
    tool_denylist,
    inconclusive_if_truncated=Outcome.PASS,
    about_tools=True,
    reads=_READS,
)
TOOL_ARGUMENTS = CheckType(
    ToolArguments,
    tool_arguments,
    inconclusive_if_truncated=Outcome.PASS,
    about_tools=True,
    reads=_READS,
)
MAX_TOOL_CALLS = CheckType(
    MaxToolCalls,
    max_tool_calls,
    inconclusive_if_truncated=Outcome.PASS,
    about_tools=True,
    reads=_READS,
)
