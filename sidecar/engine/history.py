"""Evaluate history still in Kafka (``sidecar backfill``): the service's pipeline over a window.

The window, per partition of the spans topic:

- it starts at the first record whose timestamp is at or after ``--from``
  (Kafka's ``offsets_for_times``);
- it ends at the partition's end offset read when the backfill started (what
  is produced during the run is left to the live service), or at the first
  record whose timestamp is after ``--to``, whichever comes first. A position
  at or past the end offset also ends it, so gaps (compaction, transaction
  markers) do not keep a partition open.

The records are read by position (a :class:`~sidecar.ports.HistoryReader`:
manual assignment in the backfill's own consumer group), never as a member of the live group, whose
offsets do not move. Spans are assembled by the service's
:class:`~sidecar.ingest.assemble.Assembler` on *record time* (the newest record
timestamp read so far), so ``decision_wait`` and ``max_trace_age`` mean what
they mean live, and a long window is evaluated as it is read, within the
assembler's bounds. Traces still open at the end are decided as replay
decides them at the end of its files (:func:`sidecar.engine.offline.end_of_input`).
The traces are evaluated by :func:`sidecar.engine.offline.stream_verdicts` (the
pipeline's ``plan`` and ``judge_cases``), ``concurrency`` at a time; reading
waits while every slot is taken. Each verdict goes to :class:`Output` with
``backfill`` set, decided (``decided_at``) the assembler's ``decision_wait``
after its trace's end, as live; once every one is acknowledged, the end
positions are committed to the backfill's own group.

Time arguments (:func:`parse_time`): ISO-8601 (a time without a zone is UTC),
``now``, or a time ago: ``30s``, ``30m``, ``2h``, ``1d``, ``1w``, also with a
minus (``--from -2h``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

from sidecar.engine.offline import ReplaySummary, end_of_input, stream_verdicts
from sidecar.errors import DecodeError, UsageError
from sidecar.evaluate.rubric import Rubric
from sidecar.evaluate.sample import Sampler
from sidecar.evaluate.verdict import Verdict
from sidecar.ingest.assemble import Assembler
from sidecar.ingest.decode import Encoding, decode
from sidecar.judge import Judge
from sidecar.model import RecordRef, Span, Trace
from sidecar.ports import HistoryReader

Decoder = Callable[[bytes, Encoding], list[Span]]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_RELATIVE = re.compile(r"-?(\d+(?:\.\d+)?)([smhdw])")
TIME_EXAMPLES = (
    "ISO-8601 like 2026-05-01T12:00:00Z (no zone = UTC), or relative like -2h, -30m, -1d"
)


def parse_time(text: str, flag: str, now: datetime) -> datetime:
    """``text`` as an aware datetime; a UsageError naming ``flag`` and an example when not a time."""
    value = text.strip()
    if value.lower() == "now":
        return now
    if match := _RELATIVE.fullmatch(value):
        try:
            return now - timedelta(seconds=float(match[1]) * _UNITS[match[2]])
        except OverflowError as exc:
            raise UsageError(f"{flag} {text!r} is too far back; give {TIME_EXAMPLES}") from exc
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as exc:
        raise UsageError(f"{flag} {text!r} is not a time; give {TIME_EXAMPLES}") from exc
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def window_times(start: str, end: str | None, now: datetime) -> tuple[datetime, datetime | None]:
    """``--from`` and ``--to`` parsed and checked against each other and ``now``."""
    since = parse_time(start, "--from", now)
    until = parse_time(end, "--to", now) if end is not None else None
    if since > now:
        raise UsageError(
            f"--from {start!r} is in the future ({since.isoformat()}); nothing to read"
        )
    if until is not None and until < since:
        raise UsageError(
            f"--to {end!r} ({until.isoformat()}) is before --from ({since.isoformat()})"
        )
    return since, until


def to_millis(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


class Output(Protocol):
    """Where backfill verdicts go: ``emit`` may return before the broker acknowledges."""

    async def emit(self, verdict: Verdict) -> None: ...

    async def flush(self) -> None:
        """Return once every emitted verdict is acknowledged; DeliveryError if one was not."""
        ...


class Window:
    """The stop rule, per partition: from ``starts`` to ``ends`` or the first record after ``to``."""

    def __init__(
        self, starts: Mapping[int, int], ends: Mapping[int, int], to_ms: int | None = None
    ) -> None:
        self.starts = {p: min(starts.get(p, end), end) for p, end in ends.items()}
        self.ends = dict(ends)
        self.to_ms = to_ms
        self.next = dict(self.starts)
        self.done = {p for p in self.ends if self.starts[p] >= self.ends[p]}
        self.stopped_at_to: set[int] = set()

    @property
    def total(self) -> int:
        """Records between the start and the end offsets (before any ``--to`` stop)."""
        return sum(self.ends[p] - self.starts[p] for p in self.ends)

    @property
    def finished(self) -> bool:
        return len(self.done) == len(self.ends)

    def admit(self, partition: int, offset: int, timestamp_ms: int | None) -> bool:
        """True when the record is inside the window; the first one past it ends its partition."""
        if partition in self.done or partition not in self.ends or offset < self.next[partition]:
            return False
        if offset >= self.ends[partition]:
            self.done.add(partition)
            return False
        if self.to_ms is not None and timestamp_ms is not None and timestamp_ms > self.to_ms:
            self.done.add(partition)
            self.stopped_at_to.add(partition)
            return False
        self.next[partition] = offset + 1
        if offset + 1 >= self.ends[partition]:
            self.done.add(partition)
        return True

    def reached(self, partition: int, position: int) -> None:
        """The reader's position: at or past the end offset, the partition is done."""
        if partition in self.ends and position >= self.ends[partition]:
            self.next[partition] = max(self.next[partition], self.ends[partition])
            self.done.add(partition)


@dataclass(slots=True)
class BackfillSummary:
    """What a backfill read and made; ``evaluation`` counts as replay does."""

    evaluation: ReplaySummary = field(default_factory=ReplaySummary)
    partitions: int = 0
    to_read: int = 0
    read: int = 0
    undecodable: int = 0
    stopped_at_to: int = 0


async def read_traces(
    history: HistoryReader,
    window: Window,
    assembler: Assembler,
    summary: BackfillSummary,
    *,
    encoding: Encoding = "auto",
    decoder: Decoder = decode,
) -> AsyncIterator[Trace]:
    """The window's traces, as the assembler decides them on record time, then the rest."""
    clock = 0.0
    counts = summary.evaluation
    history.finish(set(window.done))
    while not window.finished:
        records = await history.fetch()
        for record in records:
            if not window.admit(record.partition, record.offset, record.timestamp_ms):
                continue
            summary.read += 1
            counts.records += 1
            if record.timestamp_ms is not None:
                clock = max(clock, record.timestamp_ms / 1000)
            try:
                if record.value is None:
                    raise DecodeError("empty", "record has no value")
                spans = decoder(record.value, encoding)
            except DecodeError:
                summary.undecodable += 1
                continue
            counts.spans += len(spans)
            ref = RecordRef(record.partition, record.offset)
            for trace in assembler.add(spans, clock, ref):
                counts.traces += 1
                yield trace
        if not records:
            for partition, position in (await history.positions()).items():
                window.reached(partition, position)
        history.finish(set(window.done))
        for trace in assembler.due(clock):
            counts.traces += 1
            yield trace
    summary.stopped_at_to = len(window.stopped_at_to)
    for trace in end_of_input(assembler):
        counts.traces += 1
        yield trace


async def backfill(
    history: HistoryReader,
    output: Output,
    *,
    since: datetime,
    until: datetime | None,
    rubrics: Sequence[Rubric],
    sampler: Sampler,
    judge: Judge | None,
    assembler: Assembler,
    summary: BackfillSummary,
    concurrency: int = 1,
    clock: Callable[[], float] | None = None,
    encoding: Encoding = "auto",
    decoder: Decoder = decode,
    on_window: Callable[[Window], None] | None = None,
) -> Window:
    """Evaluate the window (see the module docstring); returns it, with where each partition ended.

    ``on_window`` is told the window once the offsets are known (a progress bar).
    """
    await history.start()
    try:
        # The end offsets first: they are "what was there when the backfill started".
        ends = await history.end_offsets()
        found = await history.offsets_for_time(to_millis(since))
        # No record at or after --from: the partition starts (and ends) at its end offset.
        starts = {p: ends[p] if (at := found.get(p)) is None else at for p in ends}
        window = Window(starts, ends, to_millis(until) if until is not None else None)
        summary.partitions = len(ends)
        summary.to_read = window.total
        if on_window is not None:
            on_window(window)
        await history.assign(window.starts)
        traces = read_traces(
            history, window, assembler, summary, encoding=encoding, decoder=decoder
        )
        async for _, verdicts in stream_verdicts(
            traces,
            rubrics,
            sampler,
            judge=judge,
            summary=summary.evaluation,
            clock=clock,
            concurrency=concurrency,
            decision_wait_s=assembler.decision_wait,
        ):
            for verdict in verdicts:
                await output.emit(dataclasses.replace(verdict, backfill=True))
        await output.flush()
        await history.commit(window.next)
    finally:
        await history.stop()
    return window
