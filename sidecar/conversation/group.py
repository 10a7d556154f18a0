"""Conversations in a replay: turns grouped by key, split at idle gaps, decided at the end.

``sidecar replay`` sees all its input at once, so it need not wait: the turns
of each (rubric, conversation id) are put in start-time order and split where
the gap from one turn's end to the next turn's start exceeds the rubric's
``idle_timeout_s`` (the service would have decided the first part by then).
Each part is one conversation, one verdict (revision 1, reason
``end_of_input``); it is never split at ``max_turns`` (the ``max_turns`` check
says whether it had too many).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sidecar.conversation.store import ConversationReason, DecidedConversation, HeldTurn, ordered
from sidecar.evaluate.rubric import ConversationSpec
from sidecar.wire.turn_records import TurnRecord


def group_conversations(
    records: Iterable[TurnRecord], specs: Mapping[str, ConversationSpec]
) -> list[DecidedConversation]:
    """The conversations in ``records``, ordered by rubric, then by first turn."""
    by_key: dict[tuple[str, str], dict[str, tuple[HeldTurn, int]]] = {}
    for record in records:
        for rubric_id in record.rubrics:
            if rubric_id not in specs:
                continue
            turns = by_key.setdefault((rubric_id, record.conversation_id), {})
            # The first record of a trace wins; a repeated one is the same turn.
            turns.setdefault(
                record.trace_id,
                (HeldTurn(record.transcript(), record.start_unix_nano), record.end_unix_nano),
            )
    found: list[tuple[str, int, DecidedConversation]] = []
    for (rubric_id, conversation_id), turns in by_key.items():
        gap_ns = specs[rubric_id].idle_timeout_s * 1e9
        runs: list[list[HeldTurn]] = []
        last_end = 0
        for turn, end in sorted(turns.values(), key=lambda item: item[0].order):
            if not runs or turn.start_unix_nano - last_end > gap_ns:
                runs.append([])
                last_end = end
            runs[-1].append(turn)
            last_end = max(last_end, end)
        for run in runs:
            found.append(
                (rubric_id, run[0].start_unix_nano, _decided(rubric_id, conversation_id, run))
            )
    found.sort(key=lambda item: (item[0], item[1]))
    return [conversation for _, _, conversation in found]


def _decided(rubric_id: str, conversation_id: str, run: list[HeldTurn]) -> DecidedConversation:
    return DecidedConversation(
        rubric_id=rubric_id,
        conversation_id=conversation_id,
        turns=ordered(run),
        reason=ConversationReason.END_OF_INPUT,
    )
