"""The state record: what survives of a decided conversation, on a compacted changelog topic.

Like a Kafka Streams changelog: after a conversation's verdict is
acknowledged, and before the ``eval_turns`` offsets of its turns are
committed, the conversation stage writes one small record to the state topic
(default ``eval_conversations``, ``cleanup.policy=compact``), to the *same
partition number* as the conversation's turns in ``eval_turns`` and keyed by
(rubric id, conversation id). The next owner of that partition (after a
restart, a crash or a rebalance) reads the state partition from its start on
assignment, before it reads any turn, and so knows every decided
conversation of the partition: its last revision and where each of its turns
lies in ``eval_turns``. A late turn then re-opens the conversation with its
earlier turns re-read by offset.

The record holds no content: ids, the revision, the (partition, offset,
trace id, start time) of each turn, the decision time (Unix seconds), and the
consumer group and turns topic it was written for. The key is (group, rubric
id, conversation id), and a restore ignores records of another group or
topic, so two deployments sharing the topic cannot mix.
A tombstone (no value) under the key forgets a conversation (written when the
per-partition bound evicts it).

Versioned: ``v`` is :data:`STATE_RECORD_VERSION`; a record of another version
or shape is a :class:`~sidecar.errors.RecordError` (counted, skipped).
Nothing here does I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sidecar.errors import RecordError
from sidecar.ports import StateEntry

STATE_RECORD_VERSION: Literal[1] = 1
# A conversation keeps at most this many turns' places (the most recent ones).
MAX_STATE_TURNS = 10_000

Id = Annotated[str, Field(min_length=1, max_length=512)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class StateTurn(_Model):
    """Where one turn of the conversation lies in ``eval_turns``."""

    trace_id: Id
    partition: Annotated[int, Field(ge=0)]
    offset: Annotated[int, Field(ge=0)]
    start_unix_nano: int = 0


class StateRecord(_Model):
    """One decided conversation of one rubric (see the module docstring)."""

    v: Literal[1] = STATE_RECORD_VERSION
    group: str
    topic: str
    rubric_id: Id
    conversation_id: Id
    revision: Annotated[int, Field(ge=1)]
    decided_at: float
    turns: Annotated[tuple[StateTurn, ...], Field(max_length=MAX_STATE_TURNS)]
    # The conversation's own flags (e.g. partial, earlier_turns_missing): kept by later revisions.
    flags: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return (self.rubric_id, self.conversation_id)

    def to_bytes(self) -> bytes:
        return json.dumps(
            self.model_dump(mode="json"), ensure_ascii=False, separators=(",", ":")
        ).encode("utf-8")


def state_key(group: str, rubric_id: str, conversation_id: str) -> bytes:
    """The record key: compaction keeps the last record per (group, rubric, conversation)."""
    return json.dumps([group, rubric_id, conversation_id], ensure_ascii=False).encode("utf-8")


def parse_state(payload: bytes, where: str = "eval_conversations") -> StateRecord:
    try:
        return StateRecord.model_validate_json(payload)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        loc = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise RecordError(f"{where}: {loc}: {first['msg']}") from exc


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
