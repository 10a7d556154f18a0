"""Builders for conversation tests: turns as traces, turn records, conversation rubrics.

Also what the service-level conversation tests share: the refund conversation
(a lookup turn, then a refund turn), its checks, the settings the in-memory
rigs run with, and one round of both stages.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from sidecar.adapters.prometheus import Metrics
from sidecar.conversation import turn_builder
from sidecar.engine.replica import Service
from sidecar.evaluate.rubric import Rubric
from sidecar.evaluate.transcript import build_transcript
from sidecar.model import Trace
from sidecar.settings import Settings
from sidecar.wire.turn_records import TurnRecord
from tests.builders import ToolSpec, genai_trace, rubric, rubric_yaml, trace_id
from tests.service_rig import ManualClock, quiesce

SECOND = 1_000_000_000
CONVERSATION_KEY = "gen_ai.conversation.id"

LOOKUP: ToolSpec = ("lookup_order", {"order_id": "A17"}, '{"order_id": "A17", "total": 40.00}')
REFUND: ToolSpec = ("issue_refund", {"order_id": "A17"}, '{"status": "ok"}')


def refund_checks(*more: dict[str, Any]) -> list[dict[str, Any]]:
    """``lookup_then_refund`` (in order) and ``amount_grounded``, then ``more``."""
    return [
        {
            "name": "lookup_then_refund",
            "type": "required_tool_calls",
            "order": "in_order",
            "calls": [{"name": "lookup_order"}, {"name": "issue_refund"}],
        },
        {"name": "amount_grounded", "type": "grounded_numbers"},
        *more,
    ]


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
    return turn_builder.turn_record(build_transcript(trace), trace, conversation, rubrics)


def refund_conversation_yaml(idle_timeout_s: float, checks: Sequence[Mapping[str, Any]]) -> str:
    """The rubric file of ``refund-conversation`` (version 1, ``scope: conversation``)."""
    return rubric_yaml(
        id="refund-conversation",
        version="1",
        scope="conversation",
        conversation={"idle_timeout_s": idle_timeout_s},
        checks=list(checks),
    )


def refund_conversation(
    cid: str, base: int, *, gap_s: float, refund_text: str = "Refund it"
) -> list[Trace]:
    """Two turns of ``cid``: a lookup (trace ``base + 1``), then ``gap_s`` later a refund."""
    return [
        turn_trace(base + 1, cid, "Where is order A17?", [LOOKUP], "It cost $40.", at_s=0),
        turn_trace(base + 2, cid, refund_text, [REFUND], "Refunded $40.", at_s=gap_s),
    ]


def rig_settings(**conversations: Any) -> Settings:
    """The settings the in-memory conversation rigs run with: no HTTP, no OTel export."""
    return Settings(
        kafka={"commit_interval_s": 0.1},
        assembler={"decision_wait_s": 1.0},
        metrics={"host": "127.0.0.1", "port": 0},
        otel={"enabled": False},
        review={"enabled": False},
        conversations=conversations,
    )


async def both_stages_round(service: Service, clock: ManualClock, advance: float = 0.0) -> None:
    """Advance the clock, then step the trace stage and the conversation stage once each."""
    clock.advance(advance)
    await quiesce()
    await service.step()
    await quiesce()
    stage = service.conversations
    assert stage is not None
    await stage.step()
    await quiesce()


def _metrics(service: Service) -> Metrics:
    assert isinstance(service.telemetry, Metrics), "the rig's service counts into Metrics"
    return service.telemetry


def metric_total(service: Service, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(
        s.value
        for f in _metrics(service).registry.collect()
        for s in f.samples
        if s.name == name and labels.items() <= s.labels.items()
    )
