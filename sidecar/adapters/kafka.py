"""The broker ports on Kafka (:mod:`sidecar.ports`): the group reader, the producer, the labels.

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
from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    CorruptRecordException,
    GroupAuthorizationFailedError,
    InvalidTopicError,
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    RecordTooLargeError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.structs import OffsetAndMetadata

from sidecar.adapters.kafka_security import not_authorized, security_options, start_client
from sidecar.adapters.workers import fair_share
from sidecar.errors import DeliveryError, Refusal, SourceError
from sidecar.ports import AccessRefused, OutRecord, Position, RebalanceListener, Record
from sidecar.settings import KafkaSettings
from sidecar.telemetry import ConsumerLag

__all__ = ["KafkaLabelSource", "KafkaSink", "KafkaSource", "refusal_of", "security_options"]

log = logging.getLogger(__name__)


async def _stop(client: AIOKafkaConsumer | AIOKafkaProducer) -> None:
    try:
        await client.stop()
    except KafkaError as exc:
        raise SourceError(f"leaving Kafka failed: {exc}") from exc


# Refused records: what no wait can fix, and what an operator must fix.
_NEVER: tuple[tuple[type[KafkaError], str], ...] = (
    (MessageSizeTooLargeError, "too_large"),
    (RecordTooLargeError, "too_large"),
    (RecordListTooLargeError, "too_large"),
    (CorruptRecordException, "invalid_record"),
    (InvalidTopicError, "invalid_record"),
)
_OPERATOR: tuple[tuple[type[KafkaError], str], ...] = (
    (TopicAuthorizationFailedError, "not_authorized"),
    (ClusterAuthorizationFailedError, "not_authorized"),
    (UnknownTopicOrPartitionError, "unknown_topic"),
)


def refusal_of(exc: BaseException) -> Refusal:
    """Why a send failed, in the deliverer's terms (see :mod:`sidecar.engine.deliver`)."""
    detail = f"{type(exc).__name__}: {exc}"
    for kind, reason in (*_NEVER, *_OPERATOR):
        if isinstance(exc, kind):
            return Refusal(False, reason, detail)
    if isinstance(exc, KafkaError) and not exc.retriable and type(exc).__name__ not in _TRANSIENT:
        # An error Kafka says will not go away by itself, of a kind not listed above:
        # waited on like an operator's, so a surprise never loses a record at once.
        return Refusal(False, "refused", detail)
    return Refusal(True, "unavailable", detail)


# aiokafka marks these not retriable, though a new attempt (with a new producer) succeeds.
_TRANSIENT = frozenset(
    {"KafkaTimeoutError", "OutOfOrderSequenceNumber", "IllegalStateError", "ProducerClosed"}
)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, source: KafkaSource, listener: RebalanceListener) -> None:
        self._source = source
        self._listener = listener

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        partitions = {tp.partition for tp in revoked}
        await self._listener.on_revoked(partitions)
        for partition in partitions:
            self._source.forget(partition)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        partitions = {tp.partition for tp in assigned}
        self._source.assignments += 1
        metadata = await self._source.committed_metadata(partitions) if partitions else {}
        await self._listener.on_assigned(partitions, metadata)


class KafkaSource:
    """Consumer-group reader of co-partitioned topics with manual commits (a ``RecordSource``).

    ``settings.topic`` is the first topic (the one whose commits carry
    metadata); ``settings.logs_topic``, when set, is read beside it.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        members: int = 1,
        fields: Mapping[str, str] | None = None,
    ) -> None:
        self._settings = settings
        self._logs_topic = settings.logs_topic or None
        # The setting that names each topic read, for the words of a refusal.
        self._fields = dict(fields or {})
        self._fields.setdefault(settings.topic, "kafka.topic")
        if self._logs_topic:
            self._fields.setdefault(self._logs_topic, "kafka.logs_topic")
        self.members = members
        self.assignments = 0
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
            **security_options(settings),
        )
        self._paused = False
        # Why the brokers refuse to let this consumer read (an ACL), until they no longer do.
        self.access_refused: AccessRefused | None = None
        self._warned: tuple[str, float] | None = None
        # The next offset to read per partition of the first topic, from what was fetched.
        self._positions: dict[int, int] = {}

    @property
    def topics(self) -> list[str]:
        return [self._settings.topic, *([self._logs_topic] if self._logs_topic else [])]

    async def start(self, listener: RebalanceListener) -> None:
        await start_client(self._consumer, self._settings)
        if self._logs_topic:
            await self._check_copartitioned()
        self._consumer.subscribe(self.topics, listener=_Listener(self, listener))
        if self.members > 1:
            await fair_share(
                assigned=self.assigned,
                partition_count=self.partition_count,
                assignments=lambda: self.assignments,
                members=self.members,
                timeout_s=self._settings.fair_share_wait_s,
                clock=asyncio.get_running_loop().time,
                sleep=asyncio.sleep,
            )

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
        try:
            batches = await self._consumer.getmany(
                timeout_ms=self._settings.fetch_timeout_ms,
                max_records=self._settings.max_poll_records,
            )
        except (GroupAuthorizationFailedError, TopicAuthorizationFailedError) as exc:
            # Nothing is read until an operator grants the ACL; then reading resumes.
            self.access_refused = _read_refusal(
                self._settings, exc, self._settings.group_id, self._fields
            )
            _warn_refused(self, self.access_refused)
            await asyncio.sleep(self._settings.fetch_timeout_ms / 1000)
            return []
        self.access_refused = _hidden(self._settings, self._consumer, self._fields)
        if self.access_refused is not None:
            _warn_refused(self, self.access_refused)
        records: list[Record] = []
        first = self._settings.topic
        for tp, messages in batches.items():
            records.extend(
                Record(tp.partition, m.offset, m.key, m.value, tp.topic, m.timestamp)
                for m in messages
            )
            if messages and tp.topic == first:
                self._positions[tp.partition] = messages[-1].offset + 1
        return records

    def forget(self, partition: int) -> None:
        self._positions.pop(partition, None)

    def assigned(self) -> set[int]:
        return {
            tp.partition for tp in self._consumer.assignment() if tp.topic == self._settings.topic
        }

    def partition_count(self) -> int | None:
        partitions = self._consumer.partitions_for_topic(self._settings.topic)
        return len(partitions) if partitions else None

    def lag(self) -> ConsumerLag:
        """Records between each assigned partition's fetch position and its end."""
        lags: dict[int, int] = {}
        for tp in self._consumer.assignment():
            if tp.topic != self._settings.topic:
                continue
            highwater = self._consumer.highwater(tp)
            position = self._positions.get(tp.partition)
            if highwater is not None and position is not None:
                lags[tp.partition] = max(0, highwater - position)
        return ConsumerLag(lags)

    async def commit(self, positions: Mapping[tuple[str, int], Position]) -> bool:
        """Commit every topic at once; False (logged) when the group refused it (rebalancing)."""
        assigned = self._consumer.assignment()
        to_commit = {
            tp: OffsetAndMetadata(p.offset, p.metadata)
            for (topic, partition), p in positions.items()
            if (tp := TopicPartition(topic, partition)) in assigned
        }
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


def _read_refusal(
    settings: KafkaSettings, exc: KafkaError, group: str, fields: Mapping[str, str]
) -> AccessRefused:
    if isinstance(exc, GroupAuthorizationFailedError):
        return AccessRefused(
            "group",
            group,
            "READ",
            not_authorized(settings, "READ", "group", group, "kafka.group_id"),
        )
    # aiokafka names the topic (a fetch) or a set of them (a commit).
    named = exc.args[0] if exc.args else ""
    found = sorted(named) if isinstance(named, set | frozenset) else [str(named)]
    topic = next((t for t in found if t in fields), next(iter(fields), "?"))
    return AccessRefused(
        "topic",
        topic,
        "READ",
        not_authorized(settings, "READ", "topic", topic, fields.get(topic, "kafka.topic")),
    )


def _hidden(
    settings: KafkaSettings, consumer: AIOKafkaConsumer, fields: Mapping[str, str]
) -> AccessRefused | None:
    """A topic read that the brokers no longer describe to this principal (no DESCRIBE,
    so no READ either): the group then has no partitions of it, and no fetch fails."""
    unauthorized = consumer._client.cluster.unauthorized_topics
    topic = next((t for t in fields if t in unauthorized), None)
    if topic is None:
        return None
    return AccessRefused(
        "topic",
        topic,
        "DESCRIBE",
        not_authorized(settings, "DESCRIBE", "topic", topic, fields[topic]),
    )


# A refusal that lasts is logged again after this many seconds.
_REFUSAL_LOG_INTERVAL_S = 30.0


def _warn_refused(holder: KafkaSource | KafkaLabelSource, refused: AccessRefused) -> None:
    why = refused.message
    now = asyncio.get_running_loop().time()
    last = holder._warned
    if last is None or last[0] != why or now - last[1] >= _REFUSAL_LOG_INTERVAL_S:
        log.warning("reading waits: %s", why)
        holder._warned = (why, now)


class KafkaSink:
    """Producer of :class:`~sidecar.ports.OutRecord` s; a send returns once acknowledged (acks=all).

    :meth:`send` sends many records at once (one produce batch per topic and
    partition, the partition by the producer's partitioner of the key unless
    the record names one) and says, per refused record, why.

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
        await start_client(self._producer, self._settings)

    async def stop(self) -> None:
        await _stop(self._producer)

    async def send(self, records: Sequence[OutRecord]) -> None:
        if not records:
            return
        await self._renew_if_failed()
        generation, producer = self._generation, self._producer
        refused: dict[int, Refusal] = {}
        sent: list[tuple[list[int], asyncio.Future[object]]] = []
        by_topic: dict[str, list[int]] = {}
        for i, record in enumerate(records):
            by_topic.setdefault(record.topic, []).append(i)
        for topic, indices in by_topic.items():
            try:
                await self._queue(producer, topic, records, indices, sent)
            except KafkaError as exc:
                # Waiting for room in the producer's queue is not a refusal: the producer
                # stays; anything else while queueing (no metadata, closed) renews it.
                if not isinstance(exc, KafkaTimeoutError):
                    self._failed = generation
                queued = {i for batch, _ in sent for i in batch}
                refusal = refusal_of(exc)
                refused.update((i, refusal) for i in indices if i not in queued)
        for indices, future in sent:
            try:
                await future
            except KafkaError as exc:
                self._failed = generation
                refusal = refusal_of(exc)
                refused.update((i, refusal) for i in indices)
        if refused:
            first = refused[min(refused)]
            raise DeliveryError(
                f"{len(refused)} of {len(records)} records refused ({first.detail})", refused
            )

    async def _queue(
        self,
        producer: AIOKafkaProducer,
        topic: str,
        records: Sequence[OutRecord],
        indices: Sequence[int],
        sent: list[tuple[list[int], asyncio.Future[object]]],
    ) -> None:
        """Queue ``records[indices]`` (all bound for ``topic``) in one batch per partition.

        Few records go one by one into the producer's own batches, which many
        concurrent senders share well; many go in batches of their own.
        """
        if len(indices) < _OWN_BATCHES:
            for i in indices:
                record = records[i]
                future = await producer.send(
                    topic,
                    record.value,
                    key=record.key,
                    partition=record.partition,
                    headers=list(record.headers) or None,
                )
                sent.append(([i], future))
            return
        partitions = sorted(await producer.partitions_for(topic))
        open_batches: dict[int, tuple[list[int], Any]] = {}
        for i in indices:
            record = records[i]
            partition = record.partition
            if partition is None:
                partition = self._partitioner(record.key, partitions, partitions)
            batch_indices, batch = open_batches.get(partition) or ([], producer.create_batch())
            # A batch takes its first record whatever its size; None means it is full.
            appended = batch.append(
                key=record.key, value=record.value, timestamp=None, headers=list(record.headers)
            )
            if appended is None:
                future = await producer.send_batch(batch, topic, partition=partition)
                sent.append((batch_indices, future))
                batch_indices, batch = [], producer.create_batch()
                batch.append(
                    key=record.key, value=record.value, timestamp=None, headers=list(record.headers)
                )
            batch_indices.append(i)
            open_batches[partition] = (batch_indices, batch)
        for partition, (batch_indices, batch) in open_batches.items():
            sent.append(
                (batch_indices, await producer.send_batch(batch, topic, partition=partition))
            )

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


# From this many records to one topic, a send builds its own batch per partition.
_OWN_BATCHES = 16


def _idempotent_producer(settings: KafkaSettings) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap_servers,
        client_id=f"{settings.client_id}-producer",
        acks="all",
        enable_idempotence=True,
        linger_ms=5,
        **security_options(settings),
    )


class KafkaLabelSource:
    """Reads human labels (JSON) from the labels topic; commits after each handled batch."""

    def __init__(self, settings: KafkaSettings, topic: str) -> None:
        self._settings = settings
        self._topic = topic
        self._consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=settings.bootstrap_servers,
            group_id=f"{settings.group_id}.labels",
            client_id=f"{settings.client_id}-labels",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            **security_options(settings),
        )
        self.access_refused: AccessRefused | None = None
        self._warned: tuple[str, float] | None = None

    async def start(self) -> None:
        await start_client(self._consumer, self._settings, {self._topic: "review.labels_topic"})

    async def stop(self) -> None:
        await _stop(self._consumer)

    async def fetch(self, timeout_ms: int = 500) -> list[bytes]:
        try:
            batches = await self._consumer.getmany(timeout_ms=timeout_ms, max_records=500)
        except (GroupAuthorizationFailedError, TopicAuthorizationFailedError) as exc:
            self.access_refused = _read_refusal(
                self._settings,
                exc,
                f"{self._settings.group_id}.labels",
                {self._topic: "review.labels_topic"},
            )
            _warn_refused(self, self.access_refused)
            await asyncio.sleep(timeout_ms / 1000)
            return []
        self.access_refused = _hidden(
            self._settings, self._consumer, {self._topic: "review.labels_topic"}
        )
        if self.access_refused is not None:
            _warn_refused(self, self.access_refused)
        return [m.value for messages in batches.values() for m in messages if m.value is not None]

    async def commit(self) -> None:
        try:
            await self._consumer.commit()
        except KafkaError as exc:
            log.warning("labels offset commit refused (%s); will retry", exc)
