"""What the service needs from the message broker: the protocols its clients implement.

:class:`Source` reads the spans topic, and the logs topic beside it when one
is configured, as one member of a consumer group, with manual commits and a
:class:`RebalanceListener`. The two topics are co-partitioned: partition i of
both is assigned to the same member (a range assignor), so the listener and
``assigned`` speak of partition numbers, which stand for both topics; :class:`Sink` produces verdict,
review and dead-letter records; :class:`LabelSource` reads human labels.
``sidecar.adapters.kafka`` implements them on aiokafka, ``tests.fakes``
in memory (for tests: real behaviour, no network).

Errors: ``start`` raises :class:`~sidecar.errors.SourceError` when the broker
cannot be reached; a send the broker did not acknowledge raises
:class:`~sidecar.errors.DeliveryError` (the service retries it, the trace keeps
its offsets held). A refused commit is not an error: ``commit`` returns False
and a later round commits again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Record:
    """One record of the spans topic, or of the logs topic (``topic`` says which)."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    topic: str = ""


class RebalanceListener(Protocol):
    """Told when the group hands partitions to this member or takes them away."""

    async def on_assigned(self, partitions: set[int]) -> None: ...

    async def on_revoked(self, partitions: set[int]) -> None:
        """Called while the partitions are still ours: commit now, then drop their state."""
        ...


class Source(Protocol):
    """The spans (and logs) topic, read as a consumer-group member with manual commits."""

    async def start(self, listener: RebalanceListener) -> None:
        """Join the group; ``listener`` hears every assignment and revocation."""
        ...

    async def stop(self) -> None:
        """Leave the group (uncommitted records are read again by the next owner)."""
        ...

    async def fetch(self) -> list[Record]:
        """The next records of unpaused assigned partitions; may wait briefly, may be empty."""
        ...

    def assigned(self) -> set[int]: ...

    def partition_count(self) -> int | None:
        """How many partitions the spans topic has (None while not known yet)."""
        ...

    def lag(self, next_offsets: Mapping[int, int]) -> dict[int, int]:
        """Records behind the end of each assigned partition, from the next offsets to read."""
        ...

    async def commit(
        self,
        offsets: Mapping[int, int],
        metadata: Mapping[int, str] | None = None,
        log_offsets: Mapping[int, int] | None = None,
    ) -> bool:
        """Commit spans-topic ``offsets`` (with ``metadata``) and logs-topic ``log_offsets``.

        Only assigned partitions; both topics in one request. False when
        nothing was committed.
        """
        ...

    async def committed_metadata(self, partitions: set[int]) -> dict[int, str]:
        """The metadata committed with each partition's offset ("" or absent when none)."""
        ...

    def pause(self) -> None:
        """Stop fetching from the assigned partitions (back-pressure)."""
        ...

    def resume(self) -> None: ...

    @property
    def paused(self) -> bool: ...


class Sink(Protocol):
    """Producer of verdict, review and dead-letter records; a send returns once acknowledged."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def send_verdict(self, trace_id: str, payload: bytes) -> None: ...

    async def send_verdicts(self, records: Sequence[tuple[str, bytes]]) -> None:
        """Send verdict records (trace id, payload) together; returns once all are acknowledged.

        Raises :class:`~sidecar.errors.PartialDelivery` naming the records not acknowledged.
        """
        ...

    async def send_review(self, topic: str, trace_id: str, payload: bytes) -> None: ...

    async def send_dead_letter(self, record: Record, reason: str, detail: str) -> None: ...


class LabelSource(Protocol):
    """Human labels (JSON payloads); ``commit`` after each handled batch."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def fetch(self) -> list[bytes]:
        """The next labels; may wait briefly, may be empty."""
        ...

    async def commit(self) -> None: ...
