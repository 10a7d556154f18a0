"""One sidecar replica: the trace engine, the conversation engine beside it, the labels loop.

The service composes parts and delegates:

- the **trace engine** (:class:`~sidecar.engine.partitions.PartitionEngine`
  with :mod:`sidecar.engine.traces`): spans (and, unless ``kafka.logs_topic``
  is empty, log records, co-partitioned) in, verdicts out;
- the **conversation engine**, when some rubric has ``scope: conversation``
  and ``conversations.enabled``: the same engine with
  :mod:`sidecar.conversation.stage`, reading ``eval_turns`` in its own group;
- the **labels loop** (:mod:`sidecar.engine.label_loop`), when review is enabled;
- one :class:`~sidecar.engine.emit.Emitter` and one
  :class:`~sidecar.engine.deliver.Deliverer` shared by both engines, and one
  planning thread (:mod:`sidecar.engine.offload`), so the sampler's budget is
  spent in one order.

The broker clients come from factories (``source``, ``sink``, ``labels``,
``turn_source``, ``state``), called in :meth:`Service.start` on the running
loop; the composition root (``sidecar run``) passes Kafka's, tests the
in-memory ones of ``tests/fakes.py``. ``clock`` and ``sleep`` are the
service's only sense of time.

Shutdown order (SIGTERM or ``stop`` set):

1. stop fetching;
2. decide every open trace whose root has arrived; traces without a root are
   not decided, their records stay uncommitted and are read again (open
   conversations likewise);
3. wait, bounded by ``shutdown_timeout_s``, for items in flight (judge,
   emit); the rest are cancelled and keep their offsets uncommitted;
4. commit what is committable;
5. leave the labels group and both consumer groups, stop the producer, close
   the judge, flush the span exporter.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from sidecar.calibrate.review import ReviewPolicy, ReviewTracker
from sidecar.conversation.stage import ConversationBuffer, ConversationWork
from sidecar.conversation.store import DecidedConversation
from sidecar.engine.deliver import Deliverer
from sidecar.engine.emit import Emitter, Review
from sidecar.engine.label_loop import LabelLoop
from sidecar.engine.offload import Offload, PlanThread
from sidecar.engine.partitions import EngineSettings, PartitionEngine
from sidecar.engine.traces import Decoder, LogDecoder, TraceBuffer, TraceWork
from sidecar.errors import SourceError
from sidecar.evaluate.checks import run_checks
from sidecar.evaluate.pipeline import Case, RunChecks
from sidecar.evaluate.rubric import Rubric
from sidecar.evaluate.sample import build_sampler
from sidecar.ingest.assemble import Assembler
from sidecar.ingest.decode import decode
from sidecar.ingest.decode_logs import decode_logs
from sidecar.ingest.handover import Handover
from sidecar.judge import Judge
from sidecar.ports import (
    AccessRefused,
    AccessReporting,
    LabelReader,
    RecordSink,
    RecordSource,
    TopicReader,
    VerdictSpanSink,
)
from sidecar.retry import Backoff
from sidecar.settings import Settings, conversation_group
from sidecar.telemetry import NullTelemetry, Readiness, Telemetry

log = logging.getLogger(__name__)

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


class Service:
    """One sidecar replica (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        rubrics: Sequence[Rubric],
        *,
        source: Callable[[], RecordSource],
        sink: Callable[[], RecordSink],
        spans: VerdictSpanSink | None = None,
        telemetry: Telemetry | None = None,
        judge: Judge | None = None,
        labels: Callable[[], LabelReader] | None = None,
        turn_source: Callable[[], RecordSource] | None = None,
        state: Callable[[], TopicReader] | None = None,
        clock: Clock = time.monotonic,
        wall_clock: Clock = time.time,
        sleep: Sleep = asyncio.sleep,
        decoder: Decoder = decode,
        log_decoder: LogDecoder = decode_logs,
        offload: Offload | None = None,
        checks: RunChecks = run_checks,
    ) -> None:
        self.settings = settings
        self.rubrics = list(rubrics)
        self.telemetry: Telemetry = telemetry if telemetry is not None else NullTelemetry()
        self.spans = spans
        self.judge = judge
        self.clock = clock
        self.sleep = sleep
        self._plan_thread: PlanThread | None = None
        if offload is None:
            offload = self._plan_thread = PlanThread()
        self._offload = offload
        self._new_source, self._new_sink, self._new_labels = source, sink, labels
        self._new_turn_source, self._new_state = turn_source, state
        self._sink: RecordSink | None = None
        self._clients: list[object] = []
        self._ready = False
        kafka, review = settings.kafka, settings.review
        d = kafka.delivery
        self.deliverer = Deliverer(
            None,
            dead_letter_topic=kafka.dead_letter_topic,
            backoff=Backoff(d.backoff_s, d.backoff_max_s, d.jitter),
            sleep=sleep,
            clock=clock,
            operator_wait_s=d.operator_wait_s,
            never_wait_s=d.never_wait_s,
            max_dead_letter_bytes=d.max_dead_letter_bytes,
            telemetry=self.telemetry,
        )
        self.reviews = ReviewTracker(
            memory=review.memory, window=review.window, rubrics=self.rubrics
        )
        c = settings.conversations
        self.conversation_rubrics = [r for r in self.rubrics if r.conversational is not None]
        conversations_on = c.enabled and bool(self.conversation_rubrics) and turn_source is not None
        self.emitter = Emitter(
            spans=spans,
            telemetry=self.telemetry,
            redaction=settings.redaction.policy(),
            verdict_topic=kafka.verdict_topic,
            review=Review(
                review.topic,
                ReviewPolicy(audit_share=review.audit_share, error_share=review.error_share),
                self.reviews,
            )
            if review.enabled
            else None,
            turns_topic=c.topic if conversations_on else None,
            conversation_rubrics=self.conversation_rubrics,
            emitted_memory=settings.emitted_memory,
            wall_clock_ns=lambda: round(wall_clock() * 1e9),
        )
        self.sampler = build_sampler(settings.sampling, judge_enabled=judge is not None)
        a = settings.assembler
        self.assembler = Assembler(
            decision_wait=a.decision_wait_s,
            max_trace_age=a.max_trace_age_s,
            max_open_traces=a.max_open_traces,
            max_spans_per_trace=a.max_spans_per_trace,
            decided_memory=a.decided_memory,
        )
        self.handover = Handover(keep_s=a.max_trace_age_s)
        self.trace_buffer = TraceBuffer(
            self.assembler,
            self.handover,
            spans_topic=kafka.topic,
            logs_topic=kafka.logs_topic,
            encoding=kafka.encoding,
            decoder=decoder,
            log_decoder=log_decoder,
            clock=clock,
            telemetry=self.telemetry,
        )
        self.traces = PartitionEngine(
            "traces",
            EngineSettings(
                settings.max_inflight_traces,
                kafka.commit_interval_s,
                settings.shutdown_timeout_s,
                kafka.topic,
            ),
            buffer=self.trace_buffer,
            work=TraceWork(
                self.rubrics,
                sampler=self.sampler,
                judge=judge,
                emitter=self.emitter,
                deliverer=self.deliverer,
                handover=self.handover,
                clock=clock,
                checks=checks,
                telemetry=self.telemetry,
            ),
            deliverer=self.deliverer,
            offload=offload,
            telemetry=self.telemetry,
            clock=clock,
            sleep=sleep,
        )
        self.conversation_buffer: ConversationBuffer | None = None
        self.conversations: PartitionEngine[DecidedConversation, Case] | None = None
        if conversations_on:
            self.conversation_buffer = ConversationBuffer(
                c, self.conversation_rubrics, state=None, clock=clock, telemetry=self.telemetry
            )
            self.conversations = PartitionEngine(
                "conversations",
                EngineSettings(
                    c.max_inflight, kafka.commit_interval_s, settings.shutdown_timeout_s, c.topic
                ),
                buffer=self.conversation_buffer,
                work=ConversationWork(
                    c,
                    self.conversation_rubrics,
                    self.conversation_buffer,
                    judge=judge,
                    sampler=self.sampler,
                    emitter=self.emitter,
                    deliverer=self.deliverer,
                    group=conversation_group(kafka, c),
                    clock=clock,
                    wall_clock=wall_clock,
                    telemetry=self.telemetry,
                ),
                deliverer=self.deliverer,
                offload=offload,
                telemetry=self.telemetry,
                clock=clock,
                sleep=sleep,
            )
        self.labels = LabelLoop(self.reviews, self.telemetry, settings.review.labels_topic)
        self._labels: LabelReader | None = None
        self.telemetry.watch(self.stats)

    # -- what others ask -----------------------------------------------------------------

    @property
    def sink(self) -> RecordSink:
        assert self._sink is not None, "Service.start() creates the sink"
        return self._sink

    @property
    def in_flight(self) -> int:
        """Traces decided but not yet released (planning, judging, sending)."""
        return self.traces.flight.running + self.traces.flight.waiting

    def stats(self) -> list[object]:
        """What the telemetry reads at scrape time."""
        found: list[object] = [
            self.assembler.stats,
            self.trace_buffer.stats,
            self.traces.stats,
            self.traces.flight.stats,
            self.deliverer.stats,
            *self.access_refused(),
        ]
        if self.conversation_buffer is not None:
            found.append(self.conversation_buffer.stats())
        return found

    @property
    def started(self) -> bool:
        """Every client started (and not yet closed)."""
        return self._ready

    def access_refused(self) -> list[AccessRefused]:
        """What Kafka refuses this service now (ACLs): reads of its readers, then writes."""
        reads = [
            refused
            for client in self._clients
            if isinstance(client, AccessReporting) and (refused := client.access_refused)
        ]
        return [*reads, *self.deliverer.stats.refused]

    def readiness(self) -> tuple[bool, str]:
        if not self._ready:
            return False, "not ready: connecting to Kafka"
        reads = [r for r in self.access_refused() if r.operation != "WRITE"]
        if reads:
            # Nothing is read (and so nothing lost) until the ACL is granted.
            return False, "not ready: " + "; ".join(r.message for r in reads) + "; reading waits"
        if (why := self.deliverer.failing) is not None:
            return False, f"not ready: {why}"
        partitions = sorted(self.traces.stats.assigned)
        return True, f"ready: {len(self.rubrics)} rubrics, partitions {partitions}"

    # -- lifecycle -------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set, then shut down in the order written above."""
        await self.start()
        try:
            async with asyncio.TaskGroup() as tasks:
                if self._labels is not None:
                    tasks.create_task(self.labels.run(self._labels, stop))
                if self.conversations is not None:
                    tasks.create_task(self.conversations.run(stop))
                while not stop.is_set():
                    await self.step()
                await self.traces.drain()
        finally:
            await self.close()

    async def step(self) -> None:
        await self.traces.step()

    async def drain(self) -> None:
        await self.traces.drain()

    async def start(self) -> None:
        """Create and start the clients; SourceError when Kafka cannot be used."""
        self._sink = self._new_sink()
        source = self._new_source()
        labels = (
            self._new_labels()
            if self._new_labels is not None and self.settings.review.enabled
            else None
        )
        conversations = self.conversations is not None
        state = (
            self._new_state()
            if conversations
            and self._new_state is not None
            and self.settings.conversations.state_topic
            else None
        )
        turns = self._new_turn_source() if conversations and self._new_turn_source else None
        self.deliverer.sink = self._sink
        started: list[object] = []
        try:
            await self._sink.start()
            started.append(self._sink)
            await self.traces.start(source)
            started.append(source)
            if labels is not None:
                await labels.start()
                started.append(labels)
            if self.conversations is not None and turns is not None:
                if state is not None:
                    await state.start()
                    started.append(state)
                    assert self.conversation_buffer is not None
                    self.conversation_buffer.state = state
                await self.conversations.start(turns)
                started.append(turns)
        except (SourceError, asyncio.CancelledError):
            # Every client made, started or not (also when a signal cancelled the start): an unstarted one still holds resources.
            for client in (labels, turns, state, source, self._sink):
                if client is not None:
                    with contextlib.suppress(SourceError):
                        await client.stop()
            raise
        self._labels = labels
        # Closed in this order: labels, the conversation group, the trace group, the producer.
        order = [labels, turns, state, source, self._sink]
        self._clients = [c for c in order if c is not None and c in started]
        self._ready = True
        self.telemetry.event(Readiness(True))
        log.info("ready: connected to Kafka, reading %s", self.settings.kafka.topic)

    async def close(self) -> None:
        """Shutdown step 5: leave the groups, stop the producer, close the judge, flush spans."""
        self._ready = False
        self.telemetry.event(Readiness(False))
        for client in self._clients:
            await client.stop()  # type: ignore[attr-defined]
        self._clients = []
        if self.judge is not None:
            await self.judge.aclose()
        if self._plan_thread is not None:
            self._plan_thread.close()
        if self.spans is not None:
            self.spans.flush()
