"""Turns of one conversation arriving out of order never flag it as missing earlier turns.

A turn whose input history holds earlier user messages (``earlier_user_messages``)
shows that turns came before it. Whether one of them is missing is known only
when the conversation is decided: turns travel on different partitions, so
turn 2 may arrive before turn 1.
"""

from __future__ import annotations

from sidecar.conversation.store import ConversationReason, ConversationStore
from sidecar.evaluate.rubric import ConversationSpec
from sidecar.model import Flag, RecordRef
from sidecar.wire.turn_records import TurnRecord
from tests.conversation_builders import turn_record

RID = "support-conversation"


def store() -> ConversationStore:
    return ConversationStore({RID: ConversationSpec()})


def second_turn() -> TurnRecord:
    # Turn 2 of "c": its input history shows one user message before its own.
    return turn_record(2, "c", at_s=2).model_copy(update={"earlier_user_messages": 1})


def test_turn_two_before_turn_one_is_whole_at_the_decision() -> None:
    s = store()
    s.add(RID, second_turn(), 10.0, RecordRef(1, 0))
    s.add(RID, turn_record(1, "c", at_s=1), 11.0, RecordRef(0, 0))
    [decided] = s.drain(ConversationReason.IDLE)
    assert len(decided.turns) == 2
    assert Flag.PARTIAL not in decided.flags
    assert Flag.EARLIER_TURNS_UNSEEN not in decided.flags


def test_turn_two_alone_is_flagged_partial() -> None:
    s = store()
    s.add(RID, second_turn(), 10.0, RecordRef(1, 0))
    [decided] = s.drain(ConversationReason.IDLE)
    assert Flag.PARTIAL in decided.flags
    assert Flag.EARLIER_TURNS_UNSEEN in decided.flags
