"""The spans topic read by position for ``sidecar backfill`` (a :class:`sidecar.ports.HistoryReader`).

One aiokafka consumer in the backfill's own group, with partitions assigned by
hand (``assign``, then ``seek``): it never joins a group, so no rebalance
touches the live service, and it commits only to its own group, only when
told to (``enable_auto_commit=False``). Errors from aiokafka are wrapped in
:class:`~sidecar.errors.SourceError`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from sidecar.adapters.kafka_security import connect_error, security_options, start_client
from sidecar.errors import SourceError
from sidecar.ports import Record
from sidecar.settings import KafkaSettings

__all__ = ["KafkaHistory"]

log = logging.getLogger(__name__)


class KafkaHistory:
    """Reader of ``settings.topic`` by position, committing to ``group_id`` (not the live group)."""

    def __init__(self, settings: KafkaSettings, group_id: str) -> None:
        if group_id == settings.group_id:
            raise ValueError("a backfill never uses the live consumer group")
        self._settings = settings
        self._topic = settings.topic
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=settings.bootstrap_servers,
            group_id=group_id,
            client_id=f"{settings.client_id}-backfill",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=settings.max_poll_records,
            **security_options(settings),
        )
        self._partitions: list[TopicPartition] = []
        self._finished: set[int] = set()

    async def start(self) -> None:
        await start_client(self._consumer, self._settings)
        try:
            topics = await self._consumer.topics()
        except KafkaError as exc:
            raise connect_error(self._settings, exc) from exc
        if self._topic not in topics:
            await self._consumer.stop()
            raise SourceError(f"the spans topic {self._topic!r} does not exist (kafka.topic)")
        # A consumer learns a topic's partitions by subscribing; assigning by hand, its client
        # is asked (as sidecar.adapters.kafka asks the coordinator for commit metadata).
        try:
            await self._consumer._client.add_topic(self._topic)
        except KafkaError as exc:
            raise SourceError(f"reading the partitions of {self._topic} failed: {exc}") from exc
        found = self._consumer.partitions_for_topic(self._topic) or set()
        self._partitions = [TopicPartition(self._topic, p) for p in sorted(found)]

    async def stop(self) -> None:
        try:
            await self._consumer.stop()
        except KafkaError as exc:
            raise SourceError(f"leaving Kafka failed: {exc}") from exc

    async def end_offsets(self) -> dict[int, int]:
        try:
            ends = await self._consumer.end_offsets(self._partitions)
        except KafkaError as exc:
            raise SourceError(f"reading the end offsets of {self._topic} failed: {exc}") from exc
        return {tp.partition: offset for tp, offset in ends.items()}

    async def offsets_for_time(self, timestamp_ms: int) -> dict[int, int | None]:
        try:
            found = await self._consumer.offsets_for_times(
                dict.fromkeys(self._partitions, timestamp_ms)
            )
        except KafkaError as exc:
            raise SourceError(f"offsets_for_times on {self._topic} failed: {exc}") from exc
        return {tp.partition: (None if at is None else at.offset) for tp, at in found.items()}

    async def assign(self, starts: Mapping[int, int]) -> None:
        chosen = [tp for tp in self._partitions if tp.partition in starts]
        self._consumer.assign(chosen)
        for tp in chosen:
            self._consumer.seek(tp, starts[tp.partition])

    async def fetch(self) -> list[Record]:
        try:
            batches = await self._consumer.getmany(
                timeout_ms=self._settings.fetch_timeout_ms,
                max_records=self._settings.max_poll_records,
            )
        except KafkaError as exc:
            raise SourceError(f"reading {self._topic} failed: {exc}") from exc
        return [
            Record(tp.partition, m.offset, m.key, m.value, tp.topic, m.timestamp)
            for tp, messages in batches.items()
            for m in messages
        ]

    async def positions(self) -> dict[int, int]:
        found: dict[int, int] = {}
        for tp in self._consumer.assignment():
            if tp.partition not in self._finished:
                found[tp.partition] = await self._consumer.position(tp)
        return found

    def finish(self, partitions: set[int]) -> None:
        new = partitions - self._finished
        if new:
            self._consumer.pause(*(tp for tp in self._consumer.assignment() if tp.partition in new))
            self._finished |= new

    async def commit(self, offsets: Mapping[int, int]) -> None:
        assigned = {tp.partition: tp for tp in self._consumer.assignment()}
        chosen = {assigned[p]: offset for p, offset in offsets.items() if p in assigned}
        if not chosen:
            return
        try:
            await self._consumer.commit(chosen)
        except KafkaError as exc:
            # Every verdict is out already; the commit only records how far the backfill read.
            log.warning("committing the backfill's offsets failed (%s)", exc)
