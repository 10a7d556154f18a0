"""Builders for conversation tests: turns as traces, turn records, conversation rubrics."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from sidecar.conversation.turns import TurnRecord
from sidecar.model import Trace
from sidecar.rubric import Rubric
from sidecar.transcript import build_transcript
from tests.builders import ToolSpec, genai_trace, rubric, trace_id

SECOND = 1_000_000_000
CONVERSATION_KEY = "gen_ai.conversation.id"


def conversation_rubric(**fields: Any) -> Rubric:
    """A ``scope: conversation`` rubric (id ``support-conversation``)."""
    base: dict[str, Any] = {
        "id": "support-conversation",
        "scope": "conversation",
        "conversation": {"idle_timeout_s": 60},
        "checks": [],
    }
    return rubric(base, **fields)


def turn_trace(
    n: int,
    conversation: str | None,
    user_input: str,
    tool_calls: Sequence[ToolSpec] = (),
    answer: str = "Done.",
    *,
    at_s: float = 0.0,
    key: str = CONVERSATION_KEY,
    resource: Mapping[str, Any] | None = None,
) -> Trace:
    """Trace ``trace_id(n)``: one agent turn starting ``at_s`` seconds in, in ``conversation``."""
    attrs = {key: conversation} if conversation is not None else {}
    base = genai_trace(
        user_input,
        tool_calls,
        answer,
        trace_id=trace_id(n),
        root_attrs=attrs,
        resource=resource,
    )
    shift = int(at_s * SECOND)
    spans = tuple(
        dataclasses.replace(
            s,
            start_time_unix_nano=s.start_time_unix_nano + shift,
            end_time_unix_nano=s.end_time_unix_nano + shift,
        )
        for s in base.spans
    )
    return dataclasses.replace(base, spans=spans)


def turn_record(
    n: int,
    conversation: str,
    user_input: str = "Hello",
    tool_calls: Sequence[ToolSpec] = (),
    answer: str = "Done.",
    *,
    at_s: float = 0.0,
    rubrics: Sequence[str] = ("support-conversation",),
) -> TurnRecord:
    """The turn record the trace stage writes for ``turn_trace(n, ...)``."""
    trace = turn_trace(n, conversation, user_input, tool_calls, answer, at_s=at_s)
    return TurnRecord.of(build_transcript(trace), trace, conversation, rubrics)
