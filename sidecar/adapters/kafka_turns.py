"""The ``eval_turns`` topic on Kafka: the conversation stage's consumer, and the
conversation state topic with read-backs of ``eval_turns`` by offset.

Turn records and state records are produced by the service's one producer
(:class:`~sidecar.adapters.kafka.KafkaSink`): turns keyed by conversation id,
so every turn of a conversation lands on one partition; state records on an
explicit partition of the state topic (the partition number of the
conversation's turns, as a Kafka Streams changelog does). The consumer is
the span consumer (:class:`~sidecar.adapters.kafka.KafkaSource`: manual
commits, rebalance listener) on the turns topic in the conversation stage's
own group.

:class:`KafkaConversationState` (a :class:`~sidecar.ports.TopicReader`)
reads with one consumer outside any group (``assign``/``seek``):
a state partition from its start to the end offset taken when the read began,
and turns of ``eval_turns`` at given offsets, one seek per run of nearby
offsets. Offsets below a partition's log start (retention) are not there.
At start it logs an error when the two topics' partition counts differ.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from sidecar.adapters.kafka import KafkaSource
from sidecar.adapters.kafka_security import security_options, start_client
from sidecar.errors import SourceError
from sidecar.model import RecordRef
from sidecar.ports import StateEntry
from sidecar.settings import ConversationSettings, KafkaSettings, conversation_group

__all__ = ["KafkaConversationState", "turn_source"]

log = logging.getLogger(__name__)


def _on_turns(kafka: KafkaSettings, conversations: ConversationSettings) -> KafkaSettings:
    return kafka.model_copy(
        update={
            "topic": conversations.topic,
            "group_id": conversation_group(kafka, conversations),
            "client_id": f"{kafka.client_id}-conversations",
            # The conversation stage reads eval_turns alone, never the logs topic.
            "logs_topic": None,
        }
    )


def turn_source(kafka: KafkaSettings, conversations: ConversationSettings) -> KafkaSource:
    """The conversation stage's consumer of the turns topic, in its own group."""
    return KafkaSource(
        _on_turns(kafka, conversations), fields={conversations.topic: "conversations.topic"}
    )


class KafkaConversationState:
    """The state topic and read-backs of the turns topic (see the module docstring)."""

    def __init__(
        self,
        kafka: KafkaSettings,
        conversations: ConversationSettings,
        *,
        scan_records: int = 500,
        poll_ms: int = 200,
    ) -> None:
        self._kafka = kafka
        self._turns_topic = conversations.topic
        self._state_topic = conversations.state_topic or None
        self._timeout_s = conversations.reread_timeout_s
        self._scan = scan_records
        self._poll_ms = poll_ms
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=kafka.bootstrap_servers,
            group_id=None,
            client_id=f"{kafka.client_id}-conversations-state",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            **security_options(kafka),
        )
        self._lock = asyncio.Lock()
        self._state_partitions: set[int] = set()

    async def start(self) -> None:
        await start_client(self._consumer, self._kafka)
        if self._state_topic is not None:
            await self._check_partitions()

    async def _check_partitions(self) -> None:
        assert self._state_topic is not None
        try:
            cluster = await self._consumer._client.fetch_all_metadata()
        except KafkaError as exc:
            log.warning("could not read the state topic's partition count: %s", exc)
            return
        turns = cluster.partitions_for_topic(self._turns_topic) or set()
        self._state_partitions = set(cluster.partitions_for_topic(self._state_topic) or set())
        if len(turns) != len(self._state_partitions):
            log.error(
                "topic %s has %d partitions and the conversation state topic %s has %d: they "
                "must be equal (create %s with cleanup.policy=compact and the partition count of "
                "%s); decided conversations of partitions it lacks do not survive a restart",
                self._turns_topic,
                len(turns),
                self._state_topic,
                len(self._state_partitions),
                self._state_topic,
                self._turns_topic,
            )

    async def stop(self) -> None:
        try:
            await self._consumer.stop()
        except KafkaError as exc:
            raise SourceError(f"leaving Kafka failed: {exc}") from exc

    async def load(self, partitions: set[int]) -> list[StateEntry]:
        if self._state_topic is None:
            return []
        tps = [TopicPartition(self._state_topic, p) for p in sorted(partitions)]
        if self._state_partitions:
            tps = [tp for tp in tps if tp.partition in self._state_partitions]
        if not tps:
            return []
        entries: list[StateEntry] = []
        async with self._lock:
            try:
                self._consumer.assign(tps)
                begin = await self._consumer.beginning_offsets(tps)
                end = await self._consumer.end_offsets(tps)
                todo = {tp: end[tp] for tp in tps if end[tp] > begin[tp]}
                for tp in todo:
                    self._consumer.seek(tp, begin[tp])
                deadline = time.monotonic() + max(self._timeout_s, 60.0)
                while todo:
                    if time.monotonic() > deadline:
                        raise SourceError(f"reading {self._state_topic} timed out")
                    batches = await self._consumer.getmany(
                        *todo, timeout_ms=self._poll_ms, max_records=10_000
                    )
                    for tp, messages in batches.items():
                        entries.extend(
                            StateEntry(tp.partition, m.key, m.value)
                            for m in messages
                            if m.offset < todo.get(tp, 0)
                        )
                    for tp in list(todo):
                        if await self._consumer.position(tp) >= todo[tp]:
                            del todo[tp]
            except KafkaError as exc:
                raise SourceError(f"reading {self._state_topic} failed: {exc}") from exc
        return entries

    async def read_turns(self, refs: Sequence[RecordRef]) -> Mapping[RecordRef, bytes]:
        by_partition: dict[int, set[int]] = {}
        for ref in refs:
            by_partition.setdefault(ref.partition, set()).add(ref.offset)
        tps = [TopicPartition(self._turns_topic, p) for p in sorted(by_partition)]
        if not tps:
            return {}
        found: dict[RecordRef, bytes] = {}
        async with self._lock:
            try:
                self._consumer.assign(tps)
                begin = await self._consumer.beginning_offsets(tps)
                end = await self._consumer.end_offsets(tps)
                deadline = time.monotonic() + self._timeout_s
                for tp in tps:
                    pending = sorted(
                        o for o in by_partition[tp.partition] if begin[tp] <= o < end[tp]
                    )
                    while pending and time.monotonic() < deadline:
                        # One seek reads a run of up to scan_records records from the first wanted.
                        self._consumer.seek(tp, pending[0])
                        batch = await self._consumer.getmany(
                            tp, timeout_ms=self._poll_ms, max_records=self._scan
                        )
                        messages = batch.get(tp, [])
                        if not messages:
                            continue
                        last = messages[-1].offset
                        for m in messages:
                            if m.value is not None and m.offset in by_partition[tp.partition]:
                                found[RecordRef(tp.partition, m.offset)] = m.value
                        pending = [o for o in pending if o > last]
            except KafkaError as exc:
                raise SourceError(f"reading back {self._turns_topic} failed: {exc}") from exc
        return found
