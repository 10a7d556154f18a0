"""The labels loop: human labels read back and paired with the judge's verdicts.

Each label (the labels topic, :func:`sidecar.wire.labels.parse_label`) is
matched to a reviewed case the :class:`~sidecar.calibrate.review.ReviewTracker`
remembers (or to the judge's echo it carries); the rolling judge-human
agreement of its (rubric, version, judge model, criterion) is reported. A
malformed label, one matching no case, and one for a rubric or criterion that
is not loaded are counted (by reason) and skipped; the reader's
offsets are committed after each batch.
"""

from __future__ import annotations

import asyncio
import logging

from sidecar.calibrate.review import ReviewTracker
from sidecar.errors import RecordError
from sidecar.ports import LabelReader
from sidecar.telemetry import AgreementChanged, LabelRead, Telemetry
from sidecar.wire.labels import parse_label

log = logging.getLogger(__name__)


class LabelLoop:
    """Reads labels until stopped; :meth:`apply` takes one label."""

    def __init__(self, reviews: ReviewTracker, telemetry: Telemetry, topic: str) -> None:
        self.reviews = reviews
        self.telemetry = telemetry
        self.topic = topic

    async def run(self, reader: LabelReader, stop: asyncio.Event) -> None:
        while not stop.is_set():
            payloads = await reader.fetch()
            for payload in payloads:
                self.apply(payload)
            if payloads:
                await reader.commit()

    def apply(self, payload: bytes) -> None:
        try:
            label = parse_label(payload, self.topic)
        except RecordError as exc:
            log.warning("ignoring malformed label: %s", exc)
            self.telemetry.event(LabelRead(reason="malformed"))
            return
        result = self.reviews.add_label(label)
        if result.key is None:
            # A closed set of reasons; the label's own values never become label values.
            self.telemetry.event(LabelRead(reason=result.reason or "unknown_case"))
            return
        key = result.key
        self.telemetry.event(LabelRead(key.rubric, key.criterion))
        stats = self.reviews.agreement.stats(key)
        self.telemetry.event(
            AgreementChanged(
                key.rubric,
                key.rubric_version,
                key.judge_model,
                key.criterion,
                stats.kappa,
                stats.agreement,
            )
        )
