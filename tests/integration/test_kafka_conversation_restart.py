"""Decided conversations survive a restart on a real Kafka broker (the state topic).

A conversation is decided and committed by one ``sidecar run`` process, which
is then stopped (SIGTERM, and separately kill -9). A new process restores the
decided conversations from the compacted state topic on assignment; a late
turn then gives revision 2 over all turns, the earlier one read back from the
turns topic by offset. Also measured: restore time for many conversations.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from sidecar.model import Trace
from tests.conversation_builders import refund_checks, refund_conversation, refund_conversation_yaml
from tests.integration.harness import (
    SidecarProcess,
    committed_offsets,
    consume_all,
    end_offsets,
    produce,
    spans_topic,
    wait_for,
)
from tests.otlp_records import record

pytestmark = [pytest.mark.kafka]

IDLE_S = 2.0
CHECKS = refund_checks()


@pytest.fixture
def sidecar_for(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> Callable[..., SidecarProcess]:
    folder = tmp_path / "rubrics"
    folder.mkdir()
    (folder / "conversation.yaml").write_text(refund_conversation_yaml(IDLE_S, CHECKS))

    def make(name: str) -> SidecarProcess:
        return SidecarProcess(
            tmp_path,
            bootstrap=kafka_bootstrap,
            topic=f"{topic_prefix}.spans",
            group=f"{topic_prefix}.g",
            rubrics_dir=folder,
            name=name,
            extra={
                "conversations": {
                    "topic": f"{topic_prefix}.turns",
                    "state_topic": f"{topic_prefix}.conversations",
                }
            },
        )

    return make


async def topics(bootstrap: str, prefix: str) -> str:
    topic = await spans_topic(bootstrap, prefix)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [
                NewTopic(f"{prefix}.turns", 3, 1),
                NewTopic(
                    f"{prefix}.conversations", 3, 1, topic_configs={"cleanup.policy": "compact"}
                ),
            ]
        )
    finally:
        await admin.close()
    return topic


def refund(cid: str, base: int) -> list[Trace]:
    return refund_conversation(cid, base, gap_s=600, refund_text="Refund it please")


async def send(bootstrap: str, topic: str, traces: list[Trace]) -> None:
    await produce(
        bootstrap, topic, [(t.trace_id.encode(), record(t.spans)) for t in traces], partition=None
    )


async def conversation_verdicts(
    bootstrap: str, topic: str, expect: int, within: float = 90.0
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + within
    found: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        records = await consume_all(
            bootstrap, f"{topic}.verdicts", expect=expect, within=5, settle=0.3
        )
        found = [json.loads(r.value) for r in records]
        found = [v for v in found if v.get("scope") == "conversation"]
        if len(found) >= expect:
            break
    assert len(found) >= expect, f"{len(found)} of {expect} conversation verdicts"
    return found


async def all_turns_committed(bootstrap: str, prefix: str) -> None:
    ends = await end_offsets(bootstrap, f"{prefix}.turns")
    for _ in range(60):
        done = await committed_offsets(bootstrap, f"{prefix}.g.conversations", f"{prefix}.turns")
        if all(done.get(p, 0) == end for p, end in ends.items() if end):
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"eval_turns not committed: {done} of {ends}")


@pytest.mark.parametrize("stop", ["sigterm", "kill_9"])
async def test_a_late_turn_after_a_restart_gives_revision_two_over_all_turns(
    stop: str,
    kafka_bootstrap: str,
    topic_prefix: str,
    sidecar_for: Callable[..., SidecarProcess],
) -> None:
    topic = await topics(kafka_bootstrap, topic_prefix)
    turns = refund("conv-late", 0)
    first = sidecar_for("first").start()
    try:
        await send(kafka_bootstrap, topic, turns[:1])
        [one] = await conversation_verdicts(kafka_bootstrap, topic, expect=1)
        assert (one["revision"], one["trace_ids"]) == (1, [turns[0].trace_id])
        await all_turns_committed(kafka_bootstrap, topic_prefix)
        assert first.metric("sidecar_conversation_state_records_total", kind="state") == 1
        if stop == "sigterm":
            assert first.terminate() == 0
        else:
            first.kill()
    finally:
        first.__exit__()
    with sidecar_for("second") as second:
        await wait_for(
            lambda: second.metric("sidecar_conversation_state_restore_seconds_count") >= 1,
            60,
            "state restored on assignment",
        )
        assert second.metric("sidecar_conversation_state_restored_total") == 1
        await send(kafka_bootstrap, topic, turns[1:])
        verdicts = await conversation_verdicts(kafka_bootstrap, topic, expect=2)
        two = next(v for v in verdicts if v["revision"] == 2)
        assert two["trace_ids"] == [t.trace_id for t in turns]
        assert two["turns"] == 2
        assert two.get("flags", []) == []
        assert {c["name"]: c["outcome"] for c in two["checks"]} == {
            "lookup_then_refund": "PASS",
            "amount_grounded": "PASS",
        }
        assert second.metric("sidecar_conversation_rereads_total", result="complete") == 1
        assert second.terminate() == 0


async def test_restore_time_for_many_decided_conversations(
    kafka_bootstrap: str, topic_prefix: str, sidecar_for: Callable[..., SidecarProcess]
) -> None:
    topic = await topics(kafka_bootstrap, topic_prefix)
    count = 1000
    with sidecar_for("first") as first:
        await send(kafka_bootstrap, topic, [refund(f"c-{i:04d}", i * 10)[0] for i in range(count)])
        await wait_for(
            lambda: first.metric("sidecar_conversation_state_records_total", kind="state") >= count,
            180,
            f"{count} conversations decided and their state written",
        )
        assert first.terminate() == 0
    with sidecar_for("second") as second:
        await wait_for(
            lambda: second.metric("sidecar_conversation_state_restore_seconds_count") >= 1,
            60,
            "state restored on assignment",
        )
        restored = second.metric("sidecar_conversation_state_restored_total")
        seconds = second.metric("sidecar_conversation_state_restore_seconds_sum")
        print(f"restore: {restored:.0f} decided conversations in {seconds:.3f}s (3 partitions)")
        assert restored == count
        assert second.terminate() == 0
