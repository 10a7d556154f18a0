"""Decided conversations across restarts, rebalances and forgetting, on the in-memory broker.

The state of a decided conversation (its revision and the place of each turn
in eval_turns) is written to the state topic after its verdict and before
its turns are committed, restored on assignment, and a late turn re-reads the
earlier turns by offset: revision n+1 over all turns. When the earlier turns
or the state are gone, the verdict is flagged partial, never silently judged
from part of the conversation.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.trace import TracerProvider

from sidecar.adapters.otel import VerdictSpans
from sidecar.adapters.prometheus import Metrics
from sidecar.conversation.state import fold
from sidecar.conversation.turn_builder import earlier_user_messages, turn_record
from sidecar.engine.offload import inline
from sidecar.engine.replica import Service
from sidecar.evaluate.transcript import build_transcript
from sidecar.model import Trace
from sidecar.ports import StateEntry
from sidecar.wire.state_records import parse_state, state_key
from tests.conversation_builders import (
    both_stages_round,
    conversation_rubric,
    metric_total,
    refund_checks,
    refund_conversation,
    rig_settings,
)
from tests.fakes import (
    MemoryConversationState,
    MemorySink,
    MemorySource,
    MemoryTopic,
    MemoryTurns,
)
from tests.otlp_records import record
from tests.service_rig import ManualClock

IDLE = 60.0
GROUP = "sidecar.conversations"
CHECKS = refund_checks({"name": "short", "type": "max_turns", "limit": 5})


@dataclass
class Broker:
    """The topics every replica shares, and one verdict sink."""

    spans: MemoryTopic = field(default_factory=lambda: MemoryTopic(partitions=1))
    turns: MemoryTopic = field(default_factory=lambda: MemoryTopic(2, name="eval_turns"))
    state: MemoryTopic = field(default_factory=lambda: MemoryTopic(2, name="eval_conversations"))
    sink: MemorySink = field(default_factory=MemorySink)
    journal: list[str] = field(default_factory=list)

    def verdicts(self) -> list[dict[str, Any]]:
        found = [json.loads(payload) for _, payload in self.sink.verdicts]
        return [v for v in found if v.get("scope") == "conversation"]


@dataclass
class Replica:
    service: Service
    broker: Broker
    clock: ManualClock
    spans_source: MemorySource
    turn_source: MemorySource
    state: MemoryConversationState

    def feed(self, trace: Trace) -> None:
        self.broker.spans.append(0, record(trace.spans), trace.trace_id.encode())

    async def round(self, advance: float = 0.0) -> None:
        await both_stages_round(self.service, self.clock, advance)

    async def turn(self, trace: Trace) -> None:
        """Feed one turn and run until its conversation is decided and committed."""
        self.feed(trace)
        await self.round()
        await self.round(2.0)  # the trace is decided: its turn record is published
        await self.round()  # the conversation stage holds it
        await self.round(IDLE + 1)  # idle: decided, emitted, state written
        await self.round(1.0)  # committed

    def metric(self, name: str, **labels: str) -> float:
        return metric_total(self.service, name, **labels)


def replica(
    broker: Broker,
    *,
    state: MemoryTopic | bool | None = True,
    spans_partitions: set[int] | None = None,
    turn_partitions: set[int] | None = None,
    **conversations: Any,
) -> Replica:
    clock = ManualClock()
    config = rig_settings(**conversations)
    spans_source = MemorySource(broker.spans, partitions=spans_partitions)
    turn_source = MemorySource(broker.turns, partitions=turn_partitions, journal=broker.journal)
    topic = broker.state if state is True else (None if state is False else state)
    memory_state = MemoryConversationState(topic or None, broker.turns, journal=broker.journal)
    service = Service(
        config,
        [conversation_rubric(checks=CHECKS, conversation={"idle_timeout_s": IDLE})],
        telemetry=Metrics(),
        spans=VerdictSpans(TracerProvider()),
        source=lambda: spans_source,
        sink=lambda: broker.sink.routed(turns=MemoryTurns(broker.turns), state=memory_state),
        turn_source=lambda: turn_source,
        state=lambda: memory_state,
        clock=clock,
        sleep=clock.sleep,
        offload=inline,
    )
    return Replica(service, broker, clock, spans_source, turn_source, memory_state)


def refund(cid: str, base: int) -> list[Trace]:
    return refund_conversation(cid, base, gap_s=600)


async def first_turn_decided_then_stopped(broker: Broker) -> list[Trace]:
    """Conversation "a": a replica decides and commits its first turn, then stops."""
    a = refund("a", 0)
    first = replica(broker)
    await first.service.start()
    try:
        await first.turn(a[0])
    finally:
        await first.service.close()
    return a


def with_history(trace: Trace, *earlier: str) -> Trace:
    """``trace`` whose first chat call's input starts with earlier user turns (as ADK sends)."""
    spans = list(trace.spans)
    for i, span in enumerate(spans):
        raw = span.attributes.get("gen_ai.input.messages")
        if isinstance(raw, str):
            history: list[Any] = []
            for text in earlier:
                history.append({"role": "user", "parts": [{"type": "text", "content": text}]})
                history.append({"role": "assistant", "parts": [{"type": "text", "content": "ok"}]})
            messages = [*history, *json.loads(raw)]
            attrs = {**span.attributes, "gen_ai.input.messages": json.dumps(messages)}
            spans[i] = dataclasses.replace(span, attributes=attrs)
            break
    return dataclasses.replace(trace, spans=tuple(spans))


def outcomes(verdict: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["outcome"] for c in verdict["checks"]}


async def test_restart_after_the_decision_then_a_late_turn_gives_revision_two_over_all_turns() -> (
    None
):
    broker = Broker()
    a = refund("a", 0)
    first = replica(broker)
    await first.service.start()
    try:
        await first.turn(a[0])
        [one] = broker.verdicts()
        assert (one["revision"], one["turns"]) == (1, 1)
        [partition] = [p for p in broker.turns.partitions if broker.turns.highwater(p)]
        assert broker.turns.committed[partition] == 1  # committed past the decided turn
        # The state record was written before the commit past its turn.
        write = broker.journal.index(f"state.write {partition}")
        assert write < broker.journal.index(f"source.commit {{{partition}: 1}}")
        [state] = [parse_state(r.value) for r in broker.state.records(partition) if r.value]
        assert (state.conversation_id, state.revision, state.group) == ("a", 1, GROUP)
        assert [(t.trace_id, t.partition, t.offset) for t in state.turns] == [
            (a[0].trace_id, partition, 0)
        ]
    finally:
        await first.service.close()

    second = replica(broker)  # a new process: nothing in memory
    await second.service.start()
    try:
        assert second.metric("sidecar_conversation_state_restored_total") == 1
        assert second.metric("sidecar_conversation_state_restore_seconds_count") == 1
        await second.turn(a[1])
        two = broker.verdicts()[-1]
        assert (two["revision"], two["turns"]) == (2, 2)
        assert two["trace_ids"] == [a[0].trace_id, a[1].trace_id]
        assert two.get("flags", []) == []
        assert outcomes(two) == {
            "lookup_then_refund": "PASS",
            "amount_grounded": "PASS",
            "short": "PASS",
        }
        assert two["id"] != one["id"]
        assert second.metric("sidecar_conversation_rereads_total", result="complete") == 1
        assert second.metric("sidecar_conversations_reopened_total") == 1
        assert second.state.reads == 1
        assert broker.turns.committed[partition] == 2
        # Revision 2's state holds both turns' places.
        latest = fold(
            [StateEntry(r.partition, r.key, r.value) for r in broker.state.records(partition)],
            group=GROUP,
            topic="eval_turns",
        )
        [state] = latest.records
        assert state.revision == 2
        assert [t.offset for t in state.turns] == [0, 1]
    finally:
        await second.service.close()


async def test_a_conversation_forgotten_from_memory_is_read_back_from_eval_turns() -> None:
    broker = Broker()
    a, b = refund("a", 0), refund("b", 10)
    rig = replica(broker, decided_memory=1)
    await rig.service.start()
    try:
        await rig.turn(a[0])
        await rig.turn(b[0])  # "a" leaves the in-memory transcripts (decided_memory=1)
        assert rig.metric("sidecar_conversations_forgotten_total") == 1
        await rig.turn(a[1])
        latest = broker.verdicts()[-1]
        assert (latest["conversation_id"], latest["revision"]) == ("a", 2)
        assert latest["trace_ids"] == [a[0].trace_id, a[1].trace_id]
        assert outcomes(latest)["lookup_then_refund"] == "PASS"
        assert rig.metric("sidecar_conversation_rereads_total", result="complete") == 1
    finally:
        await rig.service.close()


async def test_earlier_turns_gone_from_eval_turns_flag_the_next_revision_partial() -> None:
    broker = Broker()
    a = await first_turn_decided_then_stopped(broker)
    [partition] = [p for p in broker.turns.partitions if broker.turns.highwater(p)]
    broker.turns.delete_before(partition, broker.turns.highwater(partition))  # retention
    second = replica(broker)
    await second.service.start()
    try:
        await second.turn(a[1])
        late = broker.verdicts()[-1]
        # The revision is still known; the verdict says it lacks the earlier turn.
        assert (late["revision"], late["turns"], late["trace_ids"]) == (2, 1, [a[1].trace_id])
        assert late["flags"] == ["partial", "earlier_turns_missing"]
        assert late["truncated"] is True
        assert outcomes(late)["short"] == "ERROR"
        assert outcomes(late)["lookup_then_refund"] != "FAIL"
        assert late["outcome"] != "unacceptable"
        assert second.metric("sidecar_conversation_rereads_total", result="partial") == 1
        assert second.metric("sidecar_conversations_partial_total") == 1
    finally:
        await second.service.close()


async def test_state_lost_a_late_turn_whose_history_shows_earlier_turns_is_flagged() -> None:
    broker = Broker()
    a = await first_turn_decided_then_stopped(broker)
    late_turn = with_history(a[1], "Where is order A17?")
    second = replica(broker, state=MemoryTopic(2, name="eval_conversations"))  # state lost
    await second.service.start()
    try:
        assert second.metric("sidecar_conversation_state_restored_total") == 0
        await second.turn(late_turn)
        late = broker.verdicts()[-1]
        assert (late["revision"], late["trace_ids"]) == (1, [a[1].trace_id])
        assert late["flags"] == ["partial", "earlier_turns_unseen"]
        assert outcomes(late)["lookup_then_refund"] == "ERROR"  # inconclusive, not FAIL
        assert late["outcome"] == "errored"
    finally:
        await second.service.close()


async def test_without_a_state_topic_a_late_turn_after_a_restart_is_not_reopened() -> None:
    # The old behaviour, kept when state_topic is off: documented, and only the
    # turn's own history can flag it.
    broker = Broker()
    a = refund("a", 0)
    first = replica(broker, state=False)
    await first.service.start()
    try:
        await first.turn(a[0])
        assert broker.state.highwater(0) + broker.state.highwater(1) == 0
    finally:
        await first.service.close()
    second = replica(broker, state=False)
    await second.service.start()
    try:
        await second.turn(with_history(a[1], "Where is order A17?"))
        late = broker.verdicts()[-1]
        assert late["revision"] == 1
        assert "partial" in late["flags"]
    finally:
        await second.service.close()


async def test_a_rebalance_hands_the_decided_state_to_the_new_owner() -> None:
    broker = Broker()
    a = refund("a", 0)
    owner = replica(broker)
    await owner.service.start()
    other = replica(broker, spans_partitions=set(), turn_partitions=set())
    await other.service.start()
    try:
        await owner.turn(a[0])
        [partition] = [p for p in broker.turns.partitions if broker.turns.highwater(p)]
        assert other.metric("sidecar_conversation_state_restored_total") == 0
        # The group moves the partition: revoked from the owner, assigned to the other.
        await owner.turn_source.revoke({partition})
        await other.turn_source.assign({partition})
        assert other.metric("sidecar_conversation_state_restored_total") == 1
        assert other.metric("sidecar_conversation_state_conversations") == 1
        assert owner.metric("sidecar_conversation_state_conversations") in (0, 1)
        # The owner's trace stage still publishes the late turn; the other replica decides.
        owner.feed(a[1])
        await owner.round()
        await owner.round(2.0)
        await other.round()
        await other.round(IDLE + 1)
        await other.round(1.0)
        late = broker.verdicts()[-1]
        assert (late["revision"], late["trace_ids"]) == (2, [a[0].trace_id, a[1].trace_id])
        assert late.get("flags", []) == []
        assert other.metric("sidecar_cases_total", scope="conversation") == 1
        assert owner.metric("sidecar_cases_total", scope="conversation") == 1
    finally:
        await other.service.close()
        await owner.service.close()


async def test_the_state_bound_per_partition_evicts_the_oldest_with_a_tombstone() -> None:
    broker = Broker(turns=MemoryTopic(1, name="eval_turns"), state=MemoryTopic(1))
    rig = replica(broker, max_known_per_partition=1)
    await rig.service.start()
    try:
        await rig.turn(refund("a", 0)[0])
        await rig.turn(refund("b", 10)[0])
        await rig.round()
        assert rig.metric("sidecar_evictions_total", kind="conversation_state") == 1
        assert rig.metric("sidecar_conversation_state_records_total", kind="tombstone") == 1
        assert rig.metric("sidecar_conversation_state_conversations") == 1
        restored = fold(
            [StateEntry(0, r.key, r.value) for r in broker.state.records(0)],
            group=GROUP,
            topic="eval_turns",
        )
        assert [r.conversation_id for r in restored.records] == ["b"]
        tombstones = [r.key for r in broker.state.records(0) if r.value is None]
        assert tombstones == [state_key(GROUP, "support-conversation", "a")]
    finally:
        await rig.service.close()


async def test_a_refused_state_write_holds_the_turns_offsets_until_it_is_acknowledged() -> None:
    broker = Broker()
    rig = replica(broker)
    await rig.service.start()
    try:
        rig.state.fail(2)
        await rig.turn(refund("a", 0)[0])
        [partition] = [p for p in broker.turns.partitions if broker.turns.highwater(p)]
        assert len(broker.verdicts()) == 1
        assert broker.turns.committed.get(partition, 0) == 0  # the state is not written yet
        await rig.round(0.5)
        await rig.round(1.0)
        await rig.round(1.0)
        assert rig.state.refused == 2
        assert broker.turns.committed[partition] == 1
        assert rig.metric("sidecar_conversation_state_records_total", kind="state") == 1
    finally:
        await rig.service.close()


def test_the_turn_record_counts_earlier_user_messages_of_the_first_llm_call() -> None:
    plain = refund("a", 0)[1]
    assert earlier_user_messages(plain) == 0
    shown = with_history(plain, "Where is order A17?", "And B3?")
    assert earlier_user_messages(shown) == 2
    record_ = turn_record(build_transcript(shown), shown, "a", ["support-conversation"])
    assert record_.earlier_user_messages == 2
    assert json.loads(record_.to_bytes())["earlier_user_messages"] == 2
    bare = turn_record(build_transcript(plain), plain, "a", ["support-conversation"])
    assert "earlier_user_messages" not in json.loads(bare.to_bytes())


def test_folding_state_records_keeps_the_last_per_key_and_skips_foreign_and_malformed() -> None:
    def entry(cid: str, revision: int, group: str = GROUP) -> StateEntry:
        value = json.dumps(
            {
                "group": group,
                "topic": "eval_turns",
                "rubric_id": "r",
                "conversation_id": cid,
                "revision": revision,
                "decided_at": float(revision),
                "turns": [{"trace_id": "t", "partition": 0, "offset": revision}],
            }
        ).encode()
        return StateEntry(0, state_key(group, "r", cid), value)

    entries = [
        entry("a", 1),
        entry("b", 1),
        entry("a", 2),
        StateEntry(0, state_key(GROUP, "r", "b"), None),  # tombstone
        entry("c", 3, group="another"),
        StateEntry(0, b"k", b"{not json"),
    ]
    restored = fold(entries, group=GROUP, topic="eval_turns")
    assert [(r.conversation_id, r.revision) for r in restored.records] == [("a", 2)]
    assert (restored.foreign, restored.malformed) == (1, 1)
