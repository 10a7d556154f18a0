"""The service's commit rule, rebalance, back-pressure and shutdown order, in memory.

``Service`` runs on the in-memory broker (``sidecar.adapters.memory``) and a
manual clock: time moves only when a test says so, and ``sleep`` (verdict send
retries, the bounded shutdown wait) waits for it. Tests step the loop with
``Service.step`` or run the real ``Service.run`` until the source is idle. The
same behaviour on a real broker is in ``tests/integration/test_kafka_*.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from sidecar.adapters.memory import MemoryLabels, MemorySink, MemorySource, MemoryTopic
from sidecar.adapters.metrics import Metrics
from sidecar.adapters.otel import VerdictSpans
from sidecar.app import Service
from sidecar.rubric import Rubric
from sidecar.settings import Settings

WAIT = 5.0  # assembler decision_wait_s
INTERVAL = 0.1  # kafka commit_interval_s, shorter than the first send retry (0.5 s)

RUBRIC = Rubric.model_validate(
    {"id": "shop", "version": "1", "checks": [{"name": "clean", "type": "no_error_spans"}]}
)


class ManualClock:
    """Monotonic seconds that move only on ``advance``; ``sleep`` waits until they have."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.slept: list[float] = []
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (self.now + seconds, wake)
        self._sleepers.append(entry)
        try:
            await wake
        finally:
            self._sleepers.remove(entry)

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for deadline, wake in self._sleepers:
            if deadline <= self.now and not wake.done():
                wake.set_result(None)

    @property
    def sleepers(self) -> int:
        return len(self._sleepers)

    async def until_sleepers(self, count: int) -> None:
        for _ in range(1000):
            if self.sleepers >= count:
                return
            await asyncio.sleep(0)
        raise AssertionError(f"{self.sleepers} sleepers, expected {count}")


class JournalSpans(VerdictSpans):
    """Verdict spans exported nowhere; the flush is written to the journal."""

    def __init__(self, journal: list[str]) -> None:
        super().__init__(TracerProvider())
        self._journal = journal

    def flush(self, timeout_ms: int = 10_000) -> bool:
        self._journal.append("spans.flush")
        return super().flush(timeout_ms)


async def quiesce() -> None:
    """Let every runnable task run until it waits (on the manual clock) or ends."""
    for _ in range(50):
        await asyncio.sleep(0)


def trace_id(n: int) -> str:
    return f"{n:032x}"


def spans(n: int, *, root: bool = True) -> bytes:
    """One OTLP/JSON record of trace ``n``: its root span, or a child of it."""
    span: dict[str, Any] = {
        "traceId": trace_id(n),
        "spanId": f"{1 if root else 2:016x}",
        "name": "invoke_agent shop" if root else "execute_tool lookup",
        "kind": 1,
        "startTimeUnixNano": "1000",
        "endTimeUnixNano": "2000",
    }
    if not root:
        span["parentSpanId"] = f"{1:016x}"
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "shop"}}]}
    request = {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": [span]}]}]}
    return json.dumps(request).encode()


@dataclass
class Rig:
    service: Service
    topic: MemoryTopic
    source: MemorySource
    sink: MemorySink
    labels: MemoryLabels
    clock: ManualClock
    journal: list[str] = field(default_factory=list)

    async def round(self, advance: float = 0.0) -> None:
        """Move the clock, let woken tasks run, then one loop step and its in-flight traces."""
        self.clock.advance(advance)
        await quiesce()
        await self.service.step()
        await quiesce()

    def sent(self) -> list[str]:
        return [trace for trace, _ in self.sink.verdicts]

    def metric(self, name: str, **labels: str) -> float | None:
        """Sum of the samples of ``name`` whose labels include ``labels``; None if none."""
        values = [
            sample.value
            for family in self.service.metrics.registry.collect()
            for sample in family.samples
            if sample.name == name and labels.items() <= sample.labels.items()
        ]
        return sum(values) if values else None


def make_rig(
    topic: MemoryTopic | None = None,
    *,
    partitions: set[int] | None = None,
    **settings: Any,
) -> Rig:
    topic = topic or MemoryTopic(partitions=2)
    journal: list[str] = []
    source = MemorySource(topic, partitions=partitions, journal=journal)
    sink = MemorySink(journal=journal)
    labels = MemoryLabels(journal=journal)
    clock = ManualClock()
    config = Settings(
        kafka={"commit_interval_s": INTERVAL},
        assembler={"decision_wait_s": WAIT},
        metrics={"host": "127.0.0.1", "port": 0},
        otel={"enabled": False},
        **settings,
    )
    service = Service(
        config,
        [RUBRIC],
        metrics=Metrics(),
        spans=JournalSpans(journal),
        source=lambda: source,
        sink=lambda: sink,
        labels=lambda: labels,
        clock=clock,
        sleep=clock.sleep,
    )
    return Rig(service, topic, source, sink, labels, clock, journal)


@contextlib.asynccontextmanager
async def started(rig: Rig) -> AsyncIterator[Rig]:
    await rig.service.start()
    try:
        yield rig
    finally:
        await rig.service.close()


# -- the commit rule ---------------------------------------------------------------------


async def test_commit_moves_to_the_next_offset_once_nothing_is_held() -> None:
    rig = make_rig()
    rig.topic.append(0, spans(1))
    rig.topic.append(0, spans(2))
    rig.topic.append(1, spans(3))
    async with started(rig):
        await rig.round()
        assert rig.source.commits == []  # the commit interval has not passed

        await rig.round(WAIT)
        # Decided and dispatched in this step: in flight until acknowledged, so still held.
        assert rig.source.commits == [{0: 0, 1: 0}]
        assert rig.sent() == [trace_id(1), trace_id(2), trace_id(3)]

        await rig.round(INTERVAL)
        assert rig.source.commits == [{0: 0, 1: 0}, {0: 2, 1: 1}]
        assert rig.topic.committed == {0: 2, 1: 1}

        await rig.round(INTERVAL)
        assert len(rig.source.commits) == 2  # unchanged offsets are not committed again


async def test_a_trace_over_several_records_holds_its_lowest_offset_per_partition() -> None:
    rig = make_rig()
    rig.topic.append(0, spans(1, root=False))  # trace 1 starts here, without its root
    rig.topic.append(0, spans(2))
    rig.topic.append(0, spans(3))
    rig.topic.append(1, spans(4))
    async with started(rig):
        await rig.round()
        await rig.round(WAIT)
        await rig.round(INTERVAL)
        assert rig.sent() == [trace_id(2), trace_id(3), trace_id(4)]
        assert rig.topic.committed == {0: 0, 1: 1}  # trace 1 is still assembling

        rig.topic.append(1, spans(1))  # its root, on another partition
        await rig.round()
        await rig.round(INTERVAL)
        assert rig.topic.committed == {0: 0, 1: 1}  # held on both partitions now

        await rig.round(WAIT)
        await rig.round(INTERVAL)
        assert rig.sent() == [trace_id(2), trace_id(3), trace_id(4), trace_id(1)]
        assert rig.topic.committed == {0: 3, 1: 2}
        assert rig.metric("sidecar_spans_total") == 5


async def test_a_refused_verdict_keeps_its_offsets_held_until_a_retry_is_acknowledged() -> None:
    rig = make_rig()
    rig.topic.append(0, spans(1))
    rig.topic.append(0, spans(2))
    rig.sink.fail(2)
    async with started(rig):
        await rig.round()
        await rig.round(WAIT)
        # Trace 1's send was refused, trace 2's too; both retry after 0.5 s.
        assert rig.sink.refused == 2
        assert rig.service.in_flight == 2
        await rig.round(INTERVAL)
        assert rig.topic.committed == {0: 0}

        rig.sink.fail(1)
        await rig.round(0.5 - INTERVAL)  # the first retries: trace 1 refused again, 2 goes
        assert rig.sent() == [trace_id(2)]
        assert rig.service.in_flight == 1
        assert rig.topic.committed == {0: 0}  # trace 2 is done, but trace 1 holds offset 0

        await rig.round(1.0)  # trace 1's second retry, after a doubled delay
        assert rig.sent() == [trace_id(2), trace_id(1)]
        assert rig.clock.slept == [0.5, 0.5, 1.0]
        await rig.round(INTERVAL)
        assert rig.topic.committed == {0: 2}
        assert rig.metric("sidecar_internal_errors_total", stage="emit") == 3
        assert rig.metric("sidecar_cases_total", outcome="acceptable") == 2


# -- rebalance ---------------------------------------------------------------------------


async def test_revoke_commits_then_leaves_open_traces_to_the_new_owner() -> None:
    topic = MemoryTopic(partitions=2)
    topic.append(0, spans(1))
    topic.append(0, spans(2, root=False))  # trace 2 is open when partition 0 goes
    topic.append(1, spans(3, root=False))  # trace 3 stays with the first owner
    first, second = make_rig(topic), make_rig(topic, partitions=set())
    async with started(first), started(second):
        await first.round()
        await first.round(WAIT)
        assert first.sent() == [trace_id(1)]
        assert first.service.assembler.open_traces == 2
        assert first.metric("sidecar_consumer_lag", partition="0") == 0

        await first.source.revoke({0})
        assert first.journal[-2:] == ["source.revoked [0]", "source.commit {0: 1}"]
        assert topic.committed == {0: 1, 1: 0}
        assert first.service.assembler.open_traces == 1  # trace 2 dropped, trace 3 kept
        assert first.metric("sidecar_consumer_lag", partition="0") is None
        assert first.source.assigned() == {1}

        topic.append(0, spans(2))  # trace 2's root arrives after the rebalance
        await second.source.assign({0})
        assert second.source.positions == {0: 1}  # from the committed offset
        await second.round()
        await second.round(WAIT)
        await first.round(WAIT)
        assert second.sent() == [trace_id(2)]  # both its records re-read, trace 1 not
        assert second.metric("sidecar_kafka_records_total", result="ok") == 2
        assert first.sent() == [trace_id(1)]
        assert first.metric("sidecar_kafka_records_total", result="ok") == 3

        await second.round(INTERVAL)
        assert topic.committed == {0: 3, 1: 0}


# -- back-pressure -----------------------------------------------------------------------


async def test_in_flight_bound_pauses_partitions_and_resumes_at_half() -> None:
    rig = make_rig(max_inflight_traces=4)
    for n in (1, 2, 3, 4, 5):
        rig.topic.append(0, spans(n))
    rig.sink.fail(4)
    async with started(rig):
        await rig.round()
        await rig.round(WAIT)
        # Five traces are due, four may be in flight: the fifth waits in the assembler.
        assert rig.service.in_flight == 4
        assert rig.service.assembler.open_traces == 1
        assert not rig.source.paused

        await rig.round()
        assert rig.source.paused
        assert rig.metric("sidecar_judge_queue_depth") == 4
        rig.topic.append(0, spans(6))
        await rig.round()
        assert rig.source.positions == {0: 5, 1: 0}  # trace 6 stays unread
        assert rig.metric("sidecar_kafka_records_total", result="ok") == 5

        rig.sink.fail(3)
        # One of four retries goes through; that room goes to trace 5, which is sent at
        # once: 3 left in flight, above 4 // 2.
        await rig.round(0.5)
        assert rig.service.in_flight == 3
        assert rig.service.assembler.open_traces == 0
        assert rig.source.paused

        rig.sink.fail(0)
        await rig.round(1.0)  # the rest go through; the same step resumes and reads
        assert rig.service.in_flight == 0
        assert not rig.source.paused
        assert rig.metric("sidecar_kafka_records_total", result="ok") == 6
        await rig.round(WAIT)
        assert sorted(rig.sent()) == [trace_id(n) for n in (1, 2, 3, 4, 5, 6)]


# -- dead letters ------------------------------------------------------------------------


async def test_undecodable_records_are_dead_lettered_and_their_offsets_committed() -> None:
    rig = make_rig()
    rig.topic.append(0, b"{not json", key=b"k")
    rig.topic.append(0, None)
    rig.topic.append(0, spans(1))
    rig.topic.append(1, b"\x0a\xff\xff")  # truncated protobuf
    async with started(rig):
        await rig.round()
        dead = [(r.partition, r.offset, reason) for r, reason, _ in rig.sink.dead_letters]
        assert dead == [(0, 0, "bad_json"), (0, 1, "empty"), (1, 0, "bad_protobuf")]
        assert rig.metric("sidecar_kafka_records_total", result="dead_letter") == 3
        assert rig.metric("sidecar_dead_letters_total", reason="bad_json") == 1

        await rig.round(INTERVAL)
        assert rig.topic.committed == {0: 2, 1: 1}  # past the dead letters, up to trace 1
        await rig.round(WAIT)
        await rig.round(INTERVAL)
        assert rig.topic.committed == {0: 3, 1: 1}


# -- shutdown ----------------------------------------------------------------------------


async def run_until_idle_then_stop(rig: Rig, *, advance: float | None = None) -> None:
    """``Service.run`` until a fetch finds nothing; then stop (journal ``stop``)."""
    stop = asyncio.Event()
    running = asyncio.create_task(rig.service.run(stop))
    await rig.source.idle.wait()
    rig.journal.append("stop")
    stop.set()
    if advance is not None:
        # The stuck trace's send retry and the bounded shutdown wait both sleep.
        await rig.clock.until_sleepers(2)
        rig.clock.advance(advance)
    await running


async def test_shutdown_order_stop_fetching_decide_wait_commit_then_close() -> None:
    rig = make_rig()
    rig.topic.append(0, spans(1))  # root ended, decision_wait not over: decided at shutdown
    rig.topic.append(0, spans(2, root=False))  # no root: not decided, its offset stays held
    rig.labels.push(b"{not a label")

    await run_until_idle_then_stop(rig)

    after_stop = rig.journal[rig.journal.index("stop") :]
    assert after_stop == [
        "stop",
        "sink.verdict " + trace_id(1),
        "source.commit {0: 1}",
        "labels.stop",
        "source.stop",
        "sink.stop",
        "spans.flush",
    ]
    assert rig.metric("sidecar_traces_decided_total", reason="shutdown") == 1
    assert rig.topic.committed == {0: 1}
    assert rig.labels.commits == 1
    assert rig.metric("sidecar_human_labels_unmatched_total", reason="malformed") == 1


async def test_shutdown_waits_for_in_flight_traces_only_until_the_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig = make_rig(shutdown_timeout_s=20.0)
    rig.topic.append(0, spans(1))
    rig.sink.fail(1_000)  # never acknowledged

    with caplog.at_level(logging.WARNING, logger="sidecar.app"):
        await run_until_idle_then_stop(rig, advance=20.0)

    after_stop = rig.journal[rig.journal.index("stop") :]
    assert after_stop == [
        "stop",
        "source.commit {0: 0}",
        "labels.stop",
        "source.stop",
        "sink.stop",
        "spans.flush",
    ]
    assert rig.sent() == []
    assert rig.topic.committed == {0: 0}  # the next owner reads trace 1 again
    assert "1 traces still in flight were not committed" in caplog.text
