"""Checks on a conversation as a whole: ``max_turns``.

A conversation's transcript (:mod:`sidecar.conversation`) holds its turns; a
trace's transcript is one turn. ``max_turns`` fails when the conversation took
more turns than ``limit`` (the customer had to come back too often). A
conversation decided early at the open-conversation bound (flag
``decided_early``) within the limit is ERROR: more turns may follow; so is one
judged without some earlier turns (``partial``): more turns came before.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from sidecar.evaluate.checks._common import Finding, errored, failed, passed, plural
from sidecar.evaluate.checks.base import CheckConfig, CheckType, Limit, Part
from sidecar.model import Flag, Transcript


class MaxTurns(CheckConfig):
    type: Literal["max_turns"]
    limit: Annotated[int, Field(ge=1), Limit]


def max_turns(spec: MaxTurns, transcript: Transcript) -> Finding:
    turns = len(transcript.turns) or 1
    if turns > spec.limit:
        return failed(f"{plural(turns, 'turn')} > limit {spec.limit}")
    if Flag.DECIDED_EARLY in transcript.flags:
        return errored(f"{plural(turns, 'turn')} so far; decided early, more turns may follow")
    if Flag.PARTIAL in transcript.flags:
        return errored(f"{plural(turns, 'turn')} seen; earlier turns are missing")
    return passed(f"{plural(turns, 'turn')} <= limit {spec.limit}")


# Truncation loses spans, not turns; a conversation decided early is flagged apart.
MAX_TURNS = CheckType(
    MaxTurns,
    max_turns,
    inconclusive_if_truncated=None,
    about_tools=False,
    reads=frozenset({Part.TURNS, Part.FLAGS}),
)
