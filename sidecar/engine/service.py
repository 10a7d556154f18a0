"""The long-running service: Kafka spans (and logs) in, verdicts out.

Two inputs, co-partitioned (``sidecar.adapters.kafka``): the spans topic and,
unless ``kafka.logs_topic`` is empty, the logs topic, whose records join their
traces in the assembler (``Assembler.add_logs``). Each topic has its own
offset tracker; a trace holds its first offsets in both under one token, so
both topics follow the same commit rule.

The broker clients come from factories (``source``, ``sink``, ``labels``; Kafka
by default, :mod:`tests.fakes` in tests) and are created in
:meth:`Service.start`, on the running loop. ``clock`` and ``sleep`` are the
service's only sense of time. :meth:`Service.run` is ``start``, then
:meth:`Service.step` until ``stop`` is set, then ``drain`` and ``close``.

Shutdown order (SIGTERM or ``stop`` set):

1. stop fetching;
2. decide every open trace whose root has arrived (``shutdown``); traces without
   a root are not decided, their records stay uncommitted and are read again;
3. wait, bounded by ``shutdown_timeout_s`` on ``sleep``, for in-flight traces
   (judge, emit); the rest are cancelled and keep their offsets uncommitted;
4. commit what is committable;
5. leave the labels group and the spans group, stop the producer, close the
   judge, flush the span exporter, stop the metrics server.

Bounds and isolation:

- planning a trace (transcript, checks, screening) is CPU work; it runs on a
  worker thread (:mod:`sidecar.engine.offload`), so a slow check never stops the loop
  from answering probes or sending the group's heartbeats;
- the traces started in one round (``step``) go to that thread together, one
  hop per round, not per trace; the verdict records of those the judge is not
  asked about are sent together (``Sink.send_verdicts``: one produce batch per
  partition), and each trace is released as soon as all of its records are
  acknowledged; a trace with a case for the judge is judged and emitted on
  its own, so a slow judge call holds back no other trace;

- at most ``max_inflight_traces`` traces are evaluated at once, however many
  come due together: the rest wait in the assembler (or, decided early, in a
  queue) holding their offsets, and the partitions are paused meanwhile;
- a record that cannot be decoded, for any reason, is dead-lettered with its
  reason; an exception while evaluating a trace gives that trace an errored
  verdict (``sidecar.evaluate.pipeline``); both are counted, and neither stops the
  partition;
- while Kafka does not acknowledge records (verdicts, reviews, dead letters),
  sends are retried with the offsets held, ``/readyz`` says not ready and
  ``sidecar_delivery_failing`` is 1;
- each commit carries the ids of traces decided early below it
  (``sidecar.ingest.handover``), so the next owner flags their tails ``partial``.

Conversations (DESIGN 12): when some rubric has ``scope: conversation`` (and
``conversations.enabled``), each trace such a rubric applies to is published
as a turn record to ``eval_turns`` before its offsets are released, and the
conversation stage (:mod:`sidecar.conversation.stage`, its own consumer group)
runs beside the trace loop in the same TaskGroup, emitting its verdicts
through the same span, metrics, record and review path.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any

from sidecar.adapters.http import MetricsServer
from sidecar.adapters.kafka import KafkaLabelSource, KafkaSink, KafkaSource
from sidecar.adapters.kafka_turns import (
    KafkaConversationState,
    KafkaTurnSink,
    conversation_group,
    turn_source,
)
from sidecar.adapters.otel import VerdictSpans
from sidecar.adapters.prometheus import (
    Metrics,
    record_rubrics,
    record_sampling,
    record_verdict,
)
from sidecar.calibrate.review import ReviewPolicy, ReviewTracker, review_reasons, review_record
from sidecar.commands._wiring import build_sampler
from sidecar.conversation.stage import (
    ConversationStage,
    ConversationState,
    TurnSink,
    TurnSource,
)
from sidecar.conversation.turns import turn_records
from sidecar.engine.offload import Offload, PlanThread
from sidecar.errors import DecodeError, DeliveryError, PartialDelivery, RecordError, SourceError
from sidecar.evaluate.capture import CaptureWarnings
from sidecar.evaluate.checks import run_checks
from sidecar.evaluate.pipeline import (
    Case,
    Fault,
    RunChecks,
    case_flags,
    is_fragment,
    judge_cases,
    plan,
)
from sidecar.evaluate.rubric import Rubric
from sidecar.evaluate.verdict import Verdict
from sidecar.gauges import retire
from sidecar.ingest.assemble import Assembler, AssemblerStats
from sidecar.ingest.decode import Encoding, decode
from sidecar.ingest.decode_logs import decode_logs
from sidecar.ingest.handover import Handover
from sidecar.ingest.offsets import OffsetTracker
from sidecar.judge import Judge
from sidecar.judge.service import same_family
from sidecar.model import DecideReason, LogRecord, RecordRef, Span, Trace, Transcript
from sidecar.ports import LabelSource, Record, Sink, Source
from sidecar.settings import Settings
from sidecar.wire.records import parse_label

log = logging.getLogger(__name__)

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]
Decoder = Callable[[bytes, Encoding], list[Span]]
Planned = tuple[Transcript, list[Case]]
# How long a member started with others waits for its fair share of partitions.
FAIR_SHARE_WAIT_S = 10.0
LogDecoder = Callable[[bytes, Encoding], list[LogRecord]]


class Service:
    """One sidecar replica.

    Seams are parameters: judge, spans, metrics, the broker clients (factories
    called in ``start``; ``labels`` only when review is enabled), the clock
    with its ``sleep``, the record decoder, where planning runs (``offload``:
    a worker thread by default, :func:`sidecar.engine.offload.inline` in stepped
    tests) and the check runner. The service is its source's rebalance listener.
    """

    def __init__(
        self,
        settings: Settings,
        rubrics: Sequence[Rubric],
        *,
        metrics: Metrics,
        spans: VerdictSpans,
        judge: Judge | None = None,
        source: Callable[[], Source] | None = None,
        sink: Callable[[], Sink] | None = None,
        labels: Callable[[], LabelSource] | None = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        decoder: Decoder = decode,
        offload: Offload | None = None,
        checks: RunChecks = run_checks,
        log_decoder: LogDecoder = decode_logs,
        turns: Callable[[], TurnSink] | None = None,
        turn_source: Callable[[], TurnSource] | None = None,
        conversation_state: Callable[[], ConversationState] | None = None,
        group_members: int = 1,
    ) -> None:
        self.settings = settings
        # Members started together in the group (``--workers``): see _fair_share.
        self.group_members = group_members
        self._assignments = 0
        self.decoder = decoder
        self.log_decoder = log_decoder
        self._logs_topic = settings.kafka.logs_topic or None
        self.checks = checks
        # Planning (transcript, checks, screening, sampling) runs on one worker thread.
        self._plan_thread: PlanThread | None = None
        if offload is None:
            offload = self._plan_thread = PlanThread()
        self._offload: Offload = offload
        self.rubrics = list(rubrics)
        self.metrics = metrics
        self.spans = spans
        self.judge = judge
        self.clock = clock
        self.sleep = sleep
        a = settings.assembler
        self.assembler = Assembler(
            decision_wait=a.decision_wait_s,
            max_trace_age=a.max_trace_age_s,
            max_open_traces=a.max_open_traces,
            max_spans_per_trace=a.max_spans_per_trace,
            decided_memory=a.decided_memory,
        )
        self.sampler = build_sampler(settings.sampling, judge_enabled=judge is not None)
        self.offsets = OffsetTracker()
        self.log_offsets = OffsetTracker()
        self.handover = Handover(keep_s=a.max_trace_age_s)
        kafka, review = settings.kafka, settings.review
        self._new_source = source or functools.partial(KafkaSource, kafka)
        self._new_sink = sink or functools.partial(KafkaSink, kafka)
        self._new_labels = (
            (labels or functools.partial(KafkaLabelSource, kafka, review.labels_topic))
            if review.enabled
            else None
        )
        # Kafka clients bind to the running loop, so they are created in start().
        self._source: Source | None = None
        self._sink: Sink | None = None
        self._labels: LabelSource | None = None
        self.server = MetricsServer(
            metrics.registry, self._readiness, settings.metrics.host, settings.metrics.port
        )
        # Tasks evaluating traces (a batch, or one trace the judge is asked about).
        self._inflight: set[asyncio.Task[None]] = set()
        # Traces in those tasks, and traces started this round, not yet in a task.
        self._busy = 0
        self._batch: list[tuple[Trace, int]] = []
        # Traces decided early (evicted, span limit) waiting for room, with their holds.
        self._waiting: deque[tuple[Trace, int]] = deque()
        # Dead letters being sent; they hold their record's offset until acknowledged.
        self._sending: set[asyncio.Task[None]] = set()
        # Why the last send failed, until one succeeds (readiness, sidecar_delivery_failing).
        self._delivery_error: str | None = None
        self._emitted: OrderedDict[str, None] = OrderedDict()
        # Assembler stats already exported, so only deltas are added to the counters.
        self._exported = AssemblerStats()
        self._warned_self_preference: set[tuple[str, str]] = set()
        self._capture_warnings = CaptureWarnings()
        self._review_policy = ReviewPolicy(
            audit_share=settings.review.audit_share, error_share=settings.review.error_share
        )
        self.reviews = ReviewTracker(memory=settings.review.memory, window=settings.review.window)
        self._redaction = settings.redaction.policy()
        self._ready = False
        self._committed: dict[int, tuple[int, str]] = {}
        self._committed_logs: dict[int, int] = {}
        self._last_commit = 0.0
        record_rubrics(metrics, self.rubrics)
        self._init_conversations(turns, turn_source, conversation_state)

    def _init_conversations(
        self,
        turns: Callable[[], TurnSink] | None,
        source: Callable[[], TurnSource] | None,
        state: Callable[[], ConversationState] | None,
    ) -> None:
        settings = self.settings
        c = settings.conversations
        self.conversation_rubrics = [r for r in self.rubrics if r.conversational is not None]
        self.conversations: ConversationStage | None = None
        self._new_turns: Callable[[], TurnSink] | None = None
        self._turns: TurnSink | None = None
        # Set without a stage too, so the dashboard's open/limit ratio reads 0, not NaN.
        self.metrics.conversations.open_limit.set(c.max_open_conversations)
        if not (c.enabled and self.conversation_rubrics):
            return
        self._new_turns = turns or functools.partial(KafkaTurnSink, settings.kafka, c)
        # Kafka state goes with the Kafka turn source; a caller giving its own source
        # gives its own state too, or runs without (late turns then flagged, not re-read).
        if state is None and source is None:
            state = functools.partial(KafkaConversationState, settings.kafka, c)
        self.conversations = ConversationStage(
            c,
            self.conversation_rubrics,
            source=source or functools.partial(turn_source, settings.kafka, c),
            state=state,
            state_evictions=self.metrics.evictions.labels(kind="conversation_state"),
            group=conversation_group(settings.kafka, c),
            emit=self._emit_case,
            judge=self.judge,
            sampler=self.sampler,
            metrics=self.metrics.conversations,
            evictions=self.metrics.evictions.labels(kind="open_conversations"),
            commit_interval_s=settings.kafka.commit_interval_s,
            shutdown_timeout_s=settings.shutdown_timeout_s,
            clock=self.clock,
            sleep=self.sleep,
            on_fault=self._fault,
        )

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def source(self) -> Source:
        assert self._source is not None, "Service.start() creates the source"
        return self._source

    @property
    def sink(self) -> Sink:
        assert self._sink is not None, "Service.start() creates the sink"
        return self._sink

    @property
    def in_flight(self) -> int:
        """Traces decided but not yet emitted (planning, judging, sending)."""
        return self._busy

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set, then shut down in the order written above."""
        await self.start()
        try:
            async with asyncio.TaskGroup() as tasks:
                if self._labels is not None:
                    tasks.create_task(self._read_labels(self._labels, stop))
                if self.conversations is not None:
                    tasks.create_task(self.conversations.run(stop))
                while not stop.is_set():
                    await self.step()
                await self.drain()
        finally:
            await self.close()

    async def start(self) -> None:
        """Create and start the clients and the metrics server; SourceError if unreachable."""
        self._source = self._new_source()
        self._sink = self._new_sink()
        self._labels = self._new_labels() if self._new_labels is not None else None
        self._turns = self._new_turns() if self._new_turns is not None else None
        await self.server.start()
        try:
            await self.sink.start()
            if self._turns is not None:
                await self._turns.start()
            await self.source.start(self)
            await self._fair_share()
            if self._labels is not None:
                await self._labels.start()
            if self.conversations is not None:
                await self.conversations.start()
        except SourceError:
            clients: list[LabelSource | Source | Sink | TurnSink | None] = [
                self._labels,
                self._source,
                self._turns,
                self._sink,
            ]
            for client in clients:
                if client is not None:
                    with contextlib.suppress(SourceError):
                        await client.stop()
            await self.server.stop()
            raise
        self._ready = True
        self.metrics.ready.set(1)
        self._last_commit = self.clock()

    async def step(self) -> None:
        """One round: back-pressure, fetch, assemble, dispatch what is due, commit on interval."""
        self._apply_backpressure()
        records = await self.source.fetch()
        now = self.clock()
        for record in records:
            self._ingest(record, now)
        self._dispatch_due(now)
        self._export_stats()
        if now - self._last_commit >= self.settings.kafka.commit_interval_s:
            await self._commit()
            self._last_commit = now

    async def drain(self) -> None:
        """Shutdown steps 2 to 4 (fetching has stopped): decide, wait bounded, commit."""
        for trace in self.assembler.drain(DecideReason.SHUTDOWN, require_root=True):
            self._decided(trace)
        pending = await self._wait_in_flight()
        for task in pending:
            task.cancel()
        left = len(pending) + len(self._waiting)
        if left:
            log.warning("shutdown: %d traces still in flight were not committed", left)
        self._export_stats()
        await self._commit()

    async def close(self) -> None:
        """Shutdown step 5: leave the groups, stop the producer, close the judge, flush spans."""
        self._ready = False
        self.metrics.ready.set(0)
        if self._labels is not None:
            await self._labels.stop()
        if self.conversations is not None:
            await self.conversations.stop()
        await self.source.stop()
        if self._turns is not None:
            await self._turns.stop()
        await self.sink.stop()
        if self.judge is not None:
            await self.judge.aclose()
        if self._plan_thread is not None:
            self._plan_thread.close()
        self.spans.flush()
        await self.server.stop()

    async def _fair_share(self, timeout_s: float = FAIR_SHARE_WAIT_S) -> None:
        """With ``group_members`` started together, wait to read until this one's share is fair.

        The first member to join gets every partition until the others are let
        in, which the group does only at its next heartbeat (seconds, on a
        broker without ``group.initial.rebalance.delay.ms``). Reading meanwhile
        would evaluate traces whose partitions move on at once, and their new
        owners read them again. So a member holding more than ``ceil(P / N)``
        of the P partitions waits (fetching nothing) for the rebalance, at most
        ``timeout_s``; then it reads what it holds.
        """
        members = self.group_members
        if members <= 1:
            return
        deadline = self.clock() + timeout_s
        while self.clock() < deadline:
            total = self.source.partition_count()
            if self._assignments and total and len(self.source.assigned()) <= -(-total // members):
                return
            await self.sleep(0.05)
        log.info(
            "the group did not spread its partitions over %d members within %.0fs; "
            "reading partitions %s",
            members,
            timeout_s,
            sorted(self.source.assigned()),
        )

    async def _wait_in_flight(self) -> set[asyncio.Task[None]]:
        """Wait until nothing is in flight or waiting, at most ``shutdown_timeout_s`` on ``sleep``.

        Waiting traces start as room frees; those still waiting at the end keep
        their offsets held, like the cancelled ones.
        """
        self._start_waiting()
        pending = self._unfinished()
        if not pending:
            return pending
        timer = asyncio.ensure_future(self.sleep(self.settings.shutdown_timeout_s))
        try:
            while pending and not timer.done():
                await asyncio.wait({*pending, timer}, return_when=asyncio.FIRST_COMPLETED)
                self._start_waiting()
                pending = self._unfinished()
        finally:
            timer.cancel()
        return pending

    def _unfinished(self) -> set[asyncio.Task[None]]:
        return {t for t in (*self._inflight, *self._sending) if not t.done()}

    def _readiness(self) -> tuple[bool, str]:
        if not self._ready or self._source is None:
            return False, "not ready: connecting to Kafka"
        if self._delivery_error is not None:
            return False, f"not ready: Kafka does not acknowledge records ({self._delivery_error})"
        return (
            True,
            f"ready: {len(self.rubrics)} rubrics, partitions {sorted(self.source.assigned())}",
        )

    # -- records -----------------------------------------------------------------------

    def _ingest(self, record: Record, now: float) -> None:
        logs = self._logs_topic is not None and record.topic == self._logs_topic
        try:
            if record.value is None:
                raise DecodeError("empty", "record has no value")
            encoding = self.settings.kafka.encoding
            if logs:
                log_records = self.log_decoder(record.value, encoding)
            else:
                spans = self.decoder(record.value, encoding)
        except DecodeError as exc:
            self._dead_letter(record, exc.reason, str(exc))
            return
        # Per-record isolation: decode raises only DecodeError; should a bug make it raise
        # anything else, that one record is dead-lettered, not the service stopped.
        except Exception as exc:
            log.exception("decoding record %d:%d failed", record.partition, record.offset)
            self.metrics.internal_errors.labels(stage="decode").inc()
            self._dead_letter(record, "internal_error", f"{type(exc).__name__} while decoding")
            return
        self.metrics.kafka_records.labels(result="ok").inc()
        ref = RecordRef(record.partition, record.offset)
        if logs:
            early = self.assembler.add_logs(log_records, now, ref)
        else:
            early = self.assembler.add(spans, now, ref)
        for trace in early:
            self._decided(trace)
        self._tracker(record).consumed(record.partition, record.offset)

    def _tracker(self, record: Record) -> OffsetTracker:
        if self._logs_topic is not None and record.topic == self._logs_topic:
            return self.log_offsets
        return self.offsets

    def _hold(self, spans: Mapping[int, int], logs: Mapping[int, int]) -> int:
        """Hold offsets in both topics under one token."""
        token = self.offsets.hold(spans)
        self.log_offsets.hold(logs, token=token)
        return token

    def _release(self, token: int) -> None:
        self.offsets.release(token)
        self.log_offsets.release(token)

    def _dead_letter(self, record: Record, reason: str, detail: str) -> None:
        """Send ``record`` to the dead-letter topic; its offset is held until acknowledged."""
        self.metrics.kafka_records.labels(result="dead_letter").inc()
        self.metrics.dead_letters.labels(reason=reason).inc()
        tracker = self._tracker(record)
        tracker.consumed(record.partition, record.offset)
        held = {record.partition: record.offset}
        token = self._hold(held, {}) if tracker is self.offsets else self._hold({}, held)
        send = functools.partial(self.sink.send_dead_letter, record, reason, detail)
        self._spawn(self._sending, self._held(token, self._deliver(send)))

    async def _held(self, token: int, work: Awaitable[None]) -> None:
        await work
        self._release(token)

    def _spawn(
        self, tasks: set[asyncio.Task[None]], work: Coroutine[Any, Any, None]
    ) -> asyncio.Task[None]:
        task = asyncio.create_task(work)
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return task

    def _decided(self, trace: Trace) -> None:
        """``trace`` left the assembler: hold its offsets; evaluate it now, or once there is room."""
        self.metrics.traces_decided.labels(reason=trace.reason.value).inc()
        self.handover.decided(trace, self.clock())
        token = self._hold(trace.first_offsets, trace.first_log_offsets)
        if self._room() > 0 and not self._waiting:
            self._start(trace, token)
        else:
            self._waiting.append((trace, token))

    def _room(self) -> int:
        return max(0, self.settings.max_inflight_traces - self._busy)

    def _start_waiting(self) -> None:
        while self._waiting and self._room() > 0:
            self._start(*self._waiting.popleft())
        self._flush_batch()

    def _dispatch_due(self, now: float) -> None:
        """Start what waits, then take due traces from the assembler while there is room."""
        self._start_waiting()
        room = self._room()
        if room > 0 and not self._waiting:
            for trace in self.assembler.due(now, limit=room):
                self._decided(trace)
        self._flush_batch()

    def _start(self, trace: Trace, token: int) -> None:
        """Count ``trace`` in flight; it is planned with the others started this round."""
        if self.handover.partial(trace):
            trace = dataclasses.replace(trace, partial=True)
        self._busy += 1
        self._batch.append((trace, token))

    def _flush_batch(self) -> None:
        """The traces started this round go to one task: one hop to the planning thread."""
        if self._batch:
            batch, self._batch = self._batch, []
            self._spawn(self._inflight, self._finish_batch(batch))

    def _plan_all(self, traces: Sequence[Trace]) -> list[Planned | BaseException]:
        """Plan each trace (on the planning thread); a bug in one stays with that trace."""
        now = self.clock()
        planned: list[Planned | BaseException] = []
        for trace in traces:
            try:
                planned.append(
                    plan(
                        trace,
                        self.rubrics,
                        self.sampler,
                        now,
                        checks=self.checks,
                        on_fault=self._fault,
                    )
                )
            except Exception as exc:  # noqa: BLE001
                planned.append(exc)
        return planned

    async def _finish_batch(self, batch: list[tuple[Trace, int]]) -> None:
        """Plan the batch, emit what needs no judge together, judge the rest trace by trace."""
        try:
            planned = await self._offload(functools.partial(self._plan_all, [t for t, _ in batch]))
        except asyncio.CancelledError:
            self._busy -= len(batch)
            raise
        done: list[tuple[Trace, int, Transcript, list[Case], list[Verdict]] | None] = []
        for (trace, token), result in zip(batch, planned, strict=True):
            if isinstance(result, BaseException):
                self._evaluation_failed(trace, result)
                self._done(token)
                continue
            transcript, cases = result
            self._note_plan(transcript, cases)
            if self.judge is not None and any(case.sample.judge for case in cases):
                self._spawn(self._inflight, self._complete(trace, token, transcript, cases))
                continue
            try:
                verdicts = await judge_cases(cases, None, on_fault=self._fault)
            except Exception as exc:  # noqa: BLE001
                self._evaluation_failed(trace, exc)
                self._done(token)
                continue
            done.append((trace, token, transcript, cases, verdicts))
        try:
            await self._emit_together(done)
        except asyncio.CancelledError:
            self._busy -= sum(1 for item in done if item is not None)
            raise

    async def _emit_together(
        self, done: list[tuple[Trace, int, Transcript, list[Case], list[Verdict]] | None]
    ) -> None:
        """Send the verdict records of ``done`` together, retrying what Kafka refused.

        A trace goes on (reviews, turns, offsets released) as soon as all its
        records are acknowledged; its slot in ``done`` is then set to None.
        """
        owner: list[int] = []
        records: list[tuple[str, bytes]] = []
        left = [0] * len(done)
        for n, item in enumerate(done):
            assert item is not None
            try:
                emitted = [self._record(verdict) for verdict in item[4]]
            except Exception as exc:  # noqa: BLE001
                self._evaluation_failed(item[0], exc)
                done[n] = None
                self._done(item[1])
                continue
            records.extend(emitted)
            owner.extend([n] * len(emitted))
            left[n] = len(emitted)

        async def send(indices: list[int]) -> None:
            await self.sink.send_verdicts([records[i] for i in indices])

        async def acknowledged(indices: list[int]) -> None:
            for i in indices:
                left[owner[i]] -= 1
            for n, item in enumerate(done):
                if item is not None and left[n] == 0:
                    done[n] = None
                    await self._complete(*item)

        await self._until_acknowledged(send, len(records), acknowledged, what="verdict records")

    async def _complete(
        self,
        trace: Trace,
        token: int,
        transcript: Transcript,
        cases: Sequence[Case],
        verdicts: Sequence[Verdict] | None = None,
    ) -> None:
        """Judge and emit (when ``verdicts`` is None), reviews, turns; then release the trace."""
        try:
            if verdicts is None:
                verdicts = await judge_cases(cases, self.judge, on_fault=self._fault)
                for verdict in verdicts:
                    await self._emit(verdict)
            for case, verdict in zip(cases, verdicts, strict=True):
                await self._route_review(case, verdict)
            await self._publish_turns(trace, transcript)
        except asyncio.CancelledError:
            self._busy -= 1
            raise
        except Exception as exc:  # noqa: BLE001
            self._evaluation_failed(trace, exc)
        self._done(token)

    def _evaluation_failed(self, trace: Trace, exc: BaseException) -> None:
        # The last resort: the pipeline isolates faults per case, so this is a bug in
        # planning or emitting; the trace's offsets are released all the same.
        log.error(
            "evaluating trace %s failed",
            trace.trace_id,
            exc_info=(type(exc), exc, exc.__traceback__),
        )
        self.metrics.internal_errors.labels(stage="evaluate").inc()

    def _done(self, token: int) -> None:
        self._busy -= 1
        self._release(token)

    def _note_plan(self, transcript: Transcript, cases: Sequence[Case]) -> None:
        """Metrics and warnings of a planned trace."""
        for flag in case_flags(transcript, cases):
            self.metrics.flagged_traces.labels(flag=flag.value).inc()
        for content in transcript.capture.missing:
            self.metrics.content_not_captured.labels(field=content.value).inc()
        for content in transcript.capture.unreadable_fields:
            self.metrics.content_unreadable.labels(field=content.value).inc()
        self._capture_warnings.note(transcript)
        for case in cases:
            if is_fragment(case.rubric, case.transcript):
                self.metrics.fragment_traces.labels(rubric=case.rubric.id).inc()
            record_sampling(self.metrics, case.rubric.id, case.sample.decision, case.sample.reason)
            if case.screening.suspected:
                self.metrics.injection_suspected.labels(rubric=case.rubric.id).inc()
            if case.sample.judge:
                self._self_preference(case)

    async def _publish_turns(self, trace: Trace, transcript: Transcript) -> None:
        """The trace as a turn of each conversation it belongs to, acknowledged before release."""
        if self._turns is None:
            return
        records, without_key = turn_records(trace, transcript, self.conversation_rubrics)
        counter = self.metrics.conversations.turns
        if without_key:
            counter.labels(result="no_key").inc(len(without_key))
        for record in records:
            send = functools.partial(
                self._turns.send_turn, record.conversation_id, record.to_bytes()
            )
            await self._deliver(send)
            counter.labels(result="published").inc()

    async def _emit_case(self, verdict: Verdict, case: Case) -> None:
        await self._emit(verdict)
        await self._route_review(case, verdict)

    def _fault(self, fault: Fault) -> None:
        self.metrics.internal_errors.labels(stage=fault.stage).inc()

    def _self_preference(self, case: Case) -> None:
        judge_model = case.rubric.judge_model
        for model in case.transcript.models:
            if same_family(judge_model, model):
                self.metrics.self_preference.labels(
                    rubric=case.rubric.id, judge_model=judge_model
                ).inc()
                key = (case.rubric.id, model)
                if key not in self._warned_self_preference:
                    self._warned_self_preference.add(key)
                    log.warning(
                        "rubric %s: judge model %s is of the same family as the agent's model %s; "
                        "judges tend to prefer their own family's answers (self-preference)",
                        case.rubric.id,
                        judge_model,
                        model,
                    )
                return

    async def _emit(self, verdict: Verdict) -> None:
        trace_id, payload = self._record(verdict)
        await self._deliver(functools.partial(self.sink.send_verdict, trace_id, payload))

    def _record(self, verdict: Verdict) -> tuple[str, bytes]:
        """The verdict's span and metrics; its record, keyed by trace id, to be sent."""
        try:
            self.spans.emit(verdict)
        # The span is one of three outputs; the metrics and the record still go out.
        except Exception:
            log.exception("verdict span of trace %s could not be recorded", verdict.trace_id)
            self.metrics.internal_errors.labels(stage="span").inc()
        record_verdict(self.metrics, verdict)
        if verdict.id in self._emitted:
            self.metrics.duplicate_verdicts.inc()
        self._emitted[verdict.id] = None
        if len(self._emitted) > 100_000:
            self._emitted.popitem(last=False)
        return verdict.trace_id, verdict.to_json(self._redaction).encode()

    async def _deliver(self, send: Callable[[], Awaitable[None]]) -> None:
        """Send until Kafka acknowledges: the trace keeps its offsets held meanwhile."""
        await self._until_acknowledged(lambda _: send(), 1)

    async def _until_acknowledged(
        self,
        send: Callable[[list[int]], Awaitable[None]],
        count: int,
        acknowledged: Callable[[list[int]], Awaitable[None]] | None = None,
        *,
        what: str = "",
    ) -> None:
        """Send records ``0..count-1`` until Kafka acknowledges each, backing off between tries.

        ``send(indices)`` raises ``DeliveryError`` (``PartialDelivery`` names the
        refused positions of ``indices``); ``acknowledged`` hears of the records
        taken after every try, also when there was nothing to send.
        """
        unsent = list(range(count))
        delay = 0.5
        while True:
            refused: list[int] = []
            why = ""
            if unsent:
                try:
                    await send(unsent)
                except DeliveryError as exc:
                    refused = (
                        [unsent[i] for i in exc.unsent]
                        if isinstance(exc, PartialDelivery)
                        else unsent
                    )
                    why = str(exc)
            if acknowledged is not None:
                taken = set(refused)
                await acknowledged([i for i in unsent if i not in taken])
            if not refused:
                self._delivery_ok()
                return
            if what:
                why = f"{why}; {len(refused)} of {len(unsent)} {what} refused"
            self._delivery_failed(why, delay, len(refused))
            unsent = refused
            await self.sleep(delay)
            delay = min(delay * 2, 30.0)

    def _delivery_failed(self, why: str, delay: float, records: int = 1) -> None:
        self.metrics.internal_errors.labels(stage="emit").inc(records)
        self._delivery_error = why[:200]
        self.metrics.delivery_failing.set(1)
        log.warning("producing records failed (%s); retrying in %.1fs", why, delay)

    def _delivery_ok(self) -> None:
        if self._delivery_error is not None:
            log.info("Kafka acknowledges records again")
            self._delivery_error = None
            self.metrics.delivery_failing.set(0)

    # -- human review --------------------------------------------------------------------

    async def _route_review(self, case: Case, verdict: Verdict) -> None:
        review = self.settings.review
        if not review.enabled:
            return
        reasons = review_reasons(verdict, self._review_policy)
        if not reasons:
            return
        self.reviews.remember(verdict)
        payload = review_record(verdict, case.transcript, reasons, self._redaction)
        await self._deliver(
            functools.partial(self.sink.send_review, review.topic, verdict.trace_id, payload)
        )
        for reason in reasons:
            self.metrics.review_cases.labels(rubric=verdict.rubric_id, reason=reason).inc()

    async def _read_labels(self, source: LabelSource, stop: asyncio.Event) -> None:
        while not stop.is_set():
            payloads = await source.fetch()
            for payload in payloads:
                self.apply_label(payload)
            if payloads:
                await source.commit()

    def apply_label(self, payload: bytes) -> None:
        try:
            label = parse_label(payload, self.settings.review.labels_topic)
        except RecordError as exc:
            log.warning("ignoring malformed label: %s", exc)
            self.metrics.human_labels_unmatched.labels(reason="malformed").inc()
            return
        result = self.reviews.add_label(label)
        if result.key is None:
            self.metrics.human_labels_unmatched.labels(reason="unknown_case").inc()
            return
        key = result.key
        self.metrics.human_labels.labels(rubric=key.rubric, criterion=key.criterion).inc()
        stats = self.reviews.agreement.stats(key)
        labels = {
            "rubric": key.rubric,
            "rubric_version": key.rubric_version,
            "judge_model": key.judge_model,
            "criterion": key.criterion,
        }
        if stats.kappa is not None:
            self.metrics.human_agreement.labels(**labels, statistic="kappa").set(stats.kappa)
        if stats.agreement is not None:
            self.metrics.human_agreement.labels(**labels, statistic="agreement").set(
                stats.agreement
            )

    # -- offsets, rebalance, back-pressure ---------------------------------------------

    async def _commit(self) -> None:
        now = self.clock()
        wanted: dict[int, tuple[int, str]] = {}
        for partition, offset in self.offsets.committable(self.assembler.held_offsets()).items():
            wanted[partition] = self.handover.metadata(partition, offset, now)
        changed = {p: c for p, c in wanted.items() if self._committed.get(p) != c}
        logs = self.log_offsets.committable(self.assembler.held_log_offsets())
        logs_changed = {p: o for p, o in logs.items() if self._committed_logs.get(p) != o}
        if not changed and not logs_changed:
            return
        offsets = {p: offset for p, (offset, _) in changed.items()}
        metadata = {p: meta for p, (_, meta) in changed.items()}
        if await self.source.commit(offsets, metadata, logs_changed):
            self._committed.update(changed)
            self._committed_logs.update(logs_changed)

    async def on_revoked(self, partitions: set[int]) -> None:
        """Commit while the partitions are still ours, then leave their traces to the new owner."""
        self.metrics.rebalances.labels(event="revoked").inc()
        await self._commit()
        dropped = self.assembler.drop_partitions(partitions)
        self.offsets.drop_partitions(partitions)
        self.log_offsets.drop_partitions(partitions)
        self.handover.drop_partitions(partitions)
        for partition in partitions:
            self._committed.pop(partition, None)
            self._committed_logs.pop(partition, None)
            with contextlib.suppress(KeyError):
                retire(self.metrics.consumer_lag, str(partition))
        if dropped:
            log.info(
                "partitions %s revoked: %d open traces left to the new owner",
                sorted(partitions),
                len(dropped),
            )

    async def on_assigned(self, partitions: set[int]) -> None:
        """Learn from the commit metadata which traces the previous owner decided early."""
        log.info("partitions assigned: %s", sorted(partitions))
        self._assignments += 1
        self.metrics.rebalances.labels(event="assigned").inc()
        if not partitions:
            return
        now = self.clock()
        for partition, metadata in (await self.source.committed_metadata(partitions)).items():
            if count := self.handover.received(partition, metadata, now):
                log.info(
                    "partition %d: %d traces were decided early by its previous owner; "
                    "their records read here are flagged partial",
                    partition,
                    count,
                )

    def _apply_backpressure(self) -> None:
        limit = self.settings.max_inflight_traces
        busy = self._busy + len(self._waiting) + len(self._sending)
        if busy >= limit:
            self.source.pause()
        elif self.source.paused and busy <= limit // 2:
            self.source.resume()
        self.metrics.judge_queue_depth.set(self._busy)

    def _export_stats(self) -> None:
        st, done = self.assembler.stats, self._exported
        self.metrics.spans.inc(st.spans - done.spans)
        self.metrics.late_spans.inc(st.late_spans - done.late_spans)
        self.metrics.evictions.labels(kind="open_traces").inc(
            st.evicted_open_traces - done.evicted_open_traces
        )
        self.metrics.evictions.labels(kind="spans_per_trace").inc(
            st.span_limit_hits - done.span_limit_hits
        )
        self.metrics.orphan_traces.inc(st.orphan_traces - done.orphan_traces)
        self.metrics.logs.inc(st.logs - done.logs)
        self.metrics.late_logs.inc(st.late_logs - done.late_logs)
        self.metrics.logs_without_trace.inc(st.logs_without_trace - done.logs_without_trace)
        self._exported = dataclasses.replace(st)
        self.metrics.open_traces.set(self.assembler.open_traces)
        for partition, lag in self.source.lag(self.offsets.next_offsets()).items():
            self.metrics.consumer_lag.labels(partition=str(partition)).set(lag)
