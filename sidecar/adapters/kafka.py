"""The broker protocols on Kafka: the span consumer, the producer, the labels consumer.

The consumer reads the spans topic and, when ``kafka.logs_topic`` is set,
the logs topic beside it, in one group with the range assignor
(``RangePartitionAssignor``; aiokafka's default is round robin): for each
topic it hands member k the k-th range of partitions, members sorted by id,
so with equal partition counts partition i of both topics lands on the same
member, which is what lets a trace's spans and log records meet (the Collector
partitions both by trace id). Unequal counts break that; :meth:`KafkaSource.start`
logs an error naming both counts. The consumer runs with ``enable_auto_commit=False``; offsets are committed by
the service from :class:`~sidecar.ingest.offsets.OffsetTracker`, each with metadata
(:mod:`sidecar.ingest.handover`) that the next owner reads on assignment. A
rebalance listener lets the service commit and drop a partition's buffered
traces on revoke. aiokafka errors are wrapped:
:class:`~sidecar.errors.SourceError` when the broker cannot be reached,
:class:`~sidecar.errors.DeliveryError` when a send was not acknowledged (see
:mod:`sidecar.ports`).

The producer is idempotent. A batch the broker refused (record too large,
topic deleted, not authorised) leaves an idempotent producer's sequence
numbers behind the broker's, and every later send to that partition fails
(``OutOfOrderSequenceNumber``) even once the cause is gone. So a producer that
failed a send is replaced by a new one (new producer id) before the next
send; the service retries with the offsets held, and recovers by itself once
the topic is writable again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import KafkaError
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.structs import OffsetAndMetadata

from sidecar.errors import DeliveryError, PartialDelivery, SourceError
from sidecar.ports import RebalanceListener, Record
from sidecar.settings import KafkaSettings

__all__ = ["KafkaLabelSource", "KafkaSink", "KafkaSource"]

log = logging.getLogger(__name__)


def _security(settings: KafkaSettings) -> dict[str, object]:
    options: dict[str, object] = {"security_protocol": settings.security_protocol}
    if settings.sasl_mechanism:
        options["sasl_mechanism"] = settings.sasl_mechanism
        options["sasl_plain_username"] = settings.sasl_username
        options["sasl_plain_password"] = settings.sasl_password
    return options


# The same security options for every client of the cluster (also sidecar.adapters.kafka_history).
security_options = _security


def _unreachable(settings: KafkaSettings, exc: KafkaError) -> SourceError:
    return SourceError(
        f"cannot reach Kafka at {settings.bootstrap_servers}: {exc}; "
        "check kafka.bootstrap_servers (SIDECAR_KAFKA__BOOTSTRAP_SERVERS) and the network"
    )


async def _stop(client: AIOKafkaConsumer | AIOKafkaProducer) -> None:
    try:
        await client.stop()
    except KafkaError as exc:
        raise SourceError(f"leaving Kafka failed: {exc}") from exc


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, listener: RebalanceListener) -> None:
        self._listener = listener

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._listener.on_revoked({tp.partition for tp in revoked})

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self._listener.on_assigned({tp.partition for tp in assigned})


class KafkaSource:
    """Consumer-group reader of the spans and logs topics with manual commits (a ``Source``)."""

    def __init__(self, settings: KafkaSettings) -> None:
        self._settings = settings
        self._logs_topic = settings.logs_topic or None
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=settings.bootstrap_servers,
            group_id=settings.group_id,
            client_id=settings.client_id,
            enable_auto_commit=False,
            auto_offset_reset=settings.auto_offset_reset,
            max_poll_records=settings.max_poll_records,
            session_timeout_ms=settings.session_timeout_ms,
            heartbeat_interval_ms=settings.heartbeat_interval_ms,
            # Co-partitioning: partition i of every topic to the same member.
            partition_assignment_strategy=(RangePartitionAssignor,),
            **_security(settings),
        )
        self._paused = False

    @property
    def topics(self) -> list[str]:
        return [self._settings.topic, *([self._logs_topic] if self._logs_topic else [])]

    async def start(self, listener: RebalanceListener) -> None:
        try:
            await self._consumer.start()
        except KafkaError as exc:
            raise _unreachable(self._settings, exc) from exc
        if self._logs_topic:
            await self._check_copartitioned()
        self._consumer.subscribe(self.topics, listener=_Listener(listener))

    async def _check_copartitioned(self) -> None:
        """Log an error when the two topics differ in partition count (or one is missing)."""
        # The public topics() fetches the same metadata but keeps only the names.
        try:
            cluster = await self._consumer._client.fetch_all_metadata()
        except KafkaError as exc:
            log.warning("could not read the topics' partition counts: %s", exc)
            return
        spans = cluster.partitions_for_topic(self._settings.topic) or set()
        logs = cluster.partitions_for_topic(self._logs_topic or "") or set()
        if len(spans) != len(logs):
            log.error(
                "topic %s has %d partitions and topic %s has %d: they must be equal, or a "
                "trace's log records reach another replica than its spans and their content "
                "is lost (give both topics the same partition count; kafka.logs_topic: '' "
                "turns the logs input off)",
                self._settings.topic,
                len(spans),
                self._logs_topic,
                len(logs),
            )

    async def stop(self) -> None:
        await _stop(self._consumer)

    async def fetch(self) -> list[Record]:
        batches = await self._consumer.getmany(
            timeout_ms=self._settings.fetch_timeout_ms, max_records=self._settings.max_poll_records
        )
        records: list[Record] = []
        for tp, messages in batches.items():
            records.extend(
                Record(tp.partition, m.offset, m.key, m.value, tp.topic) for m in messages
            )
        return records

    def assigned(self) -> set[int]:
        return {
            tp.partition for tp in self._consumer.assignment() if tp.topic == self._settings.topic
        }

    def partition_count(self) -> int | None:
        partitions = self._consumer.partitions_for_topic(self._settings.topic)
        return len(partitions) if partitions else None

    def lag(self, next_offsets: Mapping[int, int]) -> dict[int, int]:
        lags: dict[int, int] = {}
        for tp in self._consumer.assignment():
            if tp.topic != self._settings.topic:
                continue
            highwater = self._consumer.highwater(tp)
            if highwater is not None and tp.partition in next_offsets:
                lags[tp.partition] = max(0, highwater - next_offsets[tp.partition])
        return lags

    async def commit(
        self,
        offsets: Mapping[int, int],
        metadata: Mapping[int, str] | None = None,
        log_offsets: Mapping[int, int] | None = None,
    ) -> bool:
        """Commit both topics at once; False (logged) when the group refused it (rebalancing)."""
        assigned = self._consumer.assignment()
        notes = metadata or {}
        to_commit = {
            tp: OffsetAndMetadata(o, notes.get(p, ""))
            for p, o in offsets.items()
            if (tp := TopicPartition(self._settings.topic, p)) in assigned
        }
        if self._logs_topic:
            to_commit.update(
                (tp, OffsetAndMetadata(o, ""))
                for p, o in (log_offsets or {}).items()
                if (tp := TopicPartition(self._logs_topic, p)) in assigned
            )
        if not to_commit:
            return False
        try:
            await self._consumer.commit(to_commit)
        except KafkaError as exc:
            # Not fatal: the offsets are committed on the next round or by the next owner.
            log.warning("offset commit refused (%s); will retry", exc)
            return False
        return True

    async def committed_metadata(self, partitions: set[int]) -> dict[int, str]:
        """Metadata of the group's committed offsets; {} (logged) when it cannot be fetched."""
        tps = [TopicPartition(self._settings.topic, p) for p in partitions]
        # aiokafka's public committed() returns the offset only; its coordinator has both.
        coordinator = self._consumer._coordinator
        try:
            found = await asyncio.wait_for(
                coordinator.fetch_committed_offsets(tps),
                self._settings.session_timeout_ms / 1000,
            )
        except (KafkaError, TimeoutError) as exc:
            log.warning("reading the committed offsets' metadata failed (%s)", exc)
            return {}
        return {tp.partition: meta.metadata or "" for tp, meta in found.items()}

    def pause(self) -> None:
        if not self._paused:
            self._consumer.pause(*self._consumer.assignment())
            self._paused = True

    def resume(self) -> None:
        if self._paused:
            self._consumer.resume(*self._consumer.assignment())
            self._paused = False

    @property
    def paused(self) -> bool:
        return self._paused


class KafkaSink:
    """Producer for verdict records and dead letters; a send returns once acknowledged (acks=all).

    :meth:`send_verdicts` sends many verdict records at once (one produce batch
    per partition) and says which were refused.

    A producer that failed a send is replaced before the next one (see the
    module docstring). ``producer`` builds producers (the default: idempotent
    aiokafka producers from ``settings``); tests may pass their own.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        producer: Callable[[], AIOKafkaProducer] | None = None,
        stop_timeout_s: float = 5.0,
    ) -> None:
        self._settings = settings
        self._new_producer = producer or (lambda: _idempotent_producer(settings))
        self._producer = self._new_producer()
        self._stop_timeout_s = stop_timeout_s
        # The producer generation that failed a send, until it is replaced.
        self._generation = 0
        self._failed: int | None = None
        self._renewing = asyncio.Lock()
        self.renewals = 0
        # The partitioner aiokafka's producer uses for keyed records (murmur2 of the key).
        self._partitioner = DefaultPartitioner()

    async def start(self) -> None:
        try:
            await self._producer.start()
        except KafkaError as exc:
            raise _unreachable(self._settings, exc) from exc

    async def stop(self) -> None:
        await _stop(self._producer)

    async def send_verdict(self, trace_id: str, payload: bytes) -> None:
        if not self._settings.verdict_topic:
            return
        await self._send(self._settings.verdict_topic, payload, key=trace_id.encode("ascii"))

    async def send_verdicts(self, records: Sequence[tuple[str, bytes]]) -> None:
        """Verdict records in one produce batch per partition, all awaited together.

        Each record goes to the partition the producer's default partitioner
        gives its key (the trace id), as :meth:`send_verdict` would; one future
        per partition batch instead of one send awaited per record.
        """
        topic = self._settings.verdict_topic
        if not topic or not records:
            return
        await self._renew_if_failed()
        generation, producer = self._generation, self._producer
        sent: list[tuple[list[int], asyncio.Future[object]]] = []
        unsent: list[int] = []
        try:
            partitions = sorted(await producer.partitions_for(topic))
            open_batches: dict[int, tuple[list[int], Any]] = {}
            for i, (trace_id, payload) in enumerate(records):
                key = trace_id.encode("ascii")
                partition = self._partitioner(key, partitions, partitions)
                indices, batch = open_batches.get(partition) or ([], producer.create_batch())
                # A batch takes its first record whatever its size; None means it is full.
                if batch.append(key=key, value=payload, timestamp=None) is None:
                    future = await producer.send_batch(batch, topic, partition=partition)
                    sent.append((indices, future))
                    indices, batch = [], producer.create_batch()
                    batch.append(key=key, value=payload, timestamp=None)
                indices.append(i)
                open_batches[partition] = (indices, batch)
            for partition, (indices, batch) in open_batches.items():
                sent.append((indices, await producer.send_batch(batch, topic, partition=partition)))
        except KafkaError as exc:
            self._failed = generation
            queued = {i for indices, _ in sent for i in indices}
            unsent = [i for i in range(len(records)) if i not in queued]
            error: BaseException | None = exc
        else:
            error = None
        for indices, future in sent:
            try:
                await future
            except KafkaError as exc:
                self._failed = generation
                unsent.extend(indices)
                error = exc
        if unsent:
            raise PartialDelivery(f"{type(error).__name__}: {error}", sorted(unsent))

    async def send_review(self, topic: str, trace_id: str, payload: bytes) -> None:
        await self._send(topic, payload, key=trace_id.encode("ascii"))

    async def send_dead_letter(self, record: Record, reason: str, detail: str) -> None:
        headers = [
            ("sidecar.dlq.reason", reason.encode()),
            ("sidecar.dlq.detail", detail[:1000].encode("utf-8", "replace")),
            ("sidecar.source.topic", (record.topic or self._settings.topic).encode()),
            ("sidecar.source.partition", str(record.partition).encode()),
            ("sidecar.source.offset", str(record.offset).encode()),
        ]
        await self._send(
            self._settings.dead_letter_topic, record.value or b"", key=record.key, headers=headers
        )

    async def _send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None,
        headers: list[tuple[str, bytes]] | None = None,
        partition: int | None = None,
    ) -> None:
        await self._renew_if_failed()
        generation, producer = self._generation, self._producer
        try:
            await producer.send_and_wait(
                topic, value, key=key, headers=headers, partition=partition
            )
        except KafkaError as exc:
            self._failed = generation
            raise DeliveryError(f"{type(exc).__name__}: {exc}") from exc

    async def _renew_if_failed(self) -> None:
        """Replace a producer that failed a send (once, however many sends saw it fail)."""
        if self._failed != self._generation:
            return
        async with self._renewing:
            if self._failed != self._generation:
                return
            old, self._producer = self._producer, self._new_producer()
            self._generation += 1
            self.renewals += 1
            log.warning("replacing the Kafka producer after a failed send")
            try:
                await asyncio.wait_for(old.stop(), self._stop_timeout_s)
            except (KafkaError, TimeoutError) as exc:
                log.warning("stopping the failed producer: %s", exc)
            try:
                await self._producer.start()
            except KafkaError as exc:
                self._failed = self._generation
                raise DeliveryError(f"starting a new producer failed: {exc}") from exc


def _idempotent_producer(settings: KafkaSettings) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap_servers,
        client_id=f"{settings.client_id}-producer",
        acks="all",
        enable_idempotence=True,
        linger_ms=5,
        **_security(settings),
    )


class KafkaLabelSource:
    """Reads human labels (JSON) from the labels topic; commits after each handled batch."""

    def __init__(self, settings: KafkaSettings, topic: str) -> None:
        self._settings = settings
        self._consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=settings.bootstrap_servers,
            group_id=f"{settings.group_id}.labels",
            client_id=f"{settings.client_id}-labels",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            **_security(settings),
        )

    async def start(self) -> None:
        try:
            await self._consumer.start()
        except KafkaError as exc:
            raise _unreachable(self._settings, exc) from exc

    async def stop(self) -> None:
        await _stop(self._consumer)

    async def fetch(self, timeout_ms: int = 500) -> list[bytes]:
        batches = await self._consumer.getmany(timeout_ms=timeout_ms, max_records=500)
        return [m.value for messages in batches.values() for m in messages if m.value is not None]

    async def commit(self) -> None:
        try:
            await self._consumer.commit()
        except KafkaError as exc:
            log.warning("labels offset commit refused (%s); will retry", exc)
