"""The conversation stage in the service, on the in-memory broker and a manual clock.

Traces in on the spans topic -> turn records out to eval_turns -> the
conversation stage (own group) -> conversation verdicts; the eval_turns
commit rule, restarts that rebuild open conversations, late turns, the bound.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sidecar.adapters.otel import VerdictSpans
from sidecar.adapters.prometheus import Metrics
from sidecar.engine.offload import inline
from sidecar.engine.replica import Service
from sidecar.evaluate.rubric import Rubric
from sidecar.model import Trace
from tests.builders import rubric
from tests.conversation_builders import (
    both_stages_round,
    conversation_rubric,
    metric_total,
    refund_checks,
    refund_conversation,
    rig_settings,
    turn_trace,
)
from tests.fakes import MemorySink, MemorySource, MemoryTopic, MemoryTurns
from tests.otlp_records import record
from tests.service_rig import ManualClock

IDLE = 60.0
CHECKS = refund_checks({"name": "short", "type": "max_turns", "limit": 5})


@dataclass
class ConvRig:
    service: Service
    spans: MemoryTopic
    turns: MemoryTopic
    sink: MemorySink
    clock: ManualClock
    exporter: InMemorySpanExporter
    fed: list[Trace] = field(default_factory=list)

    def feed(self, trace: Trace, partition: int = 0) -> None:
        self.spans.append(partition, record(trace.spans), trace.trace_id.encode())
        self.fed.append(trace)

    async def round(self, advance: float = 0.0) -> None:
        await both_stages_round(self.service, self.clock, advance)

    def verdicts(self, scope: str = "conversation") -> list[dict[str, Any]]:
        found = [json.loads(payload) for _, payload in self.sink.verdicts]
        return [v for v in found if v.get("scope", "trace") == scope]

    def metric(self, name: str, **labels: str) -> float:
        return metric_total(self.service, name, **labels)


def make(
    spans: MemoryTopic | None = None,
    turns: MemoryTopic | None = None,
    *,
    rubrics: list[Rubric] | None = None,
    clock: ManualClock | None = None,
    **conversations: Any,
) -> ConvRig:
    spans = spans or MemoryTopic(partitions=2)
    turns = turns or MemoryTopic(partitions=2, name="eval_turns")
    clock = clock or ManualClock()
    sink = MemorySink(turns=MemoryTurns(turns))
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    config = rig_settings(**conversations)
    service = Service(
        config,
        rubrics
        or [
            conversation_rubric(checks=CHECKS, conversation={"idle_timeout_s": IDLE}),
            rubric(id="per-trace"),
        ],
        telemetry=Metrics(),
        spans=VerdictSpans(provider),
        source=lambda: MemorySource(spans),
        sink=lambda: sink,
        turn_source=lambda: MemorySource(turns),
        clock=clock,
        sleep=clock.sleep,
        offload=inline,
    )
    return ConvRig(service, spans, turns, sink, clock, exporter)


async def test_interleaved_conversations_on_two_partitions_get_one_verdict_each() -> None:
    rig = make()
    a, b = refund_conversation("a", 0, gap_s=20), refund_conversation("b", 10, gap_s=20)
    await rig.service.start()
    try:
        # Turns of one conversation on different spans partitions, the two interleaved.
        rig.feed(a[0], 0)
        rig.feed(b[0], 1)
        rig.feed(a[1], 1)
        rig.feed(b[1], 0)
        await rig.round()
        await rig.round(2.0)  # traces decided: turn records published
        assert rig.metric("sidecar_conversation_turns_total", result="published") == 4
        assert sum(rig.turns.highwater(p) for p in rig.turns.partitions) == 4
        await rig.round()
        assert rig.verdicts() == []
        assert rig.metric("sidecar_open_conversations") == 2
        await rig.round(IDLE)
        verdicts = sorted(rig.verdicts(), key=lambda v: v["conversation_id"])
        assert [(v["conversation_id"], v["turns"], v["revision"]) for v in verdicts] == [
            ("a", 2, 1),
            ("b", 2, 1),
        ]
        assert verdicts[0]["trace_ids"] == [a[0].trace_id, a[1].trace_id]
        assert verdicts[0]["trace_id"] == a[1].trace_id
        assert {c["name"]: c["outcome"] for c in verdicts[0]["checks"]} == {
            "lookup_then_refund": "PASS",
            "amount_grounded": "PASS",
            "short": "PASS",
        }
        assert len(rig.verdicts("trace")) == 4
        assert rig.metric("sidecar_cases_total", scope="conversation") == 2
        assert rig.metric("sidecar_cases_total", scope="trace") == 4
        assert rig.metric("sidecar_conversations_decided_total", reason="idle") == 2
        await rig.round(1.0)
        turns_source = rig.service.conversations
        assert turns_source is not None
        assert rig.turns.committed == {
            p: rig.turns.highwater(p) for p in rig.turns.partitions if rig.turns.highwater(p)
        }
        assert rig.metric("sidecar_open_conversations") == 0
    finally:
        await rig.service.close()
    # The verdict span is in the last turn's trace and links to every turn's root.
    [span] = [
        s
        for s in rig.exporter.get_finished_spans()
        if s.attributes and s.attributes.get("gen_ai.conversation.id") == "a"
    ]
    assert span.context is not None
    assert span.parent is not None
    assert f"{span.context.trace_id:032x}" == a[1].trace_id
    linked = {f"{link.context.trace_id:032x}" for link in span.links}
    assert linked == {a[0].trace_id, a[1].trace_id}


async def test_eval_turns_offsets_stay_held_until_the_conversation_is_emitted() -> None:
    rig = make()
    await rig.service.start()
    try:
        rig.feed(refund_conversation("a", 0, gap_s=20)[0], 0)
        await rig.round()
        await rig.round(2.0)
        await rig.round(1.0)
        [partition] = [p for p in rig.turns.partitions if rig.turns.highwater(p)]
        assert rig.turns.committed.get(partition, 0) == 0  # the open conversation holds it
        rig.sink.fail(3)  # the conversation verdict is refused for a while
        await rig.round(IDLE)
        await rig.round(1.0)
        assert rig.turns.committed.get(partition, 0) == 0
        for _ in range(6):
            await rig.round(30.0)
        assert len(rig.verdicts()) == 1
        await rig.round(1.0)
        assert rig.turns.committed[partition] == 1
    finally:
        await rig.service.close()


async def test_a_restart_rebuilds_open_conversations_from_the_topic() -> None:
    spans, turns = MemoryTopic(partitions=2), MemoryTopic(partitions=2, name="eval_turns")
    first = make(spans, turns)
    a = refund_conversation("a", 0, gap_s=20)
    await first.service.start()
    try:
        first.feed(a[0], 0)
        await first.round()
        await first.round(2.0)
        await first.round(1.0)
    finally:
        stop = asyncio.Event()
        stop.set()
        stage = first.service.conversations
        assert stage is not None
        await stage.drain()  # shutdown leaves the open conversation uncommitted
        await first.service.drain()
        await first.service.close()
    assert first.verdicts() == []
    second = make(spans, turns, clock=first.clock)
    await second.service.start()
    try:
        second.feed(a[1], 1)
        await second.round()
        await second.round(2.0)
        await second.round(1.0)
        await second.round(IDLE)
        [verdict] = second.verdicts()
        assert verdict["turns"] == 2  # the turn read before the restart is in it
        assert verdict["trace_ids"] == [a[0].trace_id, a[1].trace_id]
    finally:
        await second.service.close()


async def test_a_late_turn_reopens_the_conversation_as_revision_two() -> None:
    rig = make()
    a = refund_conversation("a", 0, gap_s=20)
    await rig.service.start()
    try:
        rig.feed(a[0], 0)
        await rig.round()
        await rig.round(2.0)
        await rig.round(IDLE + 1)
        [first] = rig.verdicts()
        rig.feed(a[1], 0)
        await rig.round()
        await rig.round(2.0)
        await rig.round(IDLE + 1)
        second = rig.verdicts()[-1]
        assert (first["revision"], second["revision"]) == (1, 2)
        assert second["turns"] == 2
        assert first["id"] != second["id"]
        assert {c["name"]: c["outcome"] for c in first["checks"]}["lookup_then_refund"] == "FAIL"
        assert {c["name"]: c["outcome"] for c in second["checks"]}["lookup_then_refund"] == "PASS"
        assert rig.metric("sidecar_conversations_reopened_total") == 1
    finally:
        await rig.service.close()


async def test_over_the_bound_a_conversation_is_decided_early_and_flagged() -> None:
    rig = make(max_open_conversations=1)
    await rig.service.start()
    try:
        rig.feed(turn_trace(1, "a", "hi", at_s=0), 0)
        rig.feed(turn_trace(2, "b", "hi", at_s=1), 0)
        await rig.round()
        await rig.round(2.0)
        await rig.round(1.0)
        [evicted] = rig.verdicts()
        assert evicted["flags"] == ["decided_early"]
        assert {c["name"]: c["outcome"] for c in evicted["checks"]}["short"] == "ERROR"
        assert rig.metric("sidecar_evictions_total", kind="open_conversations") == 1
        assert rig.metric("sidecar_open_conversations_limit") == 1
    finally:
        await rig.service.close()


async def test_traces_without_a_conversation_id_are_counted_and_skipped() -> None:
    rig = make()
    await rig.service.start()
    try:
        rig.feed(turn_trace(1, None, "hi"), 0)
        await rig.round()
        await rig.round(2.0)
        await rig.round(IDLE + 1)
        assert rig.metric("sidecar_conversation_turns_total", result="no_key") == 1
        assert rig.metric("sidecar_conversation_turns_total", result="published") == 0
        assert rig.verdicts() == []
        assert len(rig.verdicts("trace")) == 1
    finally:
        await rig.service.close()


async def test_without_conversation_rubrics_no_stage_runs() -> None:
    rig = make(rubrics=[rubric(id="per-trace")])
    assert rig.service.conversations is None
