"""Restoring decided conversations from the state topic (records: :mod:`sidecar.wire.state_records`).

The next owner of a partition (after a restart, a crash or a rebalance) reads
the state partition from its start on assignment, before it reads any turn,
and so knows every decided conversation of the partition: its last revision
and where each of its turns lies in ``eval_turns``. A late turn then
re-opens the conversation with its earlier turns re-read by offset.

A restore ignores records of another consumer group or turns topic, so two
deployments sharing the topic cannot mix; a tombstone forgets a
conversation; a record that does not parse is counted and skipped. Nothing
here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sidecar.errors import RecordError
from sidecar.ports import StateEntry
from sidecar.wire.state_records import StateRecord, parse_state


@dataclass(frozen=True, slots=True)
class Restored:
    """What a partition's state records amount to, last record per key winning."""

    records: tuple[StateRecord, ...]
    malformed: int = 0
    foreign: int = 0  # records of another group or turns topic


def fold(entries: Iterable[StateEntry], *, group: str, topic: str) -> Restored:
    """The live state of ``entries`` (in offset order): tombstones delete, later records win."""
    live: dict[bytes, StateRecord] = {}
    malformed = foreign = 0
    for entry in entries:
        if entry.key is None:
            malformed += 1
            continue
        if entry.value is None:
            live.pop(entry.key, None)
            continue
        try:
            record = parse_state(entry.value)
        except RecordError:
            malformed += 1
            continue
        if record.group != group or record.topic != topic:
            foreign += 1
            continue
        live[entry.key] = record
    ordered = sorted(live.values(), key=lambda r: r.decided_at)
    return Restored(tuple(ordered), malformed, foreign)
