"""What a partition's next owner must know: traces already decided below the commit point.

The commit rule (``sidecar.ingest.offsets``) commits the lowest offset an undecided
trace still needs, so the next owner of a partition re-reads every undecided
trace from its first record. A trace decided *early*, before it had been
quiet for ``decision_wait`` (at shutdown, at ``max_trace_age``, evicted, at
the span limit), may still have records to come; once it is decided its
offsets are released and the commit point moves past its first records. The
next owner would then read only its tail and judge that tail as a whole trace.

So each commit carries, in the offset's metadata, the ids of the traces this
member decided early whose first record lies below the committed offset
(:meth:`Handover.metadata`). The next owner reads them on assignment
(:meth:`Handover.received`) and flags any trace it assembles under one of
those ids ``partial`` (:meth:`Handover.partial`); it passes them on in its
own commits until they expire. Entries live ``keep_s`` (``max_trace_age``):
a trace's records arrive within that of its first.

Kafka bounds offset metadata (``offset.metadata.max.bytes``, 4096 by
default), so at most ``max_ids`` ids are written per partition (the last 8
bytes of each id: collisions are out of reach at that count). When more traces would
need listing, the oldest are listed and the commit point is lowered to the
first record of the first one left out: the next owner then re-reads those
traces whole, which is the at-least-once answer anyway. Nothing here does I/O; time
is passed in.
"""

from __future__ import annotations

import base64
import binascii
import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from sidecar.model import DecideReason, Trace

__all__ = ["EARLY", "Handover"]

# Decisions taken before the trace was quiet for decision_wait.
EARLY = frozenset(
    {DecideReason.SHUTDOWN, DecideReason.MAX_AGE, DecideReason.EVICTED, DecideReason.SPAN_LIMIT}
)

V = TypeVar("V")

_PREFIX = "sidecar-handover/1 "
_ID_BYTES = 8


def _key(trace_id: str) -> bytes:
    # The last bytes: W3C puts a trace id's randomness there; some producers put time first.
    return bytes.fromhex(trace_id[-_ID_BYTES * 2 :].rjust(_ID_BYTES * 2, "0"))


@dataclass(frozen=True, slots=True)
class _Early:
    first_offset: int
    expires: float


class Handover:
    """Per partition: ids of traces decided early (ours) or listed by the previous owner."""

    def __init__(self, keep_s: float, max_ids: int = 280) -> None:
        self.keep_s = keep_s
        self.max_ids = max_ids
        self._ours: dict[int, dict[bytes, _Early]] = {}
        self._inherited: dict[int, dict[bytes, float]] = {}
        # Per partition, (expires, id) of every entry as it was set, earliest first: each
        # commit expires what is due without reading the rest (an entry renewed since
        # stays, its later time queued too).
        self._ours_due: dict[int, list[tuple[float, bytes]]] = {}
        self._inherited_due: dict[int, list[tuple[float, bytes]]] = {}

    def decided(self, trace: Trace, now: float) -> None:
        """Remember ``trace`` if it was decided early (its first offsets say where it began)."""
        if trace.reason not in EARLY:
            return
        key = _key(trace.trace_id)
        expires = now + self.keep_s
        for partition, offset in trace.first_offsets.items():
            self._ours.setdefault(partition, {})[key] = _Early(offset, expires)
            heapq.heappush(self._ours_due.setdefault(partition, []), (expires, key))

    def metadata(self, partition: int, offset: int, now: float) -> tuple[int, str]:
        """The offset to commit for ``partition`` (``offset`` or lower) and its metadata."""
        self._expire(partition, now)
        inherited = list(self._inherited.get(partition, {}))
        room = max(0, self.max_ids - len(inherited))
        # The oldest that fit and the first one left out, without sorting them all.
        below = heapq.nsmallest(
            room + 1,
            (
                (entry.first_offset, key)
                for key, entry in self._ours.get(partition, {}).items()
                if entry.first_offset < offset
            ),
        )
        if len(below) > room:
            # The oldest fit; the commit stays at the first record of the first one left out,
            # so the next owner re-reads those whole.
            offset = below[room][0]
            below = [(first, key) for first, key in below[:room] if first < offset]
        keys = dict.fromkeys([*inherited[: self.max_ids], *(key for _, key in below)])
        if not keys:
            return offset, ""
        return offset, _PREFIX + base64.b64encode(b"".join(keys)).decode("ascii")

    def received(self, partition: int, metadata: str | None, now: float) -> int:
        """Take the previous owner's list for ``partition``; returns how many ids it held."""
        keys = _parse(metadata)
        if keys:
            entries = self._inherited.setdefault(partition, {})
            due = self._inherited_due.setdefault(partition, [])
            expires = now + self.keep_s
            for key in keys:
                entries[key] = expires
                heapq.heappush(due, (expires, key))
        return len(keys)

    def partial(self, trace: Trace) -> bool:
        """True when a previous owner decided ``trace`` from its records below our start."""
        key = _key(trace.trace_id)
        return any(key in self._inherited.get(p, {}) for p in trace.first_offsets)

    def drop_partitions(self, partitions: Iterable[int]) -> None:
        for partition in partitions:
            self._ours.pop(partition, None)
            self._inherited.pop(partition, None)
            self._ours_due.pop(partition, None)
            self._inherited_due.pop(partition, None)

    def _expire(self, partition: int, now: float) -> None:
        ours = self._ours.get(partition)
        if ours is not None:
            _expire(ours, self._ours_due.get(partition), now, _early_expires)
        inherited = self._inherited.get(partition)
        if inherited is not None:
            _expire(inherited, self._inherited_due.get(partition), now, float)


def _early_expires(entry: _Early) -> float:
    return entry.expires


def _expire(
    entries: dict[bytes, V],
    due: list[tuple[float, bytes]] | None,
    now: float,
    expires_of: Callable[[V], float],
) -> None:
    """Drop the entries due by ``now``; a queued time an entry was since renewed past is skipped."""
    while due and due[0][0] <= now:
        expires, key = heapq.heappop(due)
        entry = entries.get(key)
        if entry is not None and expires_of(entry) == expires:
            del entries[key]


def _parse(metadata: str | None) -> list[bytes]:
    """The ids in a commit's metadata; nothing for metadata another program wrote."""
    if not metadata or not metadata.startswith(_PREFIX):
        return []
    try:
        raw = base64.b64decode(metadata[len(_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        return []
    return [raw[i : i + _ID_BYTES] for i in range(0, len(raw) - _ID_BYTES + 1, _ID_BYTES)]
