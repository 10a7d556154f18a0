"""The broker in memory: the protocols of :mod:`sidecar.ports` without a network.

Like httpx's ``MockTransport``: real behaviour, no patching. A
:class:`MemoryTopic` holds partitions of records and one consumer group's
committed offsets, with their metadata. A :class:`MemorySource` is one member
of that group, reading a spans topic and, when given, a logs topic
co-partitioned with it (partition i of both is assigned and revoked together); the test moves partitions with :meth:`~MemorySource.assign` and
:meth:`~MemorySource.revoke`, which call the rebalance listener as Kafka does
(on revoke while the partitions are still assigned, so the listener can commit).
:class:`MemorySink` keeps what was sent and can be told to refuse the next sends
with the error the Kafka sink raises. :class:`MemoryLabels` hands out pushed labels.
:class:`MemoryHistory` reads a topic by position with record timestamps (``sidecar backfill``).
:class:`MemoryConversationState` is the conversation state topic plus read-backs
of the turns topic by offset; :meth:`MemoryTopic.delete_before` stands for retention.

Each client writes what it did to a ``journal`` (a list of short strings, which
may be shared) so that a test can check the order of events across clients.
Fetches, commits and sends yield to the event loop once, as the real ones do;
none waits for time (a fetch with nothing to read returns an empty list).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Iterable, Mapping, Sequence

from sidecar.conversation.state import StateEntry
from sidecar.engine.history import HistoryRecord
from sidecar.errors import DeliveryError, PartialDelivery
from sidecar.model import RecordRef
from sidecar.ports import RebalanceListener, Record

__all__ = [
    "MemoryConversationState",
    "MemoryHistory",
    "MemoryLabels",
    "MemorySink",
    "MemorySource",
    "MemoryTopic",
    "MemoryTurns",
]


class MemoryTopic:
    """Partitions of records (offsets from 0) and the group's committed offsets."""

    def __init__(self, partitions: int = 1, *, name: str = "otlp_spans") -> None:
        self.name = name
        self._logs: list[list[Record]] = [[] for _ in range(partitions)]
        self.committed: dict[int, int] = {}
        self.metadata: dict[int, str] = {}
        # The first offset still kept per partition (retention deleted those below).
        self.log_start: dict[int, int] = {}

    def delete_before(self, partition: int, offset: int) -> None:
        """Retention: records of ``partition`` below ``offset`` are gone for readers by offset."""
        self.log_start[partition] = max(offset, self.log_start.get(partition, 0))

    @property
    def partitions(self) -> range:
        return range(len(self._logs))

    def append(self, partition: int, value: bytes | None, key: bytes | None = None) -> Record:
        log = self._logs[partition]
        record = Record(partition, len(log), key, value, self.name)
        log.append(record)
        return record

    def records(self, partition: int) -> list[Record]:
        return self._logs[partition]

    def highwater(self, partition: int) -> int:
        return len(self._logs[partition])


class MemorySource:
    """A ``Source``: one group member reading a :class:`MemoryTopic`.

    ``partitions`` are assigned on ``start`` (default: all of the topic's);
    pass an empty set and call :meth:`assign` to hand them over later. With
    ``logs``, the same partitions of that topic are read too.
    ``idle`` is set whenever a fetch found nothing to read.
    """

    def __init__(
        self,
        topic: MemoryTopic,
        *,
        logs: MemoryTopic | None = None,
        partitions: Iterable[int] | None = None,
        max_records: int = 500,
        journal: list[str] | None = None,
    ) -> None:
        self.topic = topic
        self.logs = logs
        self.log_positions: dict[int, int] = {}
        self.max_records = max_records
        self.journal: list[str] = [] if journal is None else journal
        self.positions: dict[int, int] = {}
        self.commits: list[dict[int, int]] = []
        self.log_commits: list[dict[int, int]] = []
        self.idle = asyncio.Event()
        self._initial = set(topic.partitions if partitions is None else partitions)
        self._listener: RebalanceListener | None = None
        self._paused_partitions: set[int] = set()
        self._paused = False

    async def start(self, listener: RebalanceListener) -> None:
        self.journal.append("source.start")
        self._listener = listener
        if self._initial:
            await self.assign(self._initial)

    async def stop(self) -> None:
        self.journal.append("source.stop")
        self.positions.clear()
        self.log_positions.clear()
        self._paused_partitions.clear()

    async def assign(self, partitions: Iterable[int]) -> None:
        """The group hands ``partitions`` to this member; reading starts at the committed offset."""
        assert self._listener is not None, "start() the source first"
        added = set(partitions) - set(self.positions)
        for partition in added:
            self.positions[partition] = self.topic.committed.get(partition, 0)
            if self.logs is not None and partition in self.logs.partitions:
                self.log_positions[partition] = self.logs.committed.get(partition, 0)
        self.journal.append(f"source.assigned {sorted(added)}")
        await self._listener.on_assigned(added)

    async def revoke(self, partitions: Iterable[int]) -> None:
        """The group takes ``partitions`` away; the listener runs while they are still ours."""
        assert self._listener is not None, "start() the source first"
        revoked = set(partitions) & set(self.positions)
        self.journal.append(f"source.revoked {sorted(revoked)}")
        await self._listener.on_revoked(revoked)
        for partition in revoked:
            del self.positions[partition]
            self.log_positions.pop(partition, None)
            self._paused_partitions.discard(partition)

    async def fetch(self) -> list[Record]:
        self.journal.append("source.fetch")
        await asyncio.sleep(0)
        records: list[Record] = []
        reads = [(self.topic, self.positions)]
        if self.logs is not None:
            reads.append((self.logs, self.log_positions))
        for topic, positions in reads:
            for partition in sorted(positions):
                if partition in self._paused_partitions:
                    continue
                start = positions[partition]
                batch = topic.records(partition)[start : start + self.max_records - len(records)]
                records.extend(batch)
                positions[partition] = start + len(batch)
        if records:
            self.idle.clear()
        else:
            self.idle.set()
        return records

    def assigned(self) -> set[int]:
        return set(self.positions)

    def partition_count(self) -> int | None:
        return len(self.topic.partitions)

    def lag(self, next_offsets: Mapping[int, int]) -> dict[int, int]:
        return {
            p: max(0, self.topic.highwater(p) - next_offsets[p])
            for p in self.positions
            if p in next_offsets
        }

    async def commit(
        self,
        offsets: Mapping[int, int],
        metadata: Mapping[int, str] | None = None,
        log_offsets: Mapping[int, int] | None = None,
    ) -> bool:
        await asyncio.sleep(0)
        accepted = {p: o for p, o in offsets.items() if p in self.positions}
        logs = {p: o for p, o in (log_offsets or {}).items() if p in self.log_positions}
        if not accepted and not logs:
            return False
        self.topic.committed.update(accepted)
        for partition in accepted:
            self.topic.metadata[partition] = (metadata or {}).get(partition, "")
        if accepted:
            self.commits.append(accepted)
            self.journal.append(f"source.commit {accepted}")
        if logs:
            assert self.logs is not None
            self.logs.committed.update(logs)
            self.log_commits.append(logs)
            self.journal.append(f"source.commit_logs {logs}")
        return True

    async def committed_metadata(self, partitions: set[int]) -> dict[int, str]:
        await asyncio.sleep(0)
        return {p: self.topic.metadata[p] for p in partitions if p in self.topic.metadata}

    def pause(self) -> None:
        if not self._paused:
            self._paused_partitions |= set(self.positions)
            self._paused = True

    def resume(self) -> None:
        if self._paused:
            self._paused_partitions -= set(self.positions)
            self._paused = False

    @property
    def paused(self) -> bool:
        return self._paused


class MemorySink:
    """A ``Sink`` that keeps every acknowledged record; :meth:`fail` makes sends refused."""

    def __init__(self, *, journal: list[str] | None = None) -> None:
        self.journal: list[str] = [] if journal is None else journal
        self.verdicts: list[tuple[str, bytes]] = []
        self.reviews: list[tuple[str, str, bytes]] = []
        self.dead_letters: list[tuple[Record, str, str]] = []
        self.refused = 0
        self._failures = 0

    def fail(self, times: int) -> None:
        """Refuse the next ``times`` sends with :class:`DeliveryError`; ``fail(0)`` heals."""
        self._failures = times

    async def start(self) -> None:
        self.journal.append("sink.start")

    async def stop(self) -> None:
        self.journal.append("sink.stop")

    async def send_verdict(self, trace_id: str, payload: bytes) -> None:
        await self._acknowledge(f"sink.verdict {trace_id}")
        self.verdicts.append((trace_id, payload))

    async def send_verdicts(self, records: Sequence[tuple[str, bytes]]) -> None:
        """Each record is one send (so :meth:`fail` counts records); the refused are named."""
        unsent: list[int] = []
        for i, (trace_id, payload) in enumerate(records):
            try:
                await self._acknowledge(f"sink.verdict {trace_id}")
            except DeliveryError:
                unsent.append(i)
                continue
            self.verdicts.append((trace_id, payload))
        if unsent:
            raise PartialDelivery(f"refused by the in-memory broker: {len(unsent)} records", unsent)

    async def send_review(self, topic: str, trace_id: str, payload: bytes) -> None:
        await self._acknowledge(f"sink.review {trace_id}")
        self.reviews.append((topic, trace_id, payload))

    async def send_dead_letter(self, record: Record, reason: str, detail: str) -> None:
        await self._acknowledge(f"sink.dead_letter {record.partition}:{record.offset}")
        self.dead_letters.append((record, reason, detail))

    async def _acknowledge(self, what: str) -> None:
        await asyncio.sleep(0)
        if self._failures > 0:
            self._failures -= 1
            self.refused += 1
            raise DeliveryError(f"refused by the in-memory broker: {what}")
        self.journal.append(what)


class MemoryLabels:
    """A ``LabelSource`` handing out the payloads given to :meth:`push`."""

    def __init__(self, *, journal: list[str] | None = None) -> None:
        self.journal: list[str] = [] if journal is None else journal
        self.commits = 0
        self._pending: list[bytes] = []

    def push(self, *payloads: bytes) -> None:
        self._pending.extend(payloads)

    async def start(self) -> None:
        self.journal.append("labels.start")

    async def stop(self) -> None:
        self.journal.append("labels.stop")

    async def fetch(self) -> list[bytes]:
        await asyncio.sleep(0)
        payloads, self._pending = self._pending, []
        return payloads

    async def commit(self) -> None:
        self.commits += 1
        self.journal.append("labels.commit")


class MemoryHistory:
    """A ``sidecar.engine.history.History`` over a :class:`MemoryTopic` whose records have timestamps.

    ``timestamps[partition][offset]`` is each record's time (ms); a record
    appended to the topic during the run is there for the next fetch, as in
    Kafka. ``commits`` keeps what the backfill committed to its own group;
    the topic's ``committed`` (the live group's) is never touched.
    """

    def __init__(
        self,
        topic: MemoryTopic,
        timestamps: dict[int, list[int]],
        *,
        max_records: int = 500,
    ) -> None:
        self.topic = topic
        self.timestamps = timestamps
        self.max_records = max_records
        self.positions_: dict[int, int] = {}
        self.finished: set[int] = set()
        self.commits: list[dict[int, int]] = []
        self.fetches = 0
        self.stopped = False

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        self.stopped = True

    async def end_offsets(self) -> dict[int, int]:
        return {p: self.topic.highwater(p) for p in self.topic.partitions}

    async def offsets_for_time(self, timestamp_ms: int) -> dict[int, int | None]:
        found: dict[int, int | None] = {}
        for partition in self.topic.partitions:
            times = self.timestamps.get(partition, [])
            found[partition] = next((o for o, t in enumerate(times) if t >= timestamp_ms), None)
        return found

    async def assign(self, starts: Mapping[int, int]) -> None:
        self.positions_ = dict(starts)

    async def fetch(self) -> list[HistoryRecord]:
        self.fetches += 1
        await asyncio.sleep(0)
        records: list[HistoryRecord] = []
        for partition in sorted(self.positions_):
            if partition in self.finished:
                continue
            start = self.positions_[partition]
            batch = self.topic.records(partition)[start : start + self.max_records - len(records)]
            times = self.timestamps.get(partition, [])
            records.extend(
                HistoryRecord(
                    r.partition,
                    r.offset,
                    times[r.offset] if r.offset < len(times) else None,
                    r.value,
                )
                for r in batch
            )
            self.positions_[partition] = start + len(batch)
        return records

    async def positions(self) -> dict[int, int]:
        return {p: o for p, o in self.positions_.items() if p not in self.finished}

    def finish(self, partitions: set[int]) -> None:
        self.finished |= partitions

    async def commit(self, offsets: Mapping[int, int]) -> None:
        self.commits.append(dict(offsets))


class MemoryTurns:
    """A ``TurnSink`` appending to a :class:`MemoryTopic`, partitioned by key as Kafka does."""

    def __init__(self, topic: MemoryTopic, *, journal: list[str] | None = None) -> None:
        self.topic = topic
        self.journal: list[str] = [] if journal is None else journal
        self.refused = 0
        self._failures = 0

    def fail(self, times: int) -> None:
        self._failures = times

    async def start(self) -> None:
        self.journal.append("turns.start")

    async def stop(self) -> None:
        self.journal.append("turns.stop")

    async def send_turn(self, conversation_id: str, payload: bytes) -> None:
        await asyncio.sleep(0)
        if self._failures > 0:
            self._failures -= 1
            self.refused += 1
            raise DeliveryError(f"refused by the in-memory broker: turn {conversation_id}")
        key = conversation_id.encode()
        partition = zlib.crc32(key) % len(self.topic.partitions)
        self.topic.append(partition, payload, key)
        self.journal.append(f"turns.send {conversation_id}")


class MemoryConversationState:
    """A ``ConversationState``: state records on ``state``, turns read back from ``turns``.

    ``state`` None stands for a deployment without a state topic (writes are
    dropped, nothing is restored). :meth:`fail` makes the next writes refused.
    ``loads`` counts :meth:`load` calls, ``reads`` the turns read back.
    """

    def __init__(
        self,
        state: MemoryTopic | None,
        turns: MemoryTopic,
        *,
        journal: list[str] | None = None,
    ) -> None:
        self.state = state
        self.turns = turns
        self.journal: list[str] = [] if journal is None else journal
        self.loads = 0
        self.reads = 0
        self.refused = 0
        self._failures = 0

    def fail(self, times: int) -> None:
        self._failures = times

    async def start(self) -> None:
        self.journal.append("state.start")

    async def stop(self) -> None:
        self.journal.append("state.stop")

    async def load(self, partitions: set[int]) -> list[StateEntry]:
        await asyncio.sleep(0)
        self.loads += 1
        if self.state is None:
            return []
        self.journal.append(f"state.load {sorted(partitions)}")
        return [
            StateEntry(r.partition, r.key, r.value)
            for p in sorted(partitions)
            if p in self.state.partitions
            for r in self.state.records(p)[self.state.log_start.get(p, 0) :]
        ]

    async def write(self, partition: int, key: bytes, value: bytes | None) -> None:
        await asyncio.sleep(0)
        if self._failures > 0:
            self._failures -= 1
            self.refused += 1
            raise DeliveryError("refused by the in-memory broker: state record")
        if self.state is None:
            return
        self.state.append(partition, value, key)
        self.journal.append(f"state.{'write' if value is not None else 'tombstone'} {partition}")

    async def read_turns(self, refs: Sequence[RecordRef]) -> dict[RecordRef, bytes]:
        await asyncio.sleep(0)
        found: dict[RecordRef, bytes] = {}
        for ref in refs:
            records = self.turns.records(ref.partition)
            if self.turns.log_start.get(ref.partition, 0) <= ref.offset < len(records):
                value = records[ref.offset].value
                if value is not None:
                    found[ref] = value
        self.reads += len(found)
        return found
