"""The in-memory service rig the service tests share: broker fakes, a manual clock, a journal.

``Service`` runs on the in-memory broker (``tests.fakes``) and a
manual clock: time moves only when a test says so, and ``sleep`` (verdict send
retries, the bounded shutdown wait) waits for it. Tests step the loop with
``Rig.round`` or run the real ``Service.run`` until the source is idle
(:func:`run_until_idle_then_stop`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.trace import TracerProvider

from sidecar.adapters.otel import VerdictSpans
from sidecar.adapters.prometheus import Metrics
from sidecar.engine.offload import inline
from sidecar.engine.replica import Decoder, Service
from sidecar.evaluate.rubric import Rubric
from sidecar.ingest.decode import decode
from sidecar.judge import Judge
from sidecar.settings import Settings
from tests.builders import rubric, span_id, trace_id
from tests.fakes import MemoryLabels, MemorySink, MemorySource, MemoryTopic

WAIT = 5.0  # assembler decision_wait_s
INTERVAL = 0.1  # kafka commit_interval_s, shorter than the first send retry (0.5 s)

RUBRIC = rubric(id="shop", checks=[{"name": "clean", "type": "no_error_spans"}])


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


def spans(n: int, *, root: bool = True) -> bytes:
    """One OTLP/JSON record of trace ``n``: its root span, or a child of it."""
    span: dict[str, Any] = {
        "traceId": trace_id(n),
        "spanId": span_id(1 if root else 2),
        "name": "invoke_agent shop" if root else "execute_tool lookup",
        "kind": 1,
        "startTimeUnixNano": "1000",
        "endTimeUnixNano": "2000",
    }
    if not root:
        span["parentSpanId"] = span_id(1)
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
    metrics: Metrics
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
            for family in self.metrics.registry.collect()
            for sample in family.samples
            if sample.name == name and labels.items() <= sample.labels.items()
        ]
        return sum(values) if values else None


def make_rig(
    topic: MemoryTopic | None = None,
    *,
    partitions: set[int] | None = None,
    logs: MemoryTopic | None = None,
    rubrics: Sequence[Rubric] = (RUBRIC,),
    kafka: Mapping[str, Any] | None = None,
    assembler: Mapping[str, Any] | None = None,
    judge: Judge | None = None,
    decoder: Decoder = decode,
    **settings: Any,
) -> Rig:
    """The service on ``topic`` (and the logs topic ``logs``), stepped by hand.

    ``kafka`` and ``assembler`` go over the rig's settings of those sections;
    ``judge`` and ``decoder`` are the service's seams of those names.
    """
    topic = topic or MemoryTopic(partitions=2)
    journal: list[str] = []
    source = MemorySource(topic, logs=logs, partitions=partitions, journal=journal)
    sink = MemorySink(journal=journal)
    labels = MemoryLabels(journal=journal)
    clock = ManualClock()
    config = Settings(
        kafka={
            "commit_interval_s": INTERVAL,
            # Without jitter, so that retry delays can be compared exactly.
            "delivery": {"jitter": 0.0},
            **(kafka or {}),
        },
        assembler={"decision_wait_s": WAIT, **(assembler or {})},
        metrics={"host": "127.0.0.1", "port": 0},
        otel={"enabled": False},
        **settings,
    )
    metrics = Metrics()
    service = Service(
        config,
        list(rubrics),
        telemetry=metrics,
        spans=JournalSpans(journal),
        source=lambda: source,
        sink=lambda: sink,
        labels=lambda: labels,
        judge=judge,
        decoder=decoder,
        clock=clock,
        sleep=clock.sleep,
        offload=inline,
    )
    metrics.watch(source.lag)
    source.clock, source.sleep = clock, clock.sleep
    return Rig(service, topic, source, sink, labels, clock, metrics, journal)


@contextlib.asynccontextmanager
async def started(rig: Rig) -> AsyncIterator[Rig]:
    await rig.service.start()
    try:
        yield rig
    finally:
        await rig.service.close()


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
