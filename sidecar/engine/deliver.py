"""The deliverer: outgoing records until the broker acknowledges them, or a dead letter.

Every record sidecar produces (verdicts, reviews, turns, conversation state,
dead letters) goes through :meth:`Deliverer.deliver`, which owns the one
retry policy (:class:`sidecar.retry.Backoff`, from ``kafka.delivery``) and
sorts every refusal the sink reports (:class:`~sidecar.errors.Refusal`):

- **retriable** (a broker restarting, a leader moving, a timeout): tried
  again after the back-off, for as long as it takes; the records' items keep
  their offsets held meanwhile, so nothing is lost;
- **never** (``too_large``, ``invalid_record``): the record cannot be written
  as it is. Unless the topic is changed (a larger ``max.message.bytes``)
  within ``never_wait_s``, it goes to the dead-letter topic, with the reason
  and where it was bound in headers, and the delivery goes on;
- **operator** (``not_authorized``, ``unknown_topic``): someone must grant an
  ACL or create a topic. Tried again with the back-off for
  ``operator_wait_s``; meanwhile :attr:`Deliverer.failing` names the topic and
  the operation (``/readyz`` says not ready), and the service recovers by
  itself when the cause is fixed. After that wait the record is dead-lettered
  like the others, so a partition is never held for ever.

A dead letter that is itself refused for good is sent without its value (a
too large one) or, failing that, counted as lost and logged: the one place a
record can be dropped, and never silently. ``attempts`` (``sidecar
backfill``) bounds the tries of retriable refusals; past it ``deliver``
raises :class:`~sidecar.errors.DeliveryError`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass

from sidecar.errors import DeliveryError, Refusal
from sidecar.ports import AccessRefused, OutRecord, RecordKind, RecordSink
from sidecar.retry import Backoff, Sleep
from sidecar.telemetry import DeadLettered, DeliveryRefused, NullTelemetry, Telemetry

log = logging.getLogger(__name__)

# Refusals that only a change of the topic fixes: waited on for ``never_wait_s``.
NEVER = frozenset({"too_large", "invalid_record"})
# Refusals an operator fixes (an ACL, a topic), or that Kafka says will not go away by
# themselves: waited on for ``operator_wait_s``.
OPERATOR = frozenset({"not_authorized", "unknown_topic", "refused"})

DLQ_REASON = "sidecar.dlq.reason"
DLQ_DETAIL = "sidecar.dlq.detail"
DLQ_TARGET = "sidecar.dlq.target_topic"
DLQ_KIND = "sidecar.dlq.kind"
DLQ_VALUE_DROPPED = "sidecar.dlq.value_dropped"

_OPERATION = {
    "not_authorized": "WRITE (not authorised)",
    "unknown_topic": "WRITE (no such topic)",
    "refused": "WRITE",
}


@dataclass(slots=True)
class DeliveryStats:
    """The deliverer's state: whether the broker refuses records now, and why."""

    failing: bool = False
    why: str = ""
    dead_lettered: int = 0
    lost: int = 0
    # The topics Kafka refuses this principal WRITE on now (an ACL), while records wait.
    refused: tuple[AccessRefused, ...] = ()


class Deliverer:
    """Sends records until acknowledged; refused for good -> dead letter (module docstring).

    ``sink`` may be set after construction (a service creates its clients on start).
    """

    def __init__(
        self,
        sink: RecordSink | None,
        *,
        dead_letter_topic: str,
        backoff: Backoff,
        sleep: Sleep,
        clock: Callable[[], float],
        operator_wait_s: float = 900.0,
        never_wait_s: float = 60.0,
        max_dead_letter_bytes: int = 900_000,
        attempts: int | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.sink = sink
        self.dead_letter_topic = dead_letter_topic
        self.backoff = backoff
        self.sleep = sleep
        self.clock = clock
        self.operator_wait_s = operator_wait_s
        self.never_wait_s = never_wait_s
        self.max_dead_letter_bytes = max_dead_letter_bytes
        self.attempts = attempts
        self.telemetry: Telemetry = telemetry if telemetry is not None else NullTelemetry()
        self.stats = DeliveryStats()

    @property
    def failing(self) -> str | None:
        """Why records are refused now (for ``/readyz``), or None."""
        return self.stats.why if self.stats.failing else None

    async def deliver(self, records: Sequence[OutRecord]) -> None:
        """Return once each record is acknowledged or dead-lettered (see the module docstring)."""
        async for _ in self.sending(records):
            pass

    async def sending(self, records: Sequence[OutRecord]) -> AsyncIterator[list[int]]:
        """:meth:`deliver`, saying after each attempt which positions of ``records`` are settled.

        Settled: acknowledged, or dead-lettered for good. The last list makes
        every position settled; a caller can release each item as soon as its
        own records are.
        """
        if not records:
            return
        pending = list(range(len(records)))
        first_refused: dict[int, float] = {}
        last: DeliveryError | None = None
        async for _ in self.backoff.attempts(self.sleep, limit=self.attempts):
            assert self.sink is not None, "the deliverer needs a started sink"
            try:
                await self.sink.send([records[i] for i in pending])
            except DeliveryError as exc:
                last = exc
                refused = {pending[j]: r for j, r in exc.refusals(len(pending)).items()}
            else:
                refused = {}
            kept: list[int] = []
            settled = [i for i in pending if i not in refused]
            now = self.clock()
            for position, refusal in sorted(refused.items()):
                record = records[position]
                self.telemetry.event(
                    DeliveryRefused(record.kind.value, refusal.reason, refusal.retriable)
                )
                waited = now - first_refused.setdefault(position, now)
                if (refusal.reason in NEVER and waited >= self.never_wait_s) or (
                    refusal.reason in OPERATOR and waited >= self.operator_wait_s
                ):
                    await self._undeliverable(record, refusal)
                    settled.append(position)
                    continue
                kept.append(position)
            if settled:
                yield sorted(settled)
            if not kept:
                self._recovered()
                return
            self._refused(records[kept[0]], refused[kept[0]], len(kept), len(pending))
            self.stats.refused = _write_refusals(
                (records[i].topic, refused[i].reason) for i in kept
            )
            pending = kept
        raise DeliveryError(
            f"{len(pending)} records were not acknowledged after {self.attempts} attempts: {last}"
        ) from last

    async def dead_letter(
        self, record: OutRecord, reason: str, detail: str, extra: Sequence[tuple[str, bytes]] = ()
    ) -> None:
        """Send ``record`` (an input record, or an output that can never be written) as a dead letter."""
        headers = (
            (DLQ_REASON, reason.encode()),
            (DLQ_DETAIL, detail[:1000].encode("utf-8", "replace")),
            *extra,
        )
        letter = OutRecord(
            RecordKind.DEAD_LETTER, self.dead_letter_topic, record.key, record.value, headers
        )
        if record.value is not None and len(record.value) > self.max_dead_letter_bytes:
            letter = _without_value(letter)
        await self._send_letter(letter)

    async def _undeliverable(self, record: OutRecord, refusal: Refusal) -> None:
        if record.kind is RecordKind.DEAD_LETTER:
            if refusal.reason == "too_large" and record.value:
                await self._send_letter(_without_value(record))
                return
            self.stats.lost += 1
            self.telemetry.event(DeadLettered(record.kind.value, refusal.reason, delivered=False))
            log.error(
                "a dead letter for topic %s was refused for good (%s: %s); it is lost",
                record.topic,
                refusal.reason,
                refusal.detail,
            )
            return
        log.warning(
            "a %s record for topic %s can never be written (%s: %s); it goes to %s",
            record.kind.value,
            record.topic,
            refusal.reason,
            refusal.detail,
            self.dead_letter_topic,
        )
        self.stats.dead_lettered += 1
        self.telemetry.event(DeadLettered(record.kind.value, refusal.reason, delivered=True))
        await self.dead_letter(
            record,
            f"undeliverable_{refusal.reason}",
            refusal.detail,
            ((DLQ_TARGET, record.topic.encode()), (DLQ_KIND, record.kind.value.encode())),
        )

    async def _send_letter(self, letter: OutRecord) -> None:
        # Through the same loop: a dead letter refused for good is handled in _undeliverable.
        await self.deliver([letter])

    def _refused(self, record: OutRecord, refusal: Refusal, count: int, sent: int) -> None:
        if refusal.reason in OPERATOR:
            why = f"Kafka refuses {_OPERATION[refusal.reason]} on topic {record.topic}"
        else:
            why = f"Kafka does not acknowledge records ({refusal.reason}: {refusal.detail})"
        why = f"{why}; {count} of {sent} records waiting"
        changed = why != self.stats.why
        self.stats.failing, self.stats.why = True, why[:300]
        if changed:
            log.warning("producing records failed: %s; retrying", self.stats.why)

    def _recovered(self) -> None:
        if self.stats.failing:
            log.info("Kafka acknowledges records again")
            self.stats.failing, self.stats.why = False, ""
        self.stats.refused = ()


def _write_refusals(refused: Iterable[tuple[str, str]]) -> tuple[AccessRefused, ...]:
    """Each topic whose records wait on a WRITE ACL, once, in order of topic."""
    topics = sorted({topic for topic, reason in refused if reason == "not_authorized"})
    return tuple(
        AccessRefused(
            "topic",
            topic,
            "WRITE",
            f"Kafka refuses WRITE on topic {topic} (not authorised; grant the ACL)",
        )
        for topic in topics
    )


def _without_value(letter: OutRecord) -> OutRecord:
    size = len(letter.value or b"")
    return OutRecord(
        letter.kind,
        letter.topic,
        letter.key,
        None,
        (*letter.headers, (DLQ_VALUE_DROPPED, str(size).encode())),
    )
