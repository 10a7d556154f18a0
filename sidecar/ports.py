"""What the engine needs of the outside world: narrow protocols, at the bottom of the house.

Records in and out:

- :class:`RecordSource` reads one or more co-partitioned topics as a member
  of a consumer group with manual commits; partition numbers stand for the
  same partition of every topic it reads (a range assignor), so a
  :class:`RebalanceListener` hears partition numbers;
- :class:`RecordSink` produces :class:`OutRecord` s; a send returns once the
  broker acknowledged (``acks=all``) or raises
  :class:`~sidecar.errors.DeliveryError` saying, per record, whether trying
  again can help;
- :class:`HistoryReader` reads a topic by position in a group of its own
  (``sidecar backfill``);
- :class:`LabelReader` reads human labels;
- :class:`TopicReader` reads the conversation state topic and turns back by
  offset (no group, no commits).

``sidecar.adapters.kafka`` implements them on aiokafka; ``tests/fakes.py``
in memory. A reader the brokers refuse (an ACL) says so in ``access_refused``
(:class:`AccessReporting`), waits and reads again. A refused commit is not an error: ``commit`` returns False and a
later round commits again. ``start`` raises
:class:`~sidecar.errors.SourceError` (or a more precise subclass) when the
broker cannot be used.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from sidecar.evaluate.verdict import Verdict
from sidecar.model import RecordRef


@dataclass(frozen=True, slots=True)
class AccessRefused:
    """Kafka refuses this principal an operation on a resource (an ACL), until granted.

    ``resource`` is ``topic`` or ``group``; ``operation`` ``READ``, ``WRITE`` or
    ``DESCRIBE``; ``message`` the whole sentence, with the setting naming the
    resource and what to grant.
    """

    resource: str
    name: str
    operation: str
    message: str


@runtime_checkable
class AccessReporting(Protocol):
    """A client that says when the brokers refuse it access (readers of topics)."""

    @property
    def access_refused(self) -> AccessRefused | None: ...


@dataclass(frozen=True, slots=True)
class Record:
    """One record read from a topic; ``timestamp_ms`` when the reader knows it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    topic: str = ""
    timestamp_ms: int | None = None


class RecordKind(enum.StrEnum):
    """What an outgoing record is: names the record in logs, metrics and dead letters."""

    VERDICT = "verdict"
    REVIEW = "review"
    TURN = "turn"
    STATE = "state"
    DEAD_LETTER = "dead_letter"


@dataclass(frozen=True, slots=True)
class OutRecord:
    """One record to produce. ``partition`` None: the producer's partitioner picks by key."""

    kind: RecordKind
    topic: str
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    partition: int | None = None


@dataclass(frozen=True, slots=True)
class Position:
    """A committed position: the next offset to read, and metadata kept with it."""

    offset: int
    metadata: str = ""


class RebalanceListener(Protocol):
    """Told when the group hands partitions to this member or takes them away."""

    async def on_assigned(self, partitions: set[int], metadata: Mapping[int, str]) -> None:
        """``metadata``: what was committed with each partition's offset (absent: none)."""
        ...

    async def on_revoked(self, partitions: set[int]) -> None:
        """Called while the partitions are still ours: commit now, then drop their state."""
        ...


class RecordSource(Protocol):
    """Co-partitioned topics read as a consumer-group member with manual commits."""

    async def start(self, listener: RebalanceListener) -> None: ...

    async def stop(self) -> None:
        """Leave the group (uncommitted records are read again by the next owner)."""
        ...

    async def fetch(self) -> Sequence[Record]:
        """The next records of unpaused assigned partitions; may wait briefly, may be empty."""
        ...

    async def commit(self, positions: Mapping[tuple[str, int], Position]) -> bool:
        """Commit ``(topic, partition) -> position`` for assigned partitions; False if none was."""
        ...

    def pause(self) -> None:
        """Stop fetching from every assigned partition (back-pressure)."""
        ...

    def resume(self) -> None: ...


class RecordSink(Protocol):
    """Producer of :class:`OutRecord`; sends return once every record is acknowledged."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, records: Sequence[OutRecord]) -> None:
        """Send ``records`` together; :class:`~sidecar.errors.DeliveryError` names the refused."""
        ...


class HistoryReader(Protocol):
    """A topic read by position, in a consumer group of its own (never the live group)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def end_offsets(self) -> dict[int, int]:
        """The next offset to be written, for every partition of the topic."""
        ...

    async def offsets_for_time(self, timestamp_ms: int) -> dict[int, int | None]:
        """Per partition, the first offset whose timestamp is >= ``timestamp_ms`` (None: none)."""
        ...

    async def assign(self, starts: Mapping[int, int]) -> None:
        """Read exactly these partitions, each from its offset."""
        ...

    async def fetch(self) -> list[Record]:
        """The next records of the assigned, unfinished partitions (with timestamps)."""
        ...

    async def positions(self) -> dict[int, int]:
        """The next offset to be fetched of each assigned, unfinished partition."""
        ...

    def finish(self, partitions: set[int]) -> None:
        """Fetch nothing more from ``partitions``."""
        ...

    async def commit(self, offsets: Mapping[int, int]) -> None:
        """Commit ``offsets`` to the reader's own group."""
        ...


class LabelReader(Protocol):
    """Human labels (JSON payloads); ``commit`` after each handled batch."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def fetch(self) -> list[bytes]:
        """The next labels; may wait briefly, may be empty."""
        ...

    async def commit(self) -> None: ...


@dataclass(frozen=True, slots=True)
class StateEntry:
    """One record of the conversation state topic: its partition, key and value (None: tombstone)."""

    partition: int
    key: bytes | None
    value: bytes | None


class TopicReader(Protocol):
    """The conversation state topic read whole, and the turns topic read back by offset."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def load(self, partitions: set[int]) -> Sequence[StateEntry]:
        """Every state record of ``partitions``, from each start to its end, in offset order.

        SourceError when that could not be read in time.
        """
        ...

    async def read_turns(self, refs: Sequence[RecordRef]) -> Mapping[RecordRef, bytes]:
        """The turn records at ``refs``; those no longer there (retention) are left out."""
        ...


class VerdictSpanSink(Protocol):
    """Records the verdict span inside the evaluated trace (the OTel SDK in production)."""

    def record(self, verdict: Verdict) -> str | None:
        """Record the span; its span id (hex), or None when no span was recorded."""
        ...

    def flush(self) -> bool:
        """Export what is queued, bounded in time; False when it did not finish."""
        ...
