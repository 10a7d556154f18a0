"""The trace engine's configuration: spans (and logs) in, one verdict per rubric out.

:class:`TraceBuffer` is the engine's buffer: each record of the spans topic
(or of the logs topic beside it, co-partitioned) is added to the
:class:`~sidecar.ingest.assemble.Assembler`, which holds a protobuf record's
spans as read and decodes them when their trace is decided; a record that cannot be decoded
raises :class:`~sidecar.errors.DecodeError` and is dead-lettered by the
engine. A trace leaves the assembler decided (root ended and
``decision_wait`` quiet, ``max_trace_age``, a bound, or shutdown); the
handover (:mod:`sidecar.ingest.handover`) hears of it, and a trace the
previous owner of its partition decided early is flagged ``partial``.

:class:`TraceWork` evaluates the decided traces:

- ``plan`` (planning thread, in hops of the engine's ``PLAN_BATCH``): transcript, routing, checks,
  screening, sampling (:func:`sidecar.evaluate.pipeline.plan`); an exception
  stays with its trace;
- ``finish`` (event loop): the traces nobody needs to judge are concluded
  and their records (verdicts, review cases, turns) delivered together, each
  trace released as soon as its own records are acknowledged; a trace with a
  case for the judge is judged and delivered on its own, so a slow judge call
  holds back no other trace.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from sidecar.engine.deliver import Deliverer
from sidecar.engine.emit import Emitter
from sidecar.errors import DecodeError
from sidecar.evaluate.capture import CaptureWarnings
from sidecar.evaluate.checks import run_checks
from sidecar.evaluate.decision import Decision, trace_decision
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
from sidecar.evaluate.sample import Sampler
from sidecar.evaluate.verdict import Verdict
from sidecar.ingest.assemble import Assembler
from sidecar.ingest.decode import Encoding, decode
from sidecar.ingest.handover import Handover
from sidecar.ingest.offsets import Held
from sidecar.judge import Judge
from sidecar.judge.service import same_family
from sidecar.model import DecideReason, LogRecord, RecordRef, Span, Trace, Transcript
from sidecar.ports import OutRecord, Position, Record
from sidecar.telemetry import (
    CasePlanned,
    FaultRaised,
    NullTelemetry,
    SelfPreference,
    Telemetry,
    TraceDecided,
    TracePlanned,
)
from sidecar.text import clipped

log = logging.getLogger(__name__)

Decoder = Callable[[bytes, Encoding], list[Span]]
LogDecoder = Callable[[bytes, Encoding], list[LogRecord]]
Planned = tuple[Transcript, list[Case]]

# Distinct (rubric, agent model) pairs warned about self-preference, at most.
SELF_PREFERENCE_WARNINGS = 100


@dataclass(slots=True)
class TraceStats:
    """Traces decided, by reason."""

    decided: dict[str, int] = field(default_factory=dict)


class TraceBuffer:
    """The trace engine's buffer: decode, assemble, decide (see the module docstring)."""

    def __init__(
        self,
        assembler: Assembler,
        handover: Handover,
        *,
        spans_topic: str,
        logs_topic: str | None,
        encoding: Encoding,
        decoder: Decoder,
        log_decoder: LogDecoder,
        clock: Callable[[], float],
        telemetry: Telemetry | None = None,
    ) -> None:
        self.assembler = assembler
        self.telemetry: Telemetry = telemetry if telemetry is not None else NullTelemetry()
        self.handover = handover
        self.spans_topic = spans_topic
        self.logs_topic = logs_topic or None
        self.encoding = encoding
        self.decoder = decoder
        self.log_decoder = log_decoder
        self.clock = clock
        self.stats = TraceStats()

    async def add(self, record: Record, now: float) -> Sequence[Trace]:
        if record.value is None:
            self.telemetry.event(TraceDecided(Decision.DEAD_LETTERED))
            raise DecodeError("empty", "record has no value")
        ref = RecordRef(record.partition, record.offset)
        try:
            if self.logs_topic is not None and record.topic == self.logs_topic:
                decoded = self.log_decoder(record.value, self.encoding)
                early = self.assembler.add_logs(decoded, now, ref)
            elif self.decoder is decode:
                # Held as read until decided (see Assembler.add_record).
                early = self.assembler.add_record(bytes(record.value), self.encoding, now, ref)
            else:
                early = self.assembler.add(self.decoder(record.value, self.encoding), now, ref)
        # Whatever add raises, the engine dead-letters the record: its one decision.
        except Exception:
            self.telemetry.event(TraceDecided(Decision.DEAD_LETTERED))
            raise
        return self._decided(early)

    def due(self, now: float, limit: int) -> Sequence[Trace]:
        return self._decided(self.assembler.due(now, limit=limit))

    def drain(self) -> Sequence[Trace]:
        # Traces without a root are not decided: their records stay uncommitted, read again.
        return self._decided(self.assembler.drain(DecideReason.SHUTDOWN, require_root=True))

    def holds(self, item: Trace) -> Held:
        held: dict[str, Mapping[int, int]] = {self.spans_topic: item.first_offsets}
        if self.logs_topic is not None:
            held[self.logs_topic] = item.first_log_offsets
        return held

    def held_offsets(self) -> Held:
        held: dict[str, Mapping[int, int]] = {self.spans_topic: self.assembler.held_offsets()}
        if self.logs_topic is not None:
            held[self.logs_topic] = self.assembler.held_log_offsets()
        return held

    def drop_partitions(self, partitions: set[int]) -> int:
        self.handover.drop_partitions(partitions)
        dropped = len(self.assembler.drop_partitions(partitions))
        if dropped:
            self.telemetry.event(TraceDecided(Decision.REVOKED, dropped))
        return dropped

    def _decided(self, traces: Sequence[Trace]) -> list[Trace]:
        now = self.clock()
        decided: list[Trace] = []
        for trace in traces:
            reason = trace.reason.value
            self.stats.decided[reason] = self.stats.decided.get(reason, 0) + 1
            self.handover.decided(trace, now)
            if self.handover.partial(trace):
                trace = dataclasses.replace(trace, partial=True)
            decided.append(trace)
        return decided


class SelfPreferenceWarnings:
    """Warns once per (rubric, agent model) when the judge is of the agent model's family.

    Bounded: the agent's model names are untrusted, so each is kept and shown
    cut (:func:`sidecar.text.clipped`) and at most ``limit`` pairs are
    remembered and warned about; the metric still counts every case.
    """

    def __init__(self, limit: int = SELF_PREFERENCE_WARNINGS) -> None:
        self.limit = limit
        self._warned: set[tuple[str, str]] = set()

    def __len__(self) -> int:
        return len(self._warned)

    def note(self, case: Case) -> bool:
        """True when ``case`` is judged by its agent model's family (warned when new)."""
        judge_model = case.rubric.judge_model
        for model in case.transcript.models:
            if not same_family(judge_model, model):
                continue
            key = (case.rubric.id, clipped(model))
            if key not in self._warned and len(self._warned) < self.limit:
                self._warned.add(key)
                log.warning(
                    "rubric %s: judge model %s is of the same family as the agent's model %s; "
                    "judges tend to prefer their own family's answers (self-preference)",
                    case.rubric.id,
                    judge_model,
                    key[1],
                )
            return True
        return False


class TraceWork:
    """Plans, judges and emits decided traces (see the module docstring)."""

    def __init__(
        self,
        rubrics: Sequence[Rubric],
        *,
        sampler: Sampler,
        judge: Judge | None,
        emitter: Emitter,
        deliverer: Deliverer,
        handover: Handover,
        clock: Callable[[], float],
        checks: RunChecks = run_checks,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.rubrics = list(rubrics)
        self.sampler = sampler
        self.judge = judge
        self.emitter = emitter
        self.deliverer = deliverer
        self.handover = handover
        self.clock = clock
        self.checks = checks
        self.telemetry: Telemetry = telemetry if telemetry is not None else NullTelemetry()
        self.capture_warnings = CaptureWarnings()
        self.self_preference = SelfPreferenceWarnings()

    # -- planning thread ----------------------------------------------------------------

    def plan(self, items: Sequence[Trace]) -> list[Planned | BaseException]:
        now = self.clock()
        planned: list[Planned | BaseException] = []
        for trace in items:
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
            # A bug in one trace stays with that trace.
            except Exception as exc:  # noqa: BLE001
                self.telemetry.event(TraceDecided(Decision.INTERNAL_ERROR))
                planned.append(exc)
        return planned

    def _fault(self, fault: Fault) -> None:
        self.telemetry.event(FaultRaised(fault.stage))

    # -- event loop ---------------------------------------------------------------------

    async def finish(self, planned: Sequence[tuple[Trace, Planned]]) -> AsyncIterator[int]:
        judged: list[asyncio.Task[int]] = []
        together: list[tuple[int, list[OutRecord]]] = []
        try:
            for position, (trace, (transcript, cases)) in enumerate(planned):
                self._note(transcript, cases)
                if self.judge is not None and any(case.sample.judge for case in cases):
                    judged.append(
                        asyncio.create_task(self._judged(position, trace, transcript, cases))
                    )
                    continue
                try:
                    verdicts = await judge_cases(cases, None, on_fault=self._fault)
                    records = self._outputs(trace, transcript, cases, verdicts)
                except Exception as exc:  # noqa: BLE001
                    self._lost(trace, exc)
                    yield position
                    continue
                together.append((position, records))
            async for position in self._deliver_together(together):
                yield position
            for task in asyncio.as_completed(judged):
                yield await task
        finally:
            for task in judged:
                task.cancel()

    async def _judged(
        self, position: int, trace: Trace, transcript: Transcript, cases: list[Case]
    ) -> int:
        try:
            verdicts = await judge_cases(cases, self.judge, on_fault=self._fault)
            records = self._outputs(trace, transcript, cases, verdicts)
        except Exception as exc:  # noqa: BLE001
            self._lost(trace, exc)
            return position
        await self.deliverer.deliver(records)
        return position

    async def _deliver_together(
        self, together: Sequence[tuple[int, list[OutRecord]]]
    ) -> AsyncIterator[int]:
        """One delivery for the records of ``together``; each trace once all its own are settled."""
        records: list[OutRecord] = []
        owner: list[int] = []
        left: dict[int, int] = {}
        for position, outputs in together:
            left[position] = len(outputs)
            records.extend(outputs)
            owner.extend([position] * len(outputs))
        for position, count in left.items():
            if count == 0:
                yield position
        async for settled in self.deliverer.sending(records):
            for index in settled:
                position = owner[index]
                left[position] -= 1
                if left[position] == 0:
                    yield position

    def _outputs(
        self,
        trace: Trace,
        transcript: Transcript,
        cases: Sequence[Case],
        verdicts: Sequence[Verdict],
    ) -> list[OutRecord]:
        records: list[OutRecord] = []
        for case, verdict in zip(cases, verdicts, strict=True):
            records.extend(self.emitter.verdict(verdict, case.transcript))
        turns = self.emitter.turns(trace, transcript)
        records.extend(turns)
        decision = trace_decision(verdicts, trace.reason, turn=bool(turns))
        self.telemetry.event(TraceDecided(decision))
        return records

    def _lost(self, trace: Trace, exc: BaseException) -> None:
        # The last resort: the pipeline isolates faults per case, so this is a bug in
        # emitting; the trace's offsets are released all the same.
        log.error(
            "evaluating trace %s failed",
            trace.trace_id,
            exc_info=(type(exc), exc, exc.__traceback__),
        )
        self.telemetry.event(FaultRaised("evaluate"))
        self.telemetry.event(TraceDecided(Decision.INTERNAL_ERROR))

    def _note(self, transcript: Transcript, cases: Sequence[Case]) -> None:
        """Telemetry and warnings of a planned trace."""
        self.telemetry.event(
            TracePlanned(
                transcript,
                tuple(flag.value for flag in case_flags(transcript, cases)),
                tuple(
                    CasePlanned(
                        case.rubric.id,
                        case.sample.decision,
                        case.sample.reason,
                        case.screening.suspected,
                        is_fragment(case.rubric, case.transcript),
                    )
                    for case in cases
                ),
            )
        )
        self.capture_warnings.note(transcript)
        for case in cases:
            if case.sample.judge:
                self._self_preference(case)

    def _self_preference(self, case: Case) -> None:
        if self.self_preference.note(case):
            self.telemetry.event(SelfPreference(case.rubric.id, case.rubric.judge_model))

    async def assigned(self, partitions: set[int], metadata: Mapping[int, str]) -> None:
        now = self.clock()
        for partition in sorted(partitions):
            if count := self.handover.received(partition, metadata.get(partition, ""), now):
                log.info(
                    "partition %d: %d traces were decided early by its previous owner; "
                    "their records read here are flagged partial",
                    partition,
                    count,
                )

    def commit_position(self, partition: int, offset: int) -> Position:
        return Position(*self.handover.metadata(partition, offset, self.clock()))
