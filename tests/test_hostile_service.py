"""Faults of the service on the in-memory broker (class 7: bounded dispatch, delivery, hand-over).

- Many traces due at once: however many reach ``max_trace_age`` together, at
  most ``max_inflight_traces`` are evaluated at a time; the rest wait in the
  assembler holding their offsets, the partitions pause, and ``/healthz`` and
  ``/metrics`` keep answering.
- Records Kafka does not acknowledge: ``/readyz`` says not ready (with the
  reason) and ``sidecar_delivery_failing`` is 1 until a send succeeds again.
- A graceful hand-over in the middle of traces whose records straddle the
  commit point: the next owner flags their tails ``partial`` instead of
  judging them as whole traces; traces it reads whole are not flagged.

The same faults against the real broker are in tests/integration/test_kafka_faults.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sidecar.adapters.http import MetricsServer
from sidecar.adapters.prometheus import Metrics
from sidecar.engine.offload import inline
from sidecar.engine.replica import Service
from sidecar.evaluate.rubric import Rubric
from sidecar.ingest.handover import Handover
from sidecar.model import DecideReason, Trace
from sidecar.settings import Settings
from tests.builders import trace_id
from tests.fakes import MemorySink, MemorySource, MemoryTopic
from tests.otlp_records import SpanSpec, span_tree
from tests.service_rig import INTERVAL, WAIT, JournalSpans, ManualClock, quiesce

MAX_AGE = 120.0
RUBRIC = Rubric.model_validate(
    {"id": "shop", "version": "1", "checks": [{"name": "clean", "type": "no_error_spans"}]}
)


def record(n: int, *spans: SpanSpec) -> bytes:
    return span_tree(n, *spans)


ROOT = (1, None, "invoke_agent shop")
CHILD = (2, 1, "execute_tool lookup")
LATE_CHILD = (3, 1, "execute_tool refund")


class Member:
    """One service of the group, on a shared topic, with its own clock and sink."""

    def __init__(self, topic: MemoryTopic, *, partitions: set[int] | None = None, **settings: Any):
        self.topic = topic
        self.clock = ManualClock()
        self.sink = MemorySink()
        self.source = MemorySource(topic, partitions=partitions)
        config = Settings(
            kafka={"commit_interval_s": INTERVAL, "delivery": {"jitter": 0.0}},
            assembler={"decision_wait_s": WAIT, "max_trace_age_s": MAX_AGE},
            metrics={"host": "127.0.0.1", "port": 0},
            otel={"enabled": False},
            review={"enabled": False},
            **settings,
        )
        self.metrics = Metrics()
        self.service = Service(
            config,
            [RUBRIC],
            telemetry=self.metrics,
            spans=JournalSpans([]),
            source=lambda: self.source,
            sink=lambda: self.sink,
            clock=self.clock,
            sleep=self.clock.sleep,
            offload=inline,
        )
        self.server = MetricsServer(self.metrics.registry, self.service.readiness, "127.0.0.1", 0)

    async def round(self, advance: float = 0.0) -> None:
        self.clock.advance(advance)
        await quiesce()
        await self.service.step()
        await quiesce()

    def verdicts(self) -> dict[str, dict[str, Any]]:
        return {trace: json.loads(payload) for trace, payload in self.sink.verdicts}

    def metric(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(name, labels)


@asynccontextmanager
async def started(member: Member) -> AsyncIterator[Member]:
    await member.server.start()
    await member.service.start()
    try:
        yield member
    finally:
        await member.service.close()
        await member.server.stop()


async def http_get(port: int, path: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: sidecar\r\n\r\n".encode())
    await writer.drain()
    answer = await reader.read()
    writer.close()
    await writer.wait_closed()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode()


# -- many traces due at once ------------------------------------------------------------


async def test_thousands_of_traces_due_at_once_never_exceed_the_in_flight_bound() -> None:
    traces, bound = 5_000, 50
    topic = MemoryTopic(partitions=1)
    for n in range(1, traces + 1):
        topic.append(0, record(n, CHILD))  # no root: each waits for max_trace_age
    member = Member(topic, max_inflight_traces=bound)
    member.sink.fail(10**9)  # nothing is acknowledged yet: every evaluation stays in flight
    async with started(member):
        for _ in range(traces // 500):
            await member.round()
        assert member.service.assembler.open_traces == traces

        await member.round(MAX_AGE)  # all of them reach max_trace_age together
        assert member.service.in_flight == bound
        assert member.service.assembler.open_traces == traces - bound
        assert len(asyncio.all_tasks()) < 2 * bound
        await member.round()
        assert member.source.paused
        port = member.server.port
        assert (await http_get(port, "/healthz"))[0] == 200
        status, metrics = await http_get(port, "/metrics")
        assert status == 200
        assert f"sidecar_open_traces {float(traces - bound)}" in metrics

        member.sink.fail(0)
        for _ in range(traces // bound + 2):
            await member.round(30.0)
            assert member.service.in_flight <= bound
        await member.round(INTERVAL)
    assert len(member.sink.verdicts) == traces
    assert topic.committed == {0: traces}
    assert member.metric("sidecar_traces_decided_total", reason="max_age") == traces


# -- delivery and readiness -------------------------------------------------------------


async def test_readyz_says_not_ready_while_records_are_not_acknowledged() -> None:
    topic = MemoryTopic(partitions=1)
    topic.append(0, record(1, ROOT))
    member = Member(topic)
    member.sink.fail(2)
    async with started(member):
        port = member.server.port
        assert (await http_get(port, "/readyz"))[0] == 200
        await member.round()
        await member.round(WAIT)
        status, body = await http_get(port, "/readyz")
        assert status == 503
        assert "Kafka does not acknowledge records" in body
        assert member.metric("sidecar_delivery_failing") == 1
        await member.round(0.5)  # refused once more
        assert (await http_get(port, "/readyz"))[0] == 503
        await member.round(1.0)  # acknowledged
        assert (await http_get(port, "/readyz"))[0] == 200
        assert member.metric("sidecar_delivery_failing") == 0
        assert list(member.verdicts()) == [trace_id(1)]


async def test_dead_letters_that_cannot_be_sent_hold_their_offset_and_are_retried() -> None:
    topic = MemoryTopic(partitions=1)
    topic.append(0, b"{not json")
    topic.append(0, record(1, ROOT))
    member = Member(topic)
    member.sink.fail(1)
    async with started(member):
        await member.round()
        await member.round(INTERVAL)
        assert topic.committed == {0: 0}  # the dead letter was refused: its offset is held
        await member.round(0.5)
        await member.round(WAIT)
        await member.round(INTERVAL)
        assert [reason for _, reason, _ in member.sink.dead_letters] == ["bad_json"]
        assert topic.committed == {0: 2}


# -- hand-over in the middle of traces ----------------------------------------------------


async def test_a_tail_read_after_a_rebalance_is_flagged_partial() -> None:
    topic = MemoryTopic(partitions=1)
    topic.append(0, record(1, CHILD))  # trace 1 begins without its root
    first, second = Member(topic), Member(topic, partitions=set())
    async with started(first), started(second):
        await first.round()
        await first.round(MAX_AGE)  # decided at max_trace_age, without its root
        await first.round(1.0)
        assert first.verdicts()[trace_id(1)]["flags"] == ["incomplete"]
        assert topic.committed == {0: 1}  # past trace 1: it is decided

        await first.source.revoke({0})  # graceful: the listener commits while it owns it
        # The rest of trace 1 comes, with its root: on its own it looks like a whole trace.
        topic.append(0, record(1, ROOT, LATE_CHILD))
        topic.append(0, record(2, ROOT, CHILD))
        await second.source.assign({0})
        await second.round()
        await second.round(WAIT)
        verdicts = second.verdicts()
        assert verdicts[trace_id(1)]["flags"] == ["partial"]
        assert verdicts[trace_id(1)]["truncated"] is True
        assert "flags" not in verdicts[trace_id(2)]
        assert second.metric("sidecar_flagged_traces_total", flag="partial") == 1


async def test_a_tail_read_after_a_graceful_shutdown_is_flagged_partial() -> None:
    topic = MemoryTopic(partitions=1)
    topic.append(0, record(1, ROOT))  # trace 1's root ended first; a child comes later
    topic.append(0, record(2, CHILD))  # trace 2 has no root yet: not decided at shutdown
    first = Member(topic)
    stop = asyncio.Event()
    running = asyncio.create_task(first.service.run(stop))
    await first.source.idle.wait()
    stop.set()
    await running
    assert list(first.verdicts()) == [trace_id(1)]  # decided early, at shutdown
    assert topic.committed == {0: 1}  # trace 2's record is read again by the next owner
    assert topic.metadata[0].startswith("sidecar-handover/1 ")

    topic.append(0, record(1, LATE_CHILD))
    topic.append(0, record(2, ROOT))
    second = Member(topic)
    async with started(second):
        await second.round()
        await second.round(WAIT)
        assert list(second.verdicts()) == [trace_id(2)]
        await second.round(MAX_AGE)  # the tail has no root: it waits for max_trace_age
    verdicts = second.verdicts()
    assert verdicts[trace_id(1)]["flags"] == ["incomplete", "partial"]
    assert "flags" not in verdicts[trace_id(2)]  # read whole from the commit point


def early(n: int, offset: int, reason: DecideReason = DecideReason.SHUTDOWN) -> Trace:
    return Trace(trace_id(n), (), reason, first_offsets={0: offset})


def test_handover_lists_early_decisions_below_the_commit_point_and_lowers_it_on_overflow() -> None:
    handover = Handover(keep_s=100.0, max_ids=2)
    handover.decided(early(1, 10), now=0.0)
    handover.decided(Trace(trace_id(9), (), DecideReason.COMPLETE, first_offsets={0: 11}), now=0.0)
    handover.decided(early(2, 12, DecideReason.MAX_AGE), now=0.0)
    offset, metadata = handover.metadata(0, 20, now=1.0)
    assert offset == 20
    inherited = Handover(keep_s=100.0)
    assert inherited.received(0, metadata, now=0.0) == 2
    assert inherited.partial(early(1, 99))
    assert inherited.partial(early(2, 99))
    assert not inherited.partial(early(9, 99))  # decided complete: not listed

    handover.decided(early(3, 14), now=0.0)  # a third does not fit in two ids
    offset, metadata = handover.metadata(0, 20, now=1.0)
    assert offset == 14  # the next owner reads trace 3 whole
    assert Handover(keep_s=1.0).received(0, metadata, now=0.0) == 2
    assert handover.metadata(0, 20, now=200.0) == (20, "")  # expired
    assert Handover(keep_s=1.0).received(0, "written by another program", now=0.0) == 0
