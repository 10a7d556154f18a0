"""The logs topic on the real broker: co-partitioned assignment, and ADK's EVENT_ONLY content.

Two consumers of one group, each ``KafkaSource`` as the service builds it,
must each get partition i of the spans topic together with partition i of the
logs topic (aiokafka's default round-robin assignor would split them). Then
two ``sidecar run`` replicas read a live google-adk 2.13 run in ``EVENT_ONLY``
capture, spans on one topic and the content-bearing log records on the other,
both keyed by trace id as the Collector's kafka exporter does, and give the
verdicts a ``SPAN_ONLY`` run gives; both topics' offsets end fully committed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from sidecar.adapters.kafka import KafkaSource
from sidecar.settings import KafkaSettings
from tests.agents.adk_traces import adk2_run
from tests.agents.refund_shop import BY_NAME
from tests.integration.harness import (
    SidecarProcess,
    committed_offsets,
    consume_all,
    create_topics,
    end_offsets,
    produce,
    verdicts_from,
)
from tests.otlp_files import DEMO_RUBRICS, line_trace_id, logs_proto, traces_proto

pytestmark = [pytest.mark.kafka]

PARTITIONS = 4


class _Listener:
    def __init__(self) -> None:
        self.assigned: set[int] = set()

    async def on_assigned(self, partitions: set[int], metadata: Mapping[int, str]) -> None:
        self.assigned |= partitions

    async def on_revoked(self, partitions: set[int]) -> None:
        self.assigned -= partitions


async def test_two_replicas_get_partition_i_of_both_topics(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    spans, logs = f"{topic_prefix}.spans", f"{topic_prefix}.logs"
    await create_topics(kafka_bootstrap, [spans, logs], partitions=PARTITIONS)
    settings = KafkaSettings(
        bootstrap_servers=kafka_bootstrap,
        topic=spans,
        logs_topic=logs,
        group_id=f"{topic_prefix}.g",
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        fetch_timeout_ms=100,
    )
    members = [KafkaSource(settings), KafkaSource(settings)]
    listeners = [_Listener(), _Listener()]
    for member, listener in zip(members, listeners, strict=True):
        await member.start(listener)
    try:

        async def poll() -> None:
            await asyncio.gather(*(m.fetch() for m in members))

        deadline = asyncio.get_running_loop().time() + 60
        while asyncio.get_running_loop().time() < deadline:
            await poll()
            owned = [m._consumer.assignment() for m in members]
            if all(owned) and sum(len(o) for o in owned) == 2 * PARTITIONS:
                break
        else:
            raise AssertionError("the group never settled on two members")
        for member, listener in zip(members, listeners, strict=True):
            by_topic: dict[str, set[int]] = {}
            for tp in member._consumer.assignment():
                by_topic.setdefault(tp.topic, set()).add(tp.partition)
            assert by_topic[spans] == by_topic[logs], by_topic
            assert member.assigned() == by_topic[spans] == listener.assigned
        assert members[0].assigned().isdisjoint(members[1].assigned())
        assert members[0].assigned() | members[1].assigned() == set(range(PARTITIONS))
    finally:
        for member in members:
            await member.stop()


async def test_partition_counts_that_differ_are_reported_at_start(
    kafka_bootstrap: str, topic_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    spans, logs = f"{topic_prefix}.spans", f"{topic_prefix}.logs"
    await create_topics(kafka_bootstrap, [spans], partitions=3)
    await create_topics(kafka_bootstrap, [logs], partitions=2)
    source = KafkaSource(
        KafkaSettings(bootstrap_servers=kafka_bootstrap, topic=spans, logs_topic=logs)
    )
    await source.start(_Listener())
    await source.stop()
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any(f"{spans} has 3 partitions and topic {logs} has 2" in e for e in errors), errors


@pytest.fixture
def replicas(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> Callable[[str], SidecarProcess]:
    def make(name: str) -> SidecarProcess:
        return SidecarProcess(
            tmp_path,
            bootstrap=kafka_bootstrap,
            topic=f"{topic_prefix}.spans",
            group=f"{topic_prefix}.g",
            rubrics_dir=DEMO_RUBRICS,
            extra={"kafka": {"logs_topic": f"{topic_prefix}.logs"}, "review": {"enabled": False}},
            name=name,
        )

    return make


async def test_adk_event_only_through_both_topics_on_two_replicas(
    kafka_bootstrap: str, topic_prefix: str, replicas: Callable[[str], SidecarProcess]
) -> None:
    spans, logs = f"{topic_prefix}.spans", f"{topic_prefix}.logs"
    await create_topics(
        kafka_bootstrap, [spans, logs, f"{spans}.verdicts", f"{spans}.dlq"], partitions=PARTITIONS
    )
    runs = adk2_run(capture="EVENT_ONLY")
    with replicas("a") as first, replicas("b") as second:
        # Logs first for half the traces, spans first for the rest: either order joins.
        for index, run in enumerate(runs.values()):
            key = line_trace_id(run.trace_line).encode()
            span_record = (key, traces_proto(run.trace_line))
            log_record = (key, logs_proto(run.logs_line))
            order = [(logs, log_record), (spans, span_record)]
            for topic, record in order if index % 2 == 0 else order[::-1]:
                await produce(kafka_bootstrap, topic, [record])
        records = await consume_all(kafka_bootstrap, f"{spans}.verdicts", expect=len(runs))
        verdicts = {v["trace_id"]: v for v in verdicts_from(records)}
        assert len(verdicts) == len(runs)
        for name, run in runs.items():
            checks = {
                c["name"]: c["outcome"] for c in verdicts[line_trace_id(run.trace_line)]["checks"]
            }
            assert "ERROR" not in checks.values(), (name, checks)
            assert {n for n, o in checks.items() if o == "FAIL"} == BY_NAME[name].expected_failures
        # Every record of both topics was read (again after a rebalance: at least once)
        # and is committed.
        assert first.metric("sidecar_kafka_records_total") + second.metric(
            "sidecar_kafka_records_total"
        ) >= 2 * len(runs)
        for topic in (spans, logs):
            ends = await end_offsets(kafka_bootstrap, topic)

            async def caught_up(topic: str = topic, ends: dict[int, int] = ends) -> bool:
                done = await committed_offsets(kafka_bootstrap, f"{topic_prefix}.g", topic)
                return all(done.get(p, 0) >= o for p, o in ends.items() if o)

            for _ in range(60):
                if await caught_up():
                    break
                await asyncio.sleep(0.5)
            else:
                raise AssertionError(f"offsets of {topic} not committed up to {ends}")
        assert first.metric("sidecar_logs_total") + second.metric("sidecar_logs_total") >= sum(
            len(run.logs()) for run in runs.values()
        )
