"""The emitter: a verdict turned into its outputs, the same way for run, replay and backfill.

For each verdict, :meth:`Emitter.verdict`:

0. stamps ``decided_at`` (the wall clock) on a verdict that has none, so the
   span, the metrics, the record and the review case all carry the same time;
1. records the verdict span in the evaluated trace (``spans``; a failure is
   counted and the other outputs still go out);
2. reports the verdict (:class:`~sidecar.telemetry.VerdictEmitted`, with the
   span's id and whether its idempotency key was seen before);
3. returns the records to deliver: the verdict record (when a verdict topic
   is set), and the review case when the review policy routes it to people.

:meth:`Emitter.turns` returns the turn records of a trace for the
conversation stage. The caller delivers the records: the service through
the deliverer (offsets released once acknowledged), backfill through the
deliverer without commits, replay by printing the verdict records.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sidecar.calibrate.review import ReviewPolicy, ReviewTracker, review_reasons, review_record
from sidecar.conversation.turn_builder import turn_records
from sidecar.evaluate.rubric import Rubric
from sidecar.evaluate.verdict import Verdict, decided
from sidecar.model import Trace, Transcript
from sidecar.ports import OutRecord, RecordKind, VerdictSpanSink
from sidecar.telemetry import (
    FaultRaised,
    NullTelemetry,
    ReviewRouted,
    Telemetry,
    TurnsPublished,
    VerdictEmitted,
)
from sidecar.wire.redaction import DEFAULT_REDACTION, Redaction
from sidecar.wire.verdicts import verdict_json

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Review:
    """Where review cases go, which are routed there, and who remembers them for labels."""

    topic: str
    policy: ReviewPolicy
    tracker: ReviewTracker


class Emitter:
    """Outputs of verdicts (see the module docstring)."""

    def __init__(
        self,
        *,
        spans: VerdictSpanSink | None,
        telemetry: Telemetry | None = None,
        redaction: Redaction = DEFAULT_REDACTION,
        verdict_topic: str | None = None,
        review: Review | None = None,
        turns_topic: str | None = None,
        conversation_rubrics: Sequence[Rubric] = (),
        emitted_memory: int = 100_000,
        wall_clock_ns: Callable[[], int] | None = None,
    ) -> None:
        self.spans = spans
        self.telemetry: Telemetry = telemetry if telemetry is not None else NullTelemetry()
        self.redaction = redaction
        self.verdict_topic = verdict_topic or None
        self.review = review
        self.turns_topic = turns_topic or None
        self.conversation_rubrics = [r for r in conversation_rubrics if r.conversational]
        self.emitted_memory = emitted_memory
        # Stamps ``decided_at`` on verdicts that come without one (the live service's).
        self.wall_clock_ns = wall_clock_ns
        # Idempotency keys of recent verdicts: a repeat is an at-least-once redelivery.
        self._emitted: OrderedDict[str, None] = OrderedDict()

    def verdict(self, verdict: Verdict, transcript: Transcript | None = None) -> list[OutRecord]:
        """Span and telemetry now; the verdict record and any review case, to be delivered."""
        if verdict.decided_at is None and self.wall_clock_ns is not None:
            verdict = decided(verdict, self.wall_clock_ns())
        span_id: str | None = None
        if self.spans is not None:
            try:
                span_id = self.spans.record(verdict)
            # The span is one of three outputs; the metrics and the record still go out.
            except Exception:
                log.exception("verdict span of trace %s could not be recorded", verdict.trace_id)
                self.telemetry.event(FaultRaised("span"))
        duplicate = verdict.id in self._emitted
        self._emitted[verdict.id] = None
        if duplicate:
            self._emitted.move_to_end(verdict.id)
        elif len(self._emitted) > self.emitted_memory:
            self._emitted.popitem(last=False)
        self.telemetry.event(VerdictEmitted(verdict, span_id, duplicate))
        log.debug(
            "trace %s decided: %s %s@%s (agent %s)%s",
            verdict.trace_id,
            verdict.outcome.value,
            verdict.rubric_id,
            verdict.rubric_version,
            verdict.agent,
            " (seen before)" if duplicate else "",
        )
        records: list[OutRecord] = []
        key = verdict.trace_id.encode("ascii")
        if self.verdict_topic is not None:
            payload = verdict_json(verdict, self.redaction).encode()
            records.append(OutRecord(RecordKind.VERDICT, self.verdict_topic, key, payload))
        if self.review is not None and transcript is not None:
            reasons = review_reasons(verdict, self.review.policy)
            if reasons:
                self.review.tracker.remember(verdict)
                payload = review_record(verdict, transcript, reasons, self.redaction)
                records.append(OutRecord(RecordKind.REVIEW, self.review.topic, key, payload))
                self.telemetry.event(ReviewRouted(verdict.rubric_id, reasons))
        return records

    def turns(self, trace: Trace, transcript: Transcript) -> list[OutRecord]:
        """The trace as a turn of each conversation it belongs to (keyed by conversation id)."""
        if self.turns_topic is None or not self.conversation_rubrics:
            return []
        found, without_key = turn_records(trace, transcript, self.conversation_rubrics)
        self.telemetry.event(TurnsPublished(len(found), len(without_key)))
        return [
            OutRecord(
                RecordKind.TURN,
                self.turns_topic,
                record.conversation_id.encode("utf-8"),
                record.to_bytes(),
            )
            for record in found
        ]
