"""The long-running service: Kafka spans in, verdicts out.

Shutdown order (SIGTERM or ``stop`` set):

1. stop fetching;
2. decide every open trace whose root has arrived (``shutdown``); traces without
   a root are dropped, their records stay uncommitted and are read again;
3. wait, bounded by ``shutdown_timeout_s``, for in-flight traces (judge, emit);
4. commit what is committable;
5. flush the span exporter, stop the producer, leave the consumer group.
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

from sidecar.adapters.http import MetricsServer
from sidecar.adapters.kafka import KafkaError, KafkaSink, KafkaSource, LabelSource, Record
from sidecar.adapters.metrics import Metrics, record_rubrics, record_sampling, record_verdict
from sidecar.adapters.otel import VerdictSpans
from sidecar.assemble import Assembler, AssemblerStats
from sidecar.decode import decode
from sidecar.errors import DecodeError, SourceError
from sidecar.judge import Judge
from sidecar.judge.service import same_family
from sidecar.model import DecideReason, RecordRef, Trace
from sidecar.offsets import OffsetTracker
from sidecar.pipeline import Case, judge_cases, plan
from sidecar.review import (
    LabelError,
    ReviewPolicy,
    ReviewTracker,
    parse_label,
    review_reasons,
    review_record,
)
from sidecar.rubric import Rubric
from sidecar.sample import Sampler
from sidecar.settings import Settings
from sidecar.verdict import Verdict

log = logging.getLogger(__name__)

Clock = Callable[[], float]


class Service:
    """One sidecar replica. Seams (judge, clock, spans, metrics) are parameters."""

    def __init__(
        self,
        settings: Settings,
        rubrics: Sequence[Rubric],
        *,
        metrics: Metrics,
        spans: VerdictSpans,
        judge: Judge | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.settings = settings
        self.rubrics = list(rubrics)
        self.metrics = metrics
        self.spans = spans
        self.judge = judge
        self.clock = clock
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
        # Kafka clients bind to the running loop, so they are created in run().
        self._source: KafkaSource | None = None
        self._sink: KafkaSink | None = None
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
        self._ready = False
        self._committed: dict[int, int] = {}
        record_rubrics(metrics, self.rubrics)

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def source(self) -> KafkaSource:
        assert self._source is not None, "Service.run() creates the Kafka source"
        return self._source

    @property
    def sink(self) -> KafkaSink:
        assert self._sink is not None, "Service.run() creates the Kafka sink"
        return self._sink

    async def run(self, stop: asyncio.Event) -> None:
        self._source = KafkaSource(self.settings.kafka, self._on_revoked, self._on_assigned)
        self._sink = KafkaSink(self.settings.kafka)
        review = self.settings.review
        labels = LabelSource(self.settings.kafka, review.labels_topic) if review.enabled else None
        await self.server.start()
        try:
            await self.sink.start()
            await self.source.start()
            if labels is not None:
                await labels.start()
        except KafkaError as exc:
            for client in (labels, self.source, self.sink):
                if client is not None:
                    with contextlib.suppress(KafkaError):
                        await client.stop()
            await self.server.stop()
            raise SourceError(
                f"cannot reach Kafka at {self.settings.kafka.bootstrap_servers}: {exc}; "
                "check kafka.bootstrap_servers (SIDECAR_KAFKA__BOOTSTRAP_SERVERS) and the network"
            ) from exc
        try:
            self._ready = True
            async with asyncio.TaskGroup() as tasks:
                if labels is not None:
                    tasks.create_task(self._read_labels(labels, stop))
                await self._consume(stop)
                await self._shutdown()
        finally:
            self._ready = False
            if labels is not None:
                await labels.stop()
            await self.source.stop()
            await self.sink.stop()
            if self.judge is not None:
                await self.judge.aclose()
            self.spans.flush()
            await self.server.stop()

    def _readiness(self) -> tuple[bool, str]:
        if not self._ready or self._source is None:
            return False, "not ready: connecting to Kafka"
        return (
            True,
            f"ready: {len(self.rubrics)} rubrics, partitions {sorted(self.source.assigned())}",
        )

    async def _consume(self, stop: asyncio.Event) -> None:
        last_commit = self.clock()
        interval = self.settings.kafka.commit_interval_s
        while not stop.is_set():
            self._apply_backpressure()
            records = await self.source.fetch()
            now = self.clock()
            for record in records:
                await self._ingest(record, now)
            for trace in self.assembler.due(now):
                self._dispatch(trace)
            self._export_stats()
            if now - last_commit >= interval:
                await self._commit()
                last_commit = now

    async def _shutdown(self) -> None:
        for trace in self.assembler.drain(DecideReason.SHUTDOWN, require_root=True):
            self._dispatch(trace)
        if self._inflight:
            _, pending = await asyncio.wait(
                self._inflight, timeout=self.settings.shutdown_timeout_s
            )
            for task in pending:
                task.cancel()
            if pending:
                log.warning("shutdown: %d traces still in flight were not committed", len(pending))
        self._export_stats()
        await self._commit()

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
        await self._deliver(self.sink.send_verdict, verdict.trace_id, verdict.to_json().encode())

    async def _deliver(
        self, send: Callable[[str, bytes], Awaitable[None]], key: str, payload: bytes
    ) -> None:
        """Send until Kafka acknowledges: the trace keeps its offsets held meanwhile."""
        delay = 0.5
        while True:
            try:
                await send(key, payload)
                return
            except KafkaError as exc:
                self.metrics.internal_errors.labels(stage="emit").inc()
                log.warning("producing a verdict failed (%s); retrying in %.1fs", exc, delay)
                await asyncio.sleep(delay)
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
        payload = review_record(verdict, case.transcript, reasons)
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
            label = parse_label(payload)
        except LabelError as exc:
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

    async def _on_revoked(self, partitions: set[int]) -> None:
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

    async def _on_assigned(self, partitions: set[int]) -> None:
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
