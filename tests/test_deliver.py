"""The deliverer on its own: retriable refusals wait, fatal ones end in the dead-letter topic.

Time is a fake clock moved by the fake sleep, so the waits of ``never_wait_s`` and
``operator_wait_s`` pass without sleeping; the sink is ``tests.fakes.MemorySink``,
which refuses records the way the Kafka sink reports them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from sidecar.engine.deliver import (
    DLQ_KIND,
    DLQ_REASON,
    DLQ_TARGET,
    DLQ_VALUE_DROPPED,
    Deliverer,
)
from sidecar.errors import DeliveryError, Refusal
from sidecar.ports import OutRecord, RecordKind
from sidecar.retry import Backoff
from sidecar.telemetry import DeadLettered, DeliveryRefused, RecordingTelemetry
from tests.fakes import MemorySink

DLQ = "eval_dead_letter"


class Clock:
    """A clock that only the deliverer's sleeps move."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []
        # Called before each sleep: what a probe would see while the deliverer waits.
        self.watch: Callable[[], object] = lambda: None
        self.seen: list[object] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.seen.append(self.watch())
        self.now += seconds
        await asyncio.sleep(0)


def deliverer(
    sink: MemorySink, clock: Clock, *, attempts: int | None = None, max_letter: int = 900_000
) -> tuple[Deliverer, RecordingTelemetry]:
    telemetry = RecordingTelemetry()
    return (
        Deliverer(
            sink,
            dead_letter_topic=DLQ,
            backoff=Backoff(0.5, 8.0, jitter=0.0),
            sleep=clock.sleep,
            clock=clock,
            operator_wait_s=900.0,
            never_wait_s=60.0,
            max_dead_letter_bytes=max_letter,
            attempts=attempts,
            telemetry=telemetry,
        ),
        telemetry,
    )


def review(key: str, size: int = 10) -> OutRecord:
    return OutRecord(RecordKind.REVIEW, "eval_review", key.encode(), b"r" * size)


def verdict(key: str) -> OutRecord:
    return OutRecord(RecordKind.VERDICT, "eval_verdicts", key.encode(), b"{}")


def headers(record: OutRecord) -> dict[str, str]:
    return {name: value.decode() for name, value in record.headers}


async def test_an_oversized_review_record_goes_to_the_dead_letter_topic_after_the_wait() -> None:
    sink, clock = MemorySink(), Clock()
    sink.fail(10_000, reason="too_large", kinds=[RecordKind.REVIEW])
    deliver, telemetry = deliverer(sink, clock)
    start = clock.now

    settled = [s async for s in deliver.sending([verdict("t1"), review("t1", 2_000)])]

    # The verdict is acknowledged at once; the review only once the wait has passed.
    assert settled[0] == [0]
    assert settled[-1] == [1]
    assert 60.0 <= clock.now - start < 60.0 + 8.0
    assert [key for key, _ in sink.verdicts] == ["t1"]
    assert sink.reviews == []
    (letter,) = sink.letters
    assert letter.topic == DLQ
    assert letter.key == b"t1"
    assert letter.value == b"r" * 2_000
    assert headers(letter)[DLQ_REASON] == "undeliverable_too_large"
    assert headers(letter)[DLQ_TARGET] == "eval_review"
    assert headers(letter)[DLQ_KIND] == "review"
    assert deliver.stats.dead_lettered == 1
    assert deliver.failing is None
    assert DeadLettered("review", "too_large", delivered=True) in telemetry.events
    assert all(
        not e.retriable for e in telemetry.of(DeliveryRefused) if isinstance(e, DeliveryRefused)
    )


async def test_a_record_refused_as_unauthorised_names_the_topic_then_is_dead_lettered() -> None:
    sink, clock = MemorySink(), Clock()
    sink.fail(10_000, reason="not_authorized", kinds=[RecordKind.VERDICT])
    deliver, _ = deliverer(sink, clock)

    clock.watch = lambda: deliver.failing

    await deliver.deliver([verdict("t2"), verdict("t3")])

    # While it waited, readiness said which operation on which topic is refused.
    failing = str(clock.seen[0])
    assert "refuses WRITE (not authorised) on topic eval_verdicts" in failing
    assert "2 of 2 records waiting" in failing
    assert [headers(letter)[DLQ_REASON] for letter in sink.letters] == [
        "undeliverable_not_authorized",
        "undeliverable_not_authorized",
    ]
    assert sink.verdicts == []
    assert clock.now - 1000.0 >= 900.0
    assert deliver.failing is None


async def test_an_acl_granted_within_the_wait_delivers_the_record_and_clears_readiness() -> None:
    sink, clock = MemorySink(), Clock()
    sink.fail(5, reason="not_authorized")
    deliver, _ = deliverer(sink, clock)

    await deliver.deliver([verdict("t4")])

    assert [key for key, _ in sink.verdicts] == ["t4"]
    assert sink.letters == []
    assert deliver.failing is None
    assert deliver.stats.dead_lettered == 0


async def test_retriable_refusals_are_retried_for_as_long_as_it_takes() -> None:
    sink, clock = MemorySink(), Clock()
    sink.fail(150)  # a broker away: retriable
    deliver, _ = deliverer(sink, clock)

    await deliver.deliver([verdict("t5")])

    assert [key for key, _ in sink.verdicts] == ["t5"]
    assert sink.letters == []
    # Far past both waits, and still not dead-lettered: retriable refusals never are.
    assert clock.now - 1000.0 > 900.0
    assert max(clock.sleeps) == 8.0


async def test_with_an_attempt_limit_retriable_refusals_end_in_a_delivery_error() -> None:
    sink, clock = MemorySink(), Clock()
    sink.fail(100)
    deliver, _ = deliverer(sink, clock, attempts=3)

    with pytest.raises(DeliveryError, match="1 records were not acknowledged after 3 attempts"):
        await deliver.deliver([verdict("t6")])
    assert sink.letters == []


async def test_a_dead_letter_too_large_for_the_topic_is_sent_without_its_value() -> None:
    sink, clock = MemorySink(), Clock()
    deliver, _ = deliverer(sink, clock, max_letter=100)
    sink.fail(10_000, reason="too_large", kinds=[RecordKind.REVIEW])
    await deliver.deliver([review("t7", 5_000)])

    (letter,) = sink.letters
    assert letter.value is None
    assert headers(letter)[DLQ_VALUE_DROPPED] == "5000"
    assert headers(letter)[DLQ_TARGET] == "eval_review"


async def test_a_dead_letter_refused_for_good_is_counted_as_lost_not_retried_for_ever() -> None:
    sink, clock = MemorySink(), Clock()
    sink.fail(10_000, reason="not_authorized")  # every kind, the dead-letter topic too
    deliver, telemetry = deliverer(sink, clock)

    await deliver.deliver([verdict("t8")])

    assert sink.letters == []
    assert sink.verdicts == []
    assert deliver.stats.lost == 1
    assert DeadLettered("dead_letter", "not_authorized", delivered=False) in telemetry.events


async def test_only_the_refused_records_of_a_batch_are_sent_again() -> None:
    class Picky(MemorySink):
        def __init__(self) -> None:
            super().__init__()
            self.batches: list[list[bytes | None]] = []

        async def send(self, records: object) -> None:
            batch = list(records)  # type: ignore[call-overload]
            self.batches.append([r.key for r in batch])
            refused = {
                i: Refusal(True, "unavailable", "leader moving")
                for i, r in enumerate(batch)
                if r.key == b"b" and len(self.batches) < 3
            }
            for i, r in enumerate(batch):
                if i not in refused:
                    await self._take(r)
            if refused:
                raise DeliveryError("some refused", refused)

    sink, clock = Picky(), Clock()
    deliver, _ = deliverer(sink, clock)

    await deliver.deliver([verdict("a"), verdict("b"), verdict("c")])

    assert sink.batches == [[b"a", b"b", b"c"], [b"b"], [b"b"]]
    assert sorted(key for key, _ in sink.verdicts) == ["a", "b", "c"]
