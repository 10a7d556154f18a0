"""The deliverer against the real cluster: what Kafka refuses for good ends in the dead-letter topic.

The service's sink (``KafkaSink``) and deliverer, producing as the cluster's
``producer`` user over SASL_SSL, with the waits shortened to seconds:

- a record bound for a topic the user may not write (no WRITE ACL) is retried
  while ``Deliverer.failing`` names the topic, then dead-lettered with the
  reason and the topic it was bound for; the record beside it, on a topic the
  user may write, is delivered;
- a record larger than the topic's ``max.message.bytes`` is dead-lettered
  (reason ``undeliverable_too_large``), not retried for ever;
- an ACL granted during the wait delivers the record where it was bound.

Each test makes its own topics (auto-create is off on the cluster).
"""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from sidecar.adapters.kafka import KafkaSink
from sidecar.engine.deliver import DLQ_KIND, DLQ_REASON, DLQ_TARGET, Deliverer
from sidecar.ports import OutRecord, RecordKind
from sidecar.retry import Backoff
from sidecar.settings import KafkaSettings
from tests.integration.cluster import cluster, create_topics, grant

pytestmark = [pytest.mark.kafka]


def producer() -> AIOKafkaProducer:
    return AIOKafkaProducer(
        acks="all",
        enable_idempotence=True,
        linger_ms=5,
        request_timeout_ms=10_000,
        **cluster().client_kwargs("producer"),
    )


def deliverer(sink: KafkaSink, dead_letters: str) -> Deliverer:
    return Deliverer(
        sink,
        dead_letter_topic=dead_letters,
        backoff=Backoff(0.2, 1.0, jitter=0.0),
        sleep=asyncio.sleep,
        clock=time.monotonic,
        operator_wait_s=4.0,
        never_wait_s=2.0,
    )


async def records_of(topic: str) -> list[tuple[bytes, dict[str, str]]]:
    """(value, headers) of every record of ``topic`` up to its end, read as the admin."""
    consumer = AIOKafkaConsumer(enable_auto_commit=False, **cluster().client_kwargs("admin"))
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(3)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        found: list[tuple[bytes, dict[str, str]]] = []
        deadline = time.monotonic() + 60
        while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
            assert time.monotonic() < deadline, f"could not read {topic} back within 60 s"
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                found.extend(
                    (bytes(r.value or b""), {k: v.decode() for k, v in r.headers}) for r in batch
                )
    finally:
        await consumer.stop()
    return found


async def started_sink() -> KafkaSink:
    settings = KafkaSettings(bootstrap_servers=cluster().bootstrap)
    sink = KafkaSink(settings, producer=producer)
    await sink.start()
    return sink


async def test_a_record_the_user_may_not_write_is_dead_lettered_and_its_neighbour_delivered(
    topic_prefix: str,
) -> None:
    verdicts, reviews, dlq = (f"{topic_prefix}.{n}" for n in ("verdicts", "reviews", "dlq"))
    await create_topics([verdicts, reviews, dlq])
    for topic in (verdicts, dlq):
        await grant("producer", "WRITE", "TOPIC", topic)
        await grant("producer", "DESCRIBE", "TOPIC", topic)
    sink = await started_sink()
    deliver = deliverer(sink, dlq)
    seen: list[str | None] = []

    async def watch() -> None:
        while True:
            seen.append(deliver.failing)
            await asyncio.sleep(0.2)

    watcher = asyncio.create_task(watch())
    try:
        await asyncio.wait_for(
            deliver.deliver(
                [
                    OutRecord(RecordKind.VERDICT, verdicts, b"t1", b'{"verdict": 1}'),
                    OutRecord(RecordKind.REVIEW, reviews, b"t1", b'{"review": 1}'),
                ]
            ),
            60,
        )
    finally:
        watcher.cancel()
        await sink.stop()

    assert await records_of(verdicts) == [(b'{"verdict": 1}', {})]
    ((value, headers),) = await records_of(dlq)
    assert value == b'{"review": 1}'
    assert headers[DLQ_REASON] == "undeliverable_not_authorized"
    assert headers[DLQ_TARGET] == reviews
    assert headers[DLQ_KIND] == "review"
    # While it waited, readiness named the topic and the refused operation.
    assert any(why is not None and reviews in why and "not authorised" in why for why in seen)
    assert deliver.failing is None
    assert deliver.stats.dead_lettered == 1
    assert deliver.stats.lost == 0


async def test_a_record_over_the_topics_size_limit_is_dead_lettered(topic_prefix: str) -> None:
    verdicts, dlq = f"{topic_prefix}.verdicts", f"{topic_prefix}.dlq"
    await create_topics([verdicts], configs={"max.message.bytes": "2048"})
    await create_topics([dlq])
    for topic in (verdicts, dlq):
        await grant("producer", "WRITE", "TOPIC", topic)
    sink = await started_sink()
    deliver = deliverer(sink, dlq)
    big = b"x" * 20_000
    try:
        await asyncio.wait_for(
            deliver.deliver(
                [
                    OutRecord(RecordKind.VERDICT, verdicts, b"small", b"ok"),
                    OutRecord(RecordKind.VERDICT, verdicts, b"big", big),
                ]
            ),
            60,
        )
    finally:
        await sink.stop()

    assert [value for value, _ in await records_of(verdicts)] == [b"ok"]
    ((value, headers),) = await records_of(dlq)
    assert value == big
    assert headers[DLQ_REASON] == "undeliverable_too_large"
    assert headers[DLQ_TARGET] == verdicts
    assert deliver.stats.dead_lettered == 1


async def test_an_acl_granted_during_the_wait_delivers_where_the_record_was_bound(
    topic_prefix: str,
) -> None:
    verdicts, dlq = f"{topic_prefix}.verdicts", f"{topic_prefix}.dlq"
    await create_topics([verdicts, dlq])
    await grant("producer", "WRITE", "TOPIC", dlq)
    sink = await started_sink()
    deliver = deliverer(sink, dlq)
    deliver.operator_wait_s = 120.0
    try:
        sending = asyncio.create_task(
            deliver.deliver([OutRecord(RecordKind.VERDICT, verdicts, b"t9", b"late")])
        )
        deadline = time.monotonic() + 30
        while deliver.failing is None:
            assert time.monotonic() < deadline, "the refusal never showed in Deliverer.failing"
            await asyncio.sleep(0.1)
        await grant("producer", "WRITE", "TOPIC", verdicts)
        await asyncio.wait_for(sending, 60)
    finally:
        await sink.stop()

    assert [value for value, _ in await records_of(verdicts)] == [b"late"]
    assert await records_of(dlq) == []
    assert deliver.failing is None
    assert deliver.stats.dead_lettered == 0
