"""Conversations on a real Kafka broker: turns across partitions, interleaved, kill -9,
late turns, two replicas; turns from a real ADK 2 agent's session and synthetic ones.

Each sidecar runs both stages in one process: the trace stage publishes turn
records to ``{prefix}.turns`` and the conversation stage (group
``{prefix}.g.conversations``) emits conversation verdicts to the verdict topic.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sidecar.model import Trace
from tests.agents.adk_traces import adk2_session_lines
from tests.builders import rubric_yaml
from tests.conversation_builders import (
    LOOKUP,
    REFUND,
    refund_checks,
    refund_conversation_yaml,
    turn_trace,
)
from tests.integration.harness import (
    SidecarProcess,
    committed_offsets,
    consume_all,
    create_topics,
    end_offsets,
    produce,
    spans_topic,
    wait_for,
)
from tests.otlp_records import record

pytestmark = [pytest.mark.kafka]

IDLE_S = 3.0
CHECKS = refund_checks({"name": "few_turns", "type": "max_turns", "limit": 10})


@pytest.fixture
def rubrics_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "rubrics"
    folder.mkdir()
    (folder / "conversation.yaml").write_text(refund_conversation_yaml(IDLE_S, CHECKS))
    (folder / "trace.yaml").write_text(
        rubric_yaml(
            id="per-trace", version="1", checks=[{"name": "clean", "type": "no_error_spans"}]
        )
    )
    return folder


@pytest.fixture
def sidecar_for(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path, rubrics_dir: Path
) -> Callable[..., SidecarProcess]:
    def make(name: str = "sidecar") -> SidecarProcess:
        return SidecarProcess(
            tmp_path,
            bootstrap=kafka_bootstrap,
            topic=f"{topic_prefix}.spans",
            group=f"{topic_prefix}.g",
            rubrics_dir=rubrics_dir,
            name=name,
            extra={"conversations": {"topic": f"{topic_prefix}.turns"}},
        )

    return make


async def topics(bootstrap: str, prefix: str) -> str:
    topic = await spans_topic(bootstrap, prefix)
    await create_topics(bootstrap, [f"{prefix}.turns"])
    return topic


def conversation(index: int, turns: int = 3) -> list[Trace]:
    """Synthetic turns: a lookup, a refund, then small talk; a minute apart."""
    cid = f"conv-{index:03d}"
    base = index * 100
    shape = [
        ("Where is order A17?", [LOOKUP], "It cost $40."),
        ("Refund it please", [REFUND], "Refunded $40."),
        ("Thanks", [], "You are welcome."),
    ]
    return [
        turn_trace(base + k + 1, cid, text, calls, answer, at_s=60.0 * k)
        for k, (text, calls, answer) in enumerate(shape[:turns])
    ]


async def send(bootstrap: str, topic: str, trace: Trace, partition: int) -> None:
    await produce(
        bootstrap, topic, [(trace.trace_id.encode(), record(trace.spans))], partition=partition
    )


async def send_line(bootstrap: str, topic: str, line: str, partition: int) -> None:
    await produce(bootstrap, topic, [(None, line.encode())], partition=partition)


def conversation_verdicts(records: list[Any]) -> list[dict[str, Any]]:
    found = [json.loads(r.value) for r in records]
    return [v for v in found if v.get("scope") == "conversation"]


async def read_conversation_verdicts(
    bootstrap: str, topic: str, expect: int, traces: int, within: float = 90.0
) -> tuple[list[Any], list[dict[str, Any]]]:
    """All verdict records once ``expect`` conversation verdicts (and ``traces`` others) arrived."""
    deadline = time.monotonic() + within
    records: list[Any] = []
    while time.monotonic() < deadline:
        records = await consume_all(
            bootstrap, f"{topic}.verdicts", expect=expect + traces, within=5, settle=0.5
        )
        if len(conversation_verdicts(records)) >= expect:
            break
    found = conversation_verdicts(records)
    assert len(found) >= expect, f"{len(found)} of {expect} conversation verdicts"
    return records, found


async def test_conversations_across_partitions_interleaved_with_adk_sessions(
    kafka_bootstrap: str, topic_prefix: str, sidecar_for: Callable[..., SidecarProcess]
) -> None:
    topic = await topics(kafka_bootstrap, topic_prefix)
    synthetic = [conversation(i) for i in range(8)]
    adk = adk2_session_lines(("adk-session-blender", "adk-session-lamp"))
    with sidecar_for() as sidecar:
        # Turn k of every conversation before turn k+1 of any; each turn on another partition.
        for k in range(3):
            for i, turns in enumerate(synthetic):
                await send(kafka_bootstrap, topic, turns[k], (i + k) % 3)
        for n, line in enumerate(adk):
            await send_line(kafka_bootstrap, topic, line, n % 3)
        records, verdicts = await read_conversation_verdicts(
            kafka_bootstrap, topic, expect=10, traces=29
        )
        by_id = Counter(v["conversation_id"] for v in verdicts)
        assert by_id == Counter(
            {f"conv-{i:03d}": 1 for i in range(8)} | {"session-0101": 1, "session-0102": 1}
        )
        for i, turns in enumerate(synthetic):
            [v] = [v for v in verdicts if v["conversation_id"] == f"conv-{i:03d}"]
            assert v["trace_ids"] == [t.trace_id for t in turns]
            assert v["trace_id"] == turns[-1].trace_id
            assert (v["turns"], v["revision"], v["outcome"]) == (3, 1, "acceptable")
        outcomes = {v["conversation_id"]: v["outcome"] for v in verdicts}
        assert (outcomes["session-0101"], outcomes["session-0102"]) == (
            "acceptable",
            "unacceptable",
        )
        assert sum(1 for r in records if json.loads(r.value).get("scope") is None) == 29

        # Latency after the last turn, idle timeout excluded: verdict record time minus the
        # last turn record's time on the turns topic, minus idle_timeout_s.
        turn_records = await consume_all(
            kafka_bootstrap, f"{topic_prefix}.turns", expect=29, settle=0.5
        )
        last_turn_ms: dict[str, int] = defaultdict(int)
        for r in turn_records:
            cid = json.loads(r.value)["conversation_id"]
            last_turn_ms[cid] = max(last_turn_ms[cid], r.timestamp)
        delays = sorted(
            (r.timestamp - last_turn_ms[json.loads(r.value)["conversation_id"]]) / 1000 - IDLE_S
            for r in records
            if json.loads(r.value).get("scope") == "conversation"
        )
        print(
            f"conversation verdict latency after the last turn, idle timeout excluded: "
            f"min {delays[0]:.2f}s median {delays[len(delays) // 2]:.2f}s max {delays[-1]:.2f}s"
        )
        assert delays[-1] < 5.0
        assert sidecar.metric("sidecar_cases_total", scope="conversation") == 10
        assert sidecar.metric("sidecar_conversation_turns_total", result="published") == 29

        group = f"{topic_prefix}.g.conversations"
        ends = await end_offsets(kafka_bootstrap, f"{topic_prefix}.turns")

        async def all_committed() -> bool:
            done = await committed_offsets(kafka_bootstrap, group, f"{topic_prefix}.turns")
            return all(done.get(p, 0) == end for p, end in ends.items() if end)

        for _ in range(40):
            if await all_committed():
                break
            await asyncio.sleep(0.5)
        assert await all_committed()
        assert sidecar.terminate() == 0


async def test_kill_9_mid_conversation_every_conversation_is_judged_whole(
    kafka_bootstrap: str, topic_prefix: str, sidecar_for: Callable[..., SidecarProcess]
) -> None:
    topic = await topics(kafka_bootstrap, topic_prefix)
    convs = [conversation(i) for i in range(6)]
    first = sidecar_for("first").start()
    try:
        for k in range(2):
            for i, turns in enumerate(convs):
                await send(kafka_bootstrap, topic, turns[k], (i + k) % 3)
        await wait_for(
            lambda: first.metric("sidecar_conversation_turns_total", result="accepted") >= 12,
            60,
            "turns held by the first process",
        )
        assert first.metric("sidecar_cases_total", scope="conversation") == 0
        first.kill()  # mid-conversation: nothing decided, nothing committed past the turns
    finally:
        first.__exit__()
    for i, turns in enumerate(convs):
        await send(kafka_bootstrap, topic, turns[2], i % 3)
    with sidecar_for("second") as second:
        _, verdicts = await read_conversation_verdicts(kafka_bootstrap, topic, expect=6, traces=18)
        assert {v["conversation_id"] for v in verdicts} == {f"conv-{i:03d}" for i in range(6)}
        for v in verdicts:
            # Never judged from part of its turns without saying so.
            assert v["turns"] == 3 or "decided_early" in v.get("flags", []), v
        for v in verdicts:
            turns = convs[int(v["conversation_id"][5:])]
            assert v["trace_ids"] == [t.trace_id for t in turns]
        duplicates = second.metric("sidecar_conversation_turns_total", result="duplicate")
        print(
            f"kill -9: 6 conversations, {len(verdicts)} verdicts, {duplicates:.0f} duplicate turns"
        )
        assert second.terminate() == 0


async def test_a_late_turn_gives_revision_two(
    kafka_bootstrap: str, topic_prefix: str, sidecar_for: Callable[..., SidecarProcess]
) -> None:
    topic = await topics(kafka_bootstrap, topic_prefix)
    turns = conversation(1, turns=2)
    with sidecar_for() as sidecar:
        await send(kafka_bootstrap, topic, turns[0], 0)
        _, [first] = await read_conversation_verdicts(kafka_bootstrap, topic, expect=1, traces=1)
        assert (first["revision"], first["turns"]) == (1, 1)
        await send(kafka_bootstrap, topic, turns[1], 2)
        _, verdicts = await read_conversation_verdicts(kafka_bootstrap, topic, expect=2, traces=2)
        second = next(v for v in verdicts if v["revision"] == 2)
        assert second["turns"] == 2
        assert second["trace_ids"] == [t.trace_id for t in turns]
        assert second["id"] != first["id"]
        assert {c["name"]: c["outcome"] for c in second["checks"]}["lookup_then_refund"] == "PASS"
        assert sidecar.metric("sidecar_conversations_reopened_total") == 1
        assert sidecar.terminate() == 0


async def test_two_replicas_share_the_conversations(
    kafka_bootstrap: str, topic_prefix: str, sidecar_for: Callable[..., SidecarProcess]
) -> None:
    topic = await topics(kafka_bootstrap, topic_prefix)
    convs = [conversation(i, turns=2) for i in range(30)]
    with sidecar_for("a") as a, sidecar_for("b") as b:

        def both_assigned() -> bool:
            return all(
                "partitions [" in s.http("/readyz")[1]
                and "partitions []" not in s.http("/readyz")[1]
                for s in (a, b)
            )

        await wait_for(both_assigned, 60, "both replicas assigned")
        await asyncio.sleep(3)  # the turns group settles with the spans group
        for k in range(2):
            for i, turns in enumerate(convs):
                await send(kafka_bootstrap, topic, turns[k], (i + k) % 3)
        _, verdicts = await read_conversation_verdicts(
            kafka_bootstrap, topic, expect=30, traces=60, within=120
        )
        assert {v["conversation_id"] for v in verdicts} == {f"conv-{i:03d}" for i in range(30)}
        for v in verdicts:
            assert v["turns"] == 2 or "decided_early" in v.get("flags", []), v
        accepted = [s.metric("sidecar_conversation_turns_total", result="accepted") for s in (a, b)]
        decided = [s.metric("sidecar_cases_total", scope="conversation") for s in (a, b)]
        print(f"two replicas: turns accepted {accepted}, conversation verdicts {decided}")
        assert all(n > 0 for n in accepted)
        assert all(n > 0 for n in decided)
        assert a.terminate() == 0
        assert b.terminate() == 0
