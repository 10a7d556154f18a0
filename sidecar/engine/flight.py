"""Items in flight: each decided item's stage, and the one place that moves it on.

An item (a trace, a conversation, a dead-lettered record) leaves its buffer
*decided*. From then until its outputs are acknowledged it holds the offsets
it was read from, and it is in exactly one stage::

    WAITING ──take──> PLANNING ──finishing──> FINISHING ──release──> (released)
       │                  │                       │
       └──────────────────┴────── abandon ────────┴──> (abandoned: offsets stay held)

- ``WAITING``: decided while the in-flight bound was reached; first in,
  first out;
- ``PLANNING``: on the planning thread (transcript, checks, screening);
- ``FINISHING``: judging, emitting, waiting for the broker's acknowledgement;
- released: its offsets are free (the commit may pass them);
- abandoned: cancelled at shutdown or its evaluation lost; its offsets are
  never released, so the next owner reads its records again.

``limit`` bounds the items planning or finishing; waiting ones count
against back-pressure (:attr:`Flight.busy`), not against the limit.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from sidecar.ingest.offsets import Held, TopicOffsets

T = TypeVar("T")


class Stage(enum.Enum):
    WAITING = "waiting"
    PLANNING = "planning"
    FINISHING = "finishing"
    RELEASED = "released"
    ABANDONED = "abandoned"


_MOVES: dict[Stage, frozenset[Stage]] = {
    Stage.WAITING: frozenset({Stage.PLANNING, Stage.ABANDONED}),
    Stage.PLANNING: frozenset({Stage.FINISHING, Stage.RELEASED, Stage.ABANDONED}),
    Stage.FINISHING: frozenset({Stage.RELEASED, Stage.ABANDONED}),
    Stage.RELEASED: frozenset(),
    Stage.ABANDONED: frozenset(),
}


@dataclass(eq=False, slots=True)
class Item(Generic[T]):
    """One decided item with its hold token and stage (compared by identity)."""

    value: T
    token: int
    decided_at: float
    stage: Stage = Stage.WAITING


@dataclass(slots=True)
class FlightStats:
    """Items in each stage now; ``released`` and ``abandoned`` count since start."""

    waiting: int = 0
    planning: int = 0
    finishing: int = 0
    released: int = 0
    abandoned: int = 0


class Flight(Generic[T]):
    """The decided items of one engine, by stage, and the offsets they hold."""

    def __init__(self, offsets: TopicOffsets, limit: int) -> None:
        self.offsets = offsets
        self.limit = limit
        self._waiting: deque[Item[T]] = deque()
        self._running: set[Item[T]] = set()
        # Items finishing outside the limit (dead letters being sent): busy, but take no room.
        self._aside: set[Item[T]] = set()
        self.stats = FlightStats()

    # -- what the engine asks ------------------------------------------------------

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def running(self) -> int:
        """Items planning or finishing."""
        return len(self._running)

    @property
    def busy(self) -> int:
        """Everything decided and not yet released: what back-pressure looks at."""
        return len(self._waiting) + len(self._running) + len(self._aside)

    def room(self) -> int:
        return max(0, self.limit - len(self._running))

    # -- the moves -------------------------------------------------------------------

    def decided(self, value: T, held: Held, now: float) -> Item[T]:
        """A new item holding ``held`` (``{topic: {partition: offset}}``); it waits for room."""
        item = Item(value, self.offsets.hold(held), now)
        self._waiting.append(item)
        self.stats.waiting += 1
        return item

    def running_now(self, value: T, held: Held, now: float) -> Item[T]:
        """A new item that finishes at once, outside the limit (a dead letter being sent)."""
        item = Item(value, self.offsets.hold(held), now, Stage.FINISHING)
        self._aside.add(item)
        self.stats.finishing += 1
        return item

    def take(self, count: int) -> list[Item[T]]:
        """Up to ``count`` waiting items, oldest first, moved to PLANNING."""
        taken: list[Item[T]] = []
        while self._waiting and len(taken) < count:
            item = self._waiting.popleft()
            self._move(item, Stage.PLANNING)
            self._running.add(item)
            taken.append(item)
        return taken

    def finishing(self, item: Item[T]) -> None:
        self._move(item, Stage.FINISHING)

    def release(self, item: Item[T]) -> None:
        """The item's outputs are acknowledged (or it ended in a fault): free its offsets."""
        if item.stage in (Stage.RELEASED, Stage.ABANDONED):
            return
        self._move(item, Stage.RELEASED)
        self._running.discard(item)
        self._aside.discard(item)
        self.offsets.release(item.token)

    def abandon(self, items: Iterable[Item[T]]) -> int:
        """Cancelled: leave the offsets held so the records are read again. Returns how many."""
        count = 0
        for item in items:
            if item.stage in (Stage.RELEASED, Stage.ABANDONED):
                continue
            if item.stage is Stage.WAITING:
                self._waiting.remove(item)
            self._move(item, Stage.ABANDONED)
            self._running.discard(item)
            self._aside.discard(item)
            count += 1
        return count

    def abandon_all(self) -> int:
        return self.abandon([*self._waiting, *self._running, *self._aside])

    def _move(self, item: Item[T], to: Stage) -> None:
        if to not in _MOVES[item.stage]:
            raise ValueError(f"an item cannot move from {item.stage.value} to {to.value}")
        for stage, delta in ((item.stage, -1), (to, +1)):
            name = stage.value
            setattr(self.stats, name, getattr(self.stats, name) + delta)
        item.stage = to
