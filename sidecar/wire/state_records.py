"""The state record: what survives of a decided conversation, on a compacted changelog topic.

Like a Kafka Streams changelog: after a conversation's verdict is
acknowledged, and before the ``eval_turns`` offsets of its turns are
committed, the conversation stage writes one small record to the state topic
(default ``eval_conversations``, ``cleanup.policy=compact``), to the *same
partition number* as the conversation's turns in ``eval_turns`` and keyed by
:func:`state_key` (consumer group, rubric id, conversation id). The next
owner of that partition restores from it (:mod:`sidecar.conversation.state`).

The record holds no content: ids, the revision, the (partition, offset,
trace id, start time) of each turn, the decision time (Unix seconds), the
conversation's own flags, and the consumer group and turns topic it was
written for. A tombstone (no value) under the key forgets a conversation.

Versioned: ``v`` is :data:`STATE_RECORD_VERSION`; a record of another version
or shape, unknown keys included, is a :class:`~sidecar.errors.RecordError`
(counted, skipped).
"""

from __future__ import annotations

import json
from typing import Annotated, ClassVar, Literal

from pydantic import Field

from sidecar.wire._base import InternalId, InternalRecord, parse_json_record

STATE_RECORD_VERSION: Literal[1] = 1
# A conversation keeps at most this many turns' places (the most recent ones).
MAX_STATE_TURNS = 10_000


class StateTurn(InternalRecord):
    """Where one turn of the conversation lies in ``eval_turns``."""

    trace_id: InternalId
    partition: Annotated[int, Field(ge=0)]
    offset: Annotated[int, Field(ge=0)]
    start_unix_nano: int = 0


class StateRecord(InternalRecord):
    """One decided conversation of one rubric (see the module docstring)."""

    FAMILY: ClassVar[str] = "state record"
    VERSION: ClassVar[int] = STATE_RECORD_VERSION

    v: Literal[1] = STATE_RECORD_VERSION
    group: str
    topic: str
    rubric_id: InternalId
    conversation_id: InternalId
    revision: Annotated[int, Field(ge=1)]
    decided_at: float
    turns: Annotated[tuple[StateTurn, ...], Field(max_length=MAX_STATE_TURNS)]
    # The conversation's own flags (e.g. partial, earlier_turns_missing): kept by later revisions.
    flags: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return (self.rubric_id, self.conversation_id)


def state_key(group: str, rubric_id: str, conversation_id: str) -> bytes:
    """The record key: compaction keeps the last record per (group, rubric, conversation)."""
    return json.dumps([group, rubric_id, conversation_id], ensure_ascii=False).encode("utf-8")


def parse_state(payload: bytes, where: str = "eval_conversations") -> StateRecord:
    """One state record from the topic; RecordError naming ``where`` and the first problem."""
    return parse_json_record(StateRecord, payload, where)
