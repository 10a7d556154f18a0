"""Open conversations: turns held until the conversation is decided; bounded.

Like the assembler for traces (and the Collector's tail sampler), but keyed by
(rubric id, conversation id) and decided on a longer clock. Decision order for
one conversation, first match wins:

1. ``max_turns`` turns held                         -> decided now (``turn_limit``)
2. more than ``max_open`` conversations open        -> the least recently active one
                                                       decided early (``evicted``,
                                                       flagged ``decided_early``)
3. ``idle_timeout_s`` since its last turn arrived   -> ``idle``
4. ``max_age_s`` since it was opened                 -> ``max_age``

A turn whose trace id the conversation already holds (a redelivery after a
restart) is counted as a duplicate and ignored. A turn for a conversation that
was decided re-opens it with its earlier turns: the next decision is revision
n+1. The earlier turns need no offsets held; they were committed with the
decision. Decided conversations are remembered in two tiers:

- *with their transcripts*, ``decided_memory`` conversations (least recently
  decided forgotten first): a late turn re-opens at once;
- *by place*, ``max_known`` conversations per ``eval_turns`` partition (least
  recently decided evicted first, counted, listed in :attr:`evicted_state`
  for a tombstone): the revision and where each turn lies in ``eval_turns``.
  This is the state the stage writes to the changelog topic and restores on
  assignment (:mod:`.state`). A late turn for a conversation known only by
  place needs its earlier turns read back first: :meth:`wanted` says which,
  :meth:`reopen_with` hands them in. Turns that could not be read back flag
  the conversation ``partial`` + ``earlier_turns_missing``, for this and every
  later revision.

A new conversation (no earlier turns known) whose earliest turn held at the
decision shows earlier user turns in its own input history
(``TurnRecord.earlier_user_messages``) is flagged ``partial`` +
``earlier_turns_unseen``: never judged from part of its turns without saying
so. It is decided then, not when a turn arrives: turns of one conversation
travel on different partitions, and turn 2 may arrive before turn 1.

Every held turn keeps its (partition, offset): :meth:`held_offsets` is what
the commit rule needs. Nothing here does I/O; time comes in as ``now``.
"""

from __future__ import annotations

import enum
import heapq
import itertools
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sidecar.conversation.merged import conversation_transcript
from sidecar.evaluate.rubric import ConversationSpec
from sidecar.ingest.offsets import lower
from sidecar.model import Flag, RecordRef, Transcript
from sidecar.wire.turn_records import TurnRecord

Key = tuple[str, str]  # (rubric id, conversation id)


class ConversationReason(enum.StrEnum):
    """Why a conversation was decided (label of sidecar_conversations_decided_total)."""

    IDLE = "idle"
    MAX_TURNS = "turn_limit"  # max_turns reached
    MAX_AGE = "max_age"
    EVICTED = "evicted"
    END_OF_INPUT = "end_of_input"  # replay


PARTIAL_FLAGS = (Flag.PARTIAL, Flag.EARLIER_TURNS_MISSING, Flag.EARLIER_TURNS_UNSEEN)


@dataclass(frozen=True, slots=True)
class HeldTurn:
    transcript: Transcript
    start_unix_nano: int
    # Held for the commit rule (read since the last decision); None once committed.
    ref: RecordRef | None = None
    # Where the turn lies in eval_turns, held or not (the state record keeps it).
    at: RecordRef | None = None

    @property
    def order(self) -> tuple[int, str]:
        return (self.start_unix_nano, self.transcript.trace_id)


@dataclass(frozen=True, slots=True)
class Place:
    """Where one turn of a decided conversation lies in ``eval_turns``."""

    trace_id: str
    partition: int
    offset: int
    start_unix_nano: int = 0

    @property
    def ref(self) -> RecordRef:
        return RecordRef(self.partition, self.offset)


@dataclass(frozen=True, slots=True)
class Known:
    """A decided conversation known by place: its last revision and its turns' places."""

    revision: int
    places: tuple[Place, ...]
    decided_at: float = 0.0  # Unix seconds
    flags: tuple[Flag, ...] = ()


@dataclass(frozen=True, slots=True)
class DecidedConversation:
    """A conversation handed on for evaluation: its turns in start-time order."""

    rubric_id: str
    conversation_id: str
    turns: tuple[Transcript, ...]
    reason: ConversationReason
    revision: int = 1
    # Lowest offset per partition of the turns read since the last decision.
    first_offsets: Mapping[int, int] = field(default_factory=dict)
    flags: tuple[Flag, ...] = ()
    # Where each turn lies in eval_turns (turns without a place are left out).
    places: tuple[Place, ...] = ()
    partition: int | None = None

    def transcript(self) -> Transcript:
        return conversation_transcript(self.turns, self.flags)


@dataclass(slots=True)
class StoreStats:
    turns: int = 0
    duplicates: int = 0
    reopened: int = 0
    evicted: int = 0
    forgotten: int = 0
    unknown_rubric: int = 0
    state_evicted: int = 0  # known by place, over max_known of a partition
    partial: int = 0  # conversations opened without some earlier turns


@dataclass(slots=True)
class _Open:
    partition: int | None
    opened_at: float
    last_at: float
    revision: int
    turns: dict[str, HeldTurn]
    flags: tuple[Flag, ...] = ()
    # Opened with no earlier turns known (not a re-opening): trace id -> the user
    # messages its input history holds before its own (TurnRecord.earlier_user_messages).
    history: dict[str, int] | None = None
    # The lowest offset per partition of the turns read here (turns are only added).
    lowest: dict[int, int] = field(default_factory=dict)
    # Its entry in the deadline queue (deadline, seq), and the seq of its latest turn.
    queued: tuple[float, int] | None = None
    seq: int = 0


@dataclass(frozen=True, slots=True)
class _Remembered:
    partition: int | None
    revision: int
    turns: tuple[HeldTurn, ...]
    flags: tuple[Flag, ...] = ()


def ordered(turns: Iterable[HeldTurn]) -> tuple[Transcript, ...]:
    return tuple(t.transcript for t in sorted(turns, key=lambda t: t.order))


class ConversationStore:
    """Open conversations of the rubrics in ``specs`` (rubric id -> its conversation settings)."""

    def __init__(
        self,
        specs: Mapping[str, ConversationSpec],
        *,
        max_open: int = 100_000,
        decided_memory: int = 10_000,
        max_known: int = 0,
    ) -> None:
        self.specs = dict(specs)
        self.max_open = max_open
        self.decided_memory = decided_memory
        self.max_known = max_known
        self.stats = StoreStats()
        # Least recently active first: the eviction order.
        self._open: OrderedDict[Key, _Open] = OrderedDict()
        self._decided: OrderedDict[Key, _Remembered] = OrderedDict()
        # Per eval_turns partition, least recently decided first.
        self._known: dict[int, OrderedDict[Key, Known]] = {}
        # (partition, key) evicted from _known since the stage last took them (tombstones).
        self.evicted_state: list[tuple[int, Key]] = []
        # (deadline, seq, key); entries whose deadline is no longer the key's are skipped.
        self._deadlines: list[tuple[float, int, Key]] = []
        self._seq = itertools.count()
        # Turns of the open conversations, counted as they come and go.
        self._held_turns = 0

    @property
    def open_conversations(self) -> int:
        return len(self._open)

    @property
    def held_turns(self) -> int:
        return self._held_turns

    @property
    def known_conversations(self) -> int:
        return sum(len(k) for k in self._known.values())

    def known(self, key: Key) -> Known | None:
        for entries in self._known.values():
            if (found := entries.get(key)) is not None:
                return found
        return None

    def wanted(self, rubric_id: str, record: TurnRecord) -> Known | None:
        """The decided conversation ``record`` re-opens when its turns must be read back first.

        Only when it is known by place alone (not open, transcripts not
        remembered) and ``record`` is not one of its turns.
        """
        key = (rubric_id, record.conversation_id)
        if rubric_id not in self.specs or key in self._open or key in self._decided:
            return None
        known = self.known(key)
        if known is None or any(p.trace_id == record.trace_id for p in known.places):
            return None
        return known

    def reopen_with(
        self,
        key: Key,
        known: Known,
        found: Iterable[tuple[Place, TurnRecord]],
        missing: int,
    ) -> None:
        """Remember ``known`` with the turns read back; ``missing`` of them could not be."""
        turns = tuple(
            sorted(
                (
                    HeldTurn(record.transcript(), record.start_unix_nano, None, place.ref)
                    for place, record in found
                ),
                key=lambda t: t.order,
            )
        )
        flags = known.flags
        if missing:
            flags = _with_partial(flags, Flag.EARLIER_TURNS_MISSING)
        partition = known.places[-1].partition if known.places else None
        self._remember(key, _Remembered(partition, known.revision, turns, flags))

    def load_known(self, partition: int, entries: Iterable[tuple[Key, Known]]) -> int:
        """Restore the decided conversations of ``partition`` (oldest first); how many were."""
        count = 0
        for key, known in entries:
            self._know(partition, key, known)
            count += 1
        return count

    def add(
        self, rubric_id: str, record: TurnRecord, now: float, ref: RecordRef | None = None
    ) -> list[DecidedConversation]:
        """Hold one turn; return what that decided (``max_turns``, ``evicted``)."""
        spec = self.specs.get(rubric_id)
        if spec is None:
            self.stats.unknown_rubric += 1
            return []
        key = (rubric_id, record.conversation_id)
        conversation = self._open.get(key)
        if conversation is None:
            remembered = self._decided.get(key)
            known = self.known(key)
            if (
                remembered is not None
                and any(t.transcript.trace_id == record.trace_id for t in remembered.turns)
            ) or (known is not None and any(p.trace_id == record.trace_id for p in known.places)):
                self.stats.duplicates += 1
                return []
            conversation = _Open(
                partition=ref.partition if ref is not None else None,
                opened_at=now,
                last_at=now,
                revision=1,
                turns={},
            )
            if remembered is not None:
                del self._decided[key]
                self.stats.reopened += 1
                conversation.revision = remembered.revision + 1
                conversation.flags = remembered.flags
                conversation.turns = {
                    t.transcript.trace_id: HeldTurn(t.transcript, t.start_unix_nano, None, t.at)
                    for t in remembered.turns
                }
                self._held_turns += len(conversation.turns)
            elif known is not None:
                # Known by place but its turns were not read back: judged without them, flagged.
                self.stats.reopened += 1
                conversation.revision = known.revision + 1
                conversation.flags = _with_partial(known.flags, Flag.EARLIER_TURNS_MISSING)
            else:
                # Whether turns came before the first one held is known only at the
                # decision: turns of one conversation may arrive out of order.
                conversation.history = {}
            if Flag.PARTIAL in conversation.flags:
                self.stats.partial += 1
            self._open[key] = conversation
        elif record.trace_id in conversation.turns:
            self.stats.duplicates += 1
            return []
        self.stats.turns += 1
        if conversation.history is not None:
            conversation.history[record.trace_id] = record.earlier_user_messages
        conversation.turns[record.trace_id] = HeldTurn(
            record.transcript(), record.start_unix_nano, ref, ref
        )
        self._held_turns += 1
        if ref is not None:
            lower(conversation.lowest, ref)
        conversation.last_at = now
        self._open.move_to_end(key)
        # One entry per conversation: a later turn only moves its deadline later, and the
        # entry is queued again with it when it comes up (``due``). So the queue holds
        # about one entry per open conversation, not one per turn.
        conversation.seq = next(self._seq)
        deadline = self._deadline(key, conversation)
        if conversation.queued is None or deadline < conversation.queued[0]:
            self._queue(key, conversation, deadline)
        decided: list[DecidedConversation] = []
        if len(conversation.turns) >= spec.max_turns:
            decided.append(self._decide(key, ConversationReason.MAX_TURNS))
        while len(self._open) > self.max_open:
            oldest = next(iter(self._open))
            self.stats.evicted += 1
            decided.append(self._decide(oldest, ConversationReason.EVICTED))
        return decided

    def _deadline(self, key: Key, conversation: _Open) -> float:
        spec = self.specs[key[0]]
        return min(
            conversation.last_at + spec.idle_timeout_s, conversation.opened_at + spec.max_age_s
        )

    def _queue(self, key: Key, conversation: _Open, deadline: float) -> None:
        conversation.queued = (deadline, conversation.seq)
        heapq.heappush(self._deadlines, (deadline, conversation.seq, key))

    def due(self, now: float, limit: int | None = None) -> list[DecidedConversation]:
        """Conversations idle for ``idle_timeout_s`` or open for ``max_age_s``, at most ``limit``."""
        decided: list[DecidedConversation] = []
        while self._deadlines and (limit is None or len(decided) < limit):
            deadline, seq, key = self._deadlines[0]
            if deadline > now:
                break
            heapq.heappop(self._deadlines)
            conversation = self._open.get(key)
            if conversation is None or conversation.queued != (deadline, seq):
                continue  # decided already (this entry is an earlier one's)
            current = self._deadline(key, conversation)
            if current != deadline:
                # Moved by a later turn: queued again as that turn would have queued it.
                self._queue(key, conversation, current)
                continue
            spec = self.specs[key[0]]
            idle = now - conversation.last_at >= spec.idle_timeout_s
            reason = ConversationReason.IDLE if idle else ConversationReason.MAX_AGE
            decided.append(self._decide(key, reason))
        return decided

    def drain(self, reason: ConversationReason) -> list[DecidedConversation]:
        """Decide every open conversation (end of input)."""
        return [self._decide(key, reason) for key in list(self._open)]

    def _decide(self, key: Key, reason: ConversationReason) -> DecidedConversation:
        conversation = self._open.pop(key)
        self._held_turns -= len(conversation.turns)
        first = dict(conversation.lowest)
        held = tuple(sorted(conversation.turns.values(), key=lambda t: t.order))
        if (
            conversation.history is not None
            and held
            and conversation.history.get(held[0].transcript.trace_id, 0) > 0
        ):
            # The earliest turn held shows user messages before it that no turn held has.
            conversation.flags = _with_partial(conversation.flags, Flag.EARLIER_TURNS_UNSEEN)
            self.stats.partial += 1
        self._remember(
            key,
            _Remembered(conversation.partition, conversation.revision, held, conversation.flags),
        )
        places = tuple(
            Place(t.transcript.trace_id, t.at.partition, t.at.offset, t.start_unix_nano)
            for t in held
            if t.at is not None
        )
        partition = places[-1].partition if places else conversation.partition
        if partition is not None:
            self._know(
                partition, key, Known(conversation.revision, places, 0.0, conversation.flags)
            )
        flags = (Flag.DECIDED_EARLY,) if reason is ConversationReason.EVICTED else ()
        return DecidedConversation(
            rubric_id=key[0],
            conversation_id=key[1],
            turns=tuple(t.transcript for t in held),
            reason=reason,
            revision=conversation.revision,
            first_offsets=first,
            flags=(*flags, *conversation.flags),
            places=places,
            partition=partition,
        )

    def _remember(self, key: Key, remembered: _Remembered) -> None:
        self._decided[key] = remembered
        self._decided.move_to_end(key)
        while len(self._decided) > self.decided_memory:
            self._decided.popitem(last=False)
            self.stats.forgotten += 1

    def _know(self, partition: int, key: Key, known: Known) -> None:
        if self.max_known <= 0:
            return
        for other, entries in self._known.items():
            if other != partition:
                entries.pop(key, None)
        entries = self._known.setdefault(partition, OrderedDict())
        entries[key] = known
        entries.move_to_end(key)
        while len(entries) > self.max_known:
            gone, _ = entries.popitem(last=False)
            self.stats.state_evicted += 1
            self.evicted_state.append((partition, gone))

    def held_offsets(self) -> dict[int, int]:
        """Lowest offset per partition held by a turn of an open conversation."""
        held: dict[int, int] = {}
        for conversation in self._open.values():
            for p, o in conversation.lowest.items():
                held[p] = min(o, held.get(p, o))
        return held

    def drop_partitions(self, partitions: Iterable[int]) -> int:
        """Forget the conversations of revoked partitions (the new owner re-reads them)."""
        gone = set(partitions)
        dropped = [k for k, c in self._open.items() if c.partition in gone]
        for key in dropped:
            self._held_turns -= len(self._open.pop(key).turns)
        for key in [k for k, r in self._decided.items() if r.partition in gone]:
            del self._decided[key]
        for partition in gone:
            self._known.pop(partition, None)
        return len(dropped)


def _with_partial(flags: Iterable[Flag], reason: Flag) -> tuple[Flag, ...]:
    raised = {*flags, Flag.PARTIAL, reason}
    return tuple(f for f in Flag if f in raised)
