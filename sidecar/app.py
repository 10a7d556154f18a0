"""The long-running service: Kafka spans in, verdicts out.

The broker clients come from factories (``source``, ``sink``, ``labels``; Kafka
by default, :mod:`sidecar.adapters.memory` in tests) and are created in
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
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence

from sidecar.adapters.broker import LabelSource, Record, Sink, Source
from sidecar.adapters.http import MetricsServer
from sidecar.adapters.kafka import KafkaLabelSource, KafkaSink, KafkaSource
from sidecar.adapters.metrics import Metrics, record_rubrics, record_sampling, record_verdict
from sidecar.adapters.otel import VerdictSpans
from sidecar.assemble import Assembler, AssemblerStats
from sidecar.decode import decode
from sidecar.errors import DecodeError, DeliveryError, RecordError, SourceError
from sidecar.judge import Judge
from sidecar.judge.service import same_family
from sidecar.model import DecideReason, RecordRef, Trace
from sidecar.offsets import OffsetTracker
from sidecar.pipeline import Case, judge_cases, plan
from sidecar.records import parse_label
from sidecar.review import ReviewPolicy, ReviewTracker, review_reasons, review_record
from sidecar.rubric import Rubric
from sidecar.sample import Sampler
from sidecar.settings import Settings
from sidecar.verdict import Verdict

log = logging.getLogger(__name__)

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


class Service:
    """One sidecar replica.

    Seams are parameters: judge, spans, metrics, the broker clients (factories
    called in ``start``; ``labels`` only when review is enabled) and the clock
    with its ``sleep``. The service is its source's rebalance listener.
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
    ) -> None:
        self.settings = settings
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
        s = settings.sampling
        self.sampler = Sampler(
            judge_enabled=judge is not None,
            per_minute=s.budget_per_minute,
            per_day=s.budget_per_day,
            warmup_traces=s.warmup_traces,
        )
        self.offsets = OffsetTracker()
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
        self._inflight: set[asyncio.Task[None]] = set()
        self._emitted: OrderedDict[str, None] = OrderedDict()
        # Assembler stats already exported, so only deltas are added to the counters.
        self._exported = AssemblerStats()
        self._warned_self_preference: set[tuple[str, str]] = set()
        self._review_policy = ReviewPolicy(
            audit_share=settings.review.audit_share, error_share=settings.review.error_share
        )
        self.reviews = ReviewTracker(memory=settings.review.memory, window=settings.review.window)
        self._redaction = settings.redaction.policy()
        self._ready = False
        self._committed: dict[int, int] = {}
        self._last_commit = 0.0
        record_rubrics(metrics, self.rubrics)

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
        """Traces decided but not yet emitted (judging, sending)."""
        return len(self._inflight)

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set, then shut down in the order written above."""
        await self.start()
        try:
            async with asyncio.TaskGroup() as tasks:
                if self._labels is not None:
                    tasks.create_task(self._read_labels(self._labels, stop))
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
        await self.server.start()
        try:
            await self.sink.start()
            await self.source.start(self)
            if self._labels is not None:
                await self._labels.start()
        except SourceError:
            clients: list[LabelSource | Source | Sink | None] = [
                self._labels,
                self._source,
                self._sink,
            ]
            for client in clients:
                if client is not None:
                    with contextlib.suppress(SourceError):
                        await client.stop()
            await self.server.stop()
            raise
        self._ready = True
        self._last_commit = self.clock()

    async def step(self) -> None:
        """One round: back-pressure, fetch, assemble, dispatch what is due, commit on interval."""
        self._apply_backpressure()
        records = await self.source.fetch()
        now = self.clock()
        for record in records:
            await self._ingest(record, now)
        for trace in self.assembler.due(now):
            self._dispatch(trace)
        self._export_stats()
        if now - self._last_commit >= self.settings.kafka.commit_interval_s:
            await self._commit()
            self._last_commit = now

    async def drain(self) -> None:
        """Shutdown steps 2 to 4 (fetching has stopped): decide, wait bounded, commit."""
        for trace in self.assembler.drain(DecideReason.SHUTDOWN, require_root=True):
            self._dispatch(trace)
        pending = await self._wait_in_flight()
        for task in pending:
            task.cancel()
        if pending:
            log.warning("shutdown: %d traces still in flight were not committed", len(pending))
        self._export_stats()
        await self._commit()

    async def close(self) -> None:
        """Shutdown step 5: leave the groups, stop the producer, close the judge, flush spans."""
        self._ready = False
        if self._labels is not None:
            await self._labels.stop()
        await self.source.stop()
        await self.sink.stop()
        if self.judge is not None:
            await self.judge.aclose()
        self.spans.flush()
        await self.server.stop()

    async def _wait_in_flight(self) -> set[asyncio.Task[None]]:
        """Wait until nothing is in flight, at most ``shutdown_timeout_s`` on ``sleep``."""
        pending = {t for t in self._inflight if not t.done()}
        if not pending:
            return pending
        timer = asyncio.ensure_future(self.sleep(self.settings.shutdown_timeout_s))
        try:
            while pending and not timer.done():
                await asyncio.wait({*pending, timer}, return_when=asyncio.FIRST_COMPLETED)
                pending = {t for t in self._inflight if not t.done()}
        finally:
            timer.cancel()
        return pending

    def _readiness(self) -> tuple[bool, str]:
        if not self._ready or self._source is None:
            return False, "not ready: connecting to Kafka"
        return (
            True,
            f"ready: {len(self.rubrics)} rubrics, partitions {sorted(self.source.assigned())}",
        )

    # -- records -----------------------------------------------------------------------

    async def _ingest(self, record: Record, now: float) -> None:
        try:
            if record.value is None:
                raise DecodeError("empty", "record has no value")
            spans = decode(record.value, self.settings.kafka.encoding)
        except DecodeError as exc:
            await self.sink.send_dead_letter(record, exc.reason, str(exc))
            self.metrics.kafka_records.labels(result="dead_letter").inc()
            self.metrics.dead_letters.labels(reason=exc.reason).inc()
            self.offsets.consumed(record.partition, record.offset)
            return
        self.metrics.kafka_records.labels(result="ok").inc()
        for trace in self.assembler.add(spans, now, RecordRef(record.partition, record.offset)):
            self._dispatch(trace)
        self.offsets.consumed(record.partition, record.offset)

    def _dispatch(self, trace: Trace) -> None:
        self.metrics.traces_decided.labels(reason=trace.reason.value).inc()
        token = self.offsets.hold(trace.first_offsets)
        task = asyncio.create_task(self._finish(trace, token))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    async def _finish(self, trace: Trace, token: int) -> None:
        try:
            _, cases = plan(trace, self.rubrics, self.sampler, self.clock())
            for case in cases:
                record_sampling(
                    self.metrics, case.rubric.id, case.sample.decision, case.sample.reason
                )
                if case.screening.suspected:
                    self.metrics.injection_suspected.labels(rubric=case.rubric.id).inc()
                if case.sample.judge:
                    self._self_preference(case)
            verdicts = await judge_cases(cases, self.judge)
            for case, verdict in zip(cases, verdicts, strict=True):
                await self._emit(verdict)
                await self._route_review(case, verdict)
        except asyncio.CancelledError:
            raise
        except Exception:
            # One bad trace must not stop the service; the bug is logged and counted.
            log.exception("evaluating trace %s failed; its verdict is lost", trace.trace_id)
            self.metrics.internal_errors.labels(stage="evaluate").inc()
        self.offsets.release(token)

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
        self.spans.emit(verdict)
        record_verdict(self.metrics, verdict)
        if verdict.id in self._emitted:
            self.metrics.duplicate_verdicts.inc()
        self._emitted[verdict.id] = None
        if len(self._emitted) > 100_000:
            self._emitted.popitem(last=False)
        await self._deliver(
            self.sink.send_verdict, verdict.trace_id, verdict.to_json(self._redaction).encode()
        )

    async def _deliver(
        self, send: Callable[[str, bytes], Awaitable[None]], key: str, payload: bytes
    ) -> None:
        """Send until Kafka acknowledges: the trace keeps its offsets held meanwhile."""
        delay = 0.5
        while True:
            try:
                await send(key, payload)
                return
            except DeliveryError as exc:
                self.metrics.internal_errors.labels(stage="emit").inc()
                log.warning("producing a verdict failed (%s); retrying in %.1fs", exc, delay)
                await self.sleep(delay)
                delay = min(delay * 2, 30.0)

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
            functools.partial(self.sink.send_review, review.topic), verdict.trace_id, payload
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
        offsets = self.offsets.committable(self.assembler.held_offsets())
        changed = {p: o for p, o in offsets.items() if self._committed.get(p) != o}
        if changed and await self.source.commit(changed):
            self._committed.update(changed)

    async def on_revoked(self, partitions: set[int]) -> None:
        """Commit while the partitions are still ours, then leave their traces to the new owner."""
        await self._commit()
        dropped = self.assembler.drop_partitions(partitions)
        self.offsets.drop_partitions(partitions)
        for partition in partitions:
            self._committed.pop(partition, None)
            with contextlib.suppress(KeyError):
                self.metrics.consumer_lag.remove(str(partition))
        if dropped:
            log.info(
                "partitions %s revoked: %d open traces left to the new owner",
                sorted(partitions),
                len(dropped),
            )

    async def on_assigned(self, partitions: set[int]) -> None:
        log.info("partitions assigned: %s", sorted(partitions))

    def _apply_backpressure(self) -> None:
        limit = self.settings.max_inflight_traces
        if len(self._inflight) >= limit:
            self.source.pause()
        elif self.source.paused and len(self._inflight) <= limit // 2:
            self.source.resume()
        self.metrics.judge_queue_depth.set(len(self._inflight))

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
        self._exported = dataclasses.replace(st)
        self.metrics.open_traces.set(self.assembler.open_traces)
        for partition, lag in self.source.lag(self.offsets.next_offsets()).items():
            self.metrics.consumer_lag.labels(partition=str(partition)).set(lag)
