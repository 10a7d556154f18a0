"""Which offsets may be committed (at-least-once, nothing lost).

For each partition the committable offset is the lowest offset still needed by
an undecided trace, either still assembling or in flight (judging, emitting),
or else the next offset after the last consumed record. A trace stops holding
only once its verdicts are emitted and acknowledged.

The spans and the logs topic have one tracker each (:class:`TopicOffsets`);
a trace holds in both under one token, so releasing it frees its offsets in
both: a logs offset is committed only once every trace whose records lie at
or below it is decided, exactly as a spans offset.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping

from sidecar.model import RecordRef


def lower(first_offsets: dict[int, int], ref: RecordRef) -> bool:
    """Take ``ref`` as the first offset in its partition if it is lower; whether it was."""
    if ref.offset < first_offsets.get(ref.partition, ref.offset + 1):
        first_offsets[ref.partition] = ref.offset
        return True
    return False


class OffsetTracker:
    def __init__(self) -> None:
        self._next: dict[int, int] = {}
        self._holds: dict[int, dict[int, int]] = {}
        self._tokens = itertools.count()

    def consumed(self, partition: int, offset: int) -> None:
        if offset + 1 > self._next.get(partition, -1):
            self._next[partition] = offset + 1

    def hold(self, first_offsets: Mapping[int, int], token: int | None = None) -> int:
        """Hold the given lowest offsets per partition until ``release(token)``.

        ``token``: one another tracker handed out, to hold under it here too.
        """
        if token is None:
            token = next(self._tokens)
        for partition, offset in first_offsets.items():
            self._holds.setdefault(partition, {})[token] = offset
        return token

    def release(self, token: int) -> None:
        for holds in self._holds.values():
            holds.pop(token, None)

    def drop_partitions(self, partitions: Iterable[int]) -> None:
        for partition in partitions:
            self._holds.pop(partition, None)
            self._next.pop(partition, None)

    def next_offsets(self) -> dict[int, int]:
        return dict(self._next)

    def in_flight(self) -> int:
        return len({t for holds in self._holds.values() for t in holds})

    def committable(self, assembling: Mapping[int, int]) -> dict[int, int]:
        """Offsets to commit per partition, given the assembler's ``held_offsets()``."""
        result: dict[int, int] = {}
        for partition, next_offset in self._next.items():
            candidates = [next_offset]
            if partition in assembling:
                candidates.append(assembling[partition])
            holds = self._holds.get(partition)
            if holds:
                candidates.append(min(holds.values()))
            result[partition] = min(candidates)
        return result


Held = Mapping[str, Mapping[int, int]]


class TopicOffsets:
    """One :class:`OffsetTracker` per topic, holding under one token in all of them.

    An item (a trace, a conversation, a dead letter) holds its first offsets
    in every topic its records came from (``{topic: {partition: offset}}``);
    releasing its token frees them all, so every topic follows the one rule.
    """

    def __init__(self) -> None:
        self._trackers: dict[str, OffsetTracker] = {}
        self._tokens = itertools.count()

    def tracker(self, topic: str) -> OffsetTracker:
        found = self._trackers.get(topic)
        if found is None:
            found = self._trackers[topic] = OffsetTracker()
        return found

    def consumed(self, topic: str, partition: int, offset: int) -> None:
        self.tracker(topic).consumed(partition, offset)

    def hold(self, held: Held) -> int:
        token = next(self._tokens)
        for topic, offsets in held.items():
            if offsets:
                self.tracker(topic).hold(offsets, token=token)
        return token

    def release(self, token: int) -> None:
        for tracker in self._trackers.values():
            tracker.release(token)

    def drop_partitions(self, partitions: Iterable[int]) -> None:
        dropped = set(partitions)
        for tracker in self._trackers.values():
            tracker.drop_partitions(dropped)

    def committable(self, buffered: Held) -> dict[str, dict[int, int]]:
        """Per topic and partition, the offset to commit given what the buffer still holds."""
        return {
            topic: tracker.committable(buffered.get(topic, {}))
            for topic, tracker in self._trackers.items()
        }
