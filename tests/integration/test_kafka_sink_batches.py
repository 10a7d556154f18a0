"""Records sent together (``KafkaSink.send``) land as one at a time would.

On the real broker: every record is acknowledged, each on the partition the
producer's default partitioner gives its key (the trace id), in the order
sent within its partition, with more records than fit one produce batch.
"""

from __future__ import annotations

import uuid

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner

from sidecar.adapters.kafka import KafkaSink
from sidecar.ports import OutRecord, RecordKind
from sidecar.settings import KafkaSettings
from tests.builders import trace_id
from tests.integration.harness import consume_all, create_topics

pytestmark = [pytest.mark.kafka]


def verdicts(topic: str, records: list[tuple[str, bytes]]) -> list[OutRecord]:
    return [OutRecord(RecordKind.VERDICT, topic, key.encode(), value) for key, value in records]


async def new_topic(bootstrap: str, prefix: str, partitions: int) -> str:
    topic = f"{prefix}.{uuid.uuid4().hex[:8]}"
    await create_topics(bootstrap, [topic], partitions=partitions)
    return topic


async def test_records_sent_together_land_where_single_sends_would(kafka_bootstrap: str) -> None:
    topic = await new_topic(kafka_bootstrap, "sink-batches", 3)
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap, verdict_topic=topic)
    sink = KafkaSink(settings)
    await sink.start()
    # About 2 KB each: 16 KB produce batches take 7, so 60 per partition need several.
    records = [(trace_id(n), f'{{"n":{n},"pad":"{"x" * 2000}"}}'.encode()) for n in range(180)]
    try:
        await sink.send(verdicts(topic, records[:1]))
        await sink.send(verdicts(topic, records[1:]))
    finally:
        await sink.stop()

    got = await consume_all(kafka_bootstrap, topic, expect=len(records), settle=1.0)
    assert sorted((m.key.decode(), m.value) for m in got) == sorted(records)
    partitions = [0, 1, 2]
    partitioner = DefaultPartitioner()
    by_partition: dict[int, list[str]] = {}
    for message in got:
        key = message.key
        assert message.partition == partitioner(key, partitions, partitions), key
        by_partition.setdefault(message.partition, []).append(key.decode())
    for keys in by_partition.values():
        assert keys == sorted(keys)  # trace ids grow with n: the order sent
    assert len(by_partition) == 3


async def test_the_default_partitioner_is_the_producers(kafka_bootstrap: str) -> None:
    """The same key goes to the same partition through ``send_and_wait`` and the sink's ``send``."""
    topic = await new_topic(kafka_bootstrap, "sink-partitioner", 5)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    sink = KafkaSink(KafkaSettings(bootstrap_servers=kafka_bootstrap, verdict_topic=topic))
    await sink.start()
    try:
        single = {}
        for n in range(40):
            meta = await producer.send_and_wait(topic, b"single", key=trace_id(n).encode())
            single[trace_id(n)] = meta.partition
        await sink.send(verdicts(topic, [(trace_id(n), b"together") for n in range(40)]))
    finally:
        await producer.stop()
        await sink.stop()
    got = await consume_all(kafka_bootstrap, topic, expect=80, settle=1.0)
    together = {m.key.decode(): m.partition for m in got if m.value == b"together"}
    assert together == single
