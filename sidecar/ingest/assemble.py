"""Group spans into traces and decide when a trace is finished.

A trace is *complete* when its root span has arrived (spans are exported once
they end) and ``decision_wait`` has passed with no new span for it. A trace
that never completes is decided at ``max_trace_age``. Memory is bounded:

- ``max_open_traces``: adding a new trace past the bound decides the oldest
  open trace early (``evicted``, flagged truncated);
- ``max_spans_per_trace``: a trace reaching the bound is decided at once
  (``span_limit``, truncated); its later spans count as late;
- decided trace ids are remembered in a bounded LRU so late spans get a
  consistent answer (counted, ignored);
- a span whose id is already in its trace is a redelivery when it is equal
  to the first copy (counted, ignored); a *different* span under the same id
  is kept beside the first (counted), and the transcript flags the trace
  ``duplicate_span_ids``: silently keeping one would let a forged copy hide
  the other.

``due(now, limit)`` hands on at most ``limit`` traces, so a caller with a
bounded number of traces in flight leaves the rest here (still holding their
offsets) until it has room, however many come due at once.

A span whose parent is not in the trace (a remote parent, e.g. an HTTP
server span exported elsewhere) is the root when it is a SERVER or INTERNAL
span that ``root_spans`` accepts: by default the root spans the tracing
conventions declare (``sidecar.evaluate.conventions.ROOT_SPANS``), taken here as data.

Log records (the second input, GenAI content as events) join the trace
their trace id names: :meth:`Assembler.add_logs`. They may come before or
after the trace's spans; one for an open or new trace is kept with it (and
holds its logs-topic offset), counts as activity for ``decision_wait`` and
towards ``max_spans_per_trace`` (a bound on buffered records); one for a
decided trace is late (counted, ignored, like a late span); one without a
trace id is counted and ignored. Whether a trace is complete is still
decided by its spans alone: logs never make a root.

Nothing is dropped silently: every early decision and every late span is
counted in :class:`AssemblerStats`. Time is passed in as ``now`` (seconds,
monotonic); the assembler never reads a clock.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from sidecar.evaluate.conventions import ROOT_SPANS, RootSpans
from sidecar.ingest.decode import (
    DecodedRecord,
    Encoding,
    Held,
    ScannedSpans,
    decode_held,
    scan_record,
)
from sidecar.ingest.offsets import lower
from sidecar.ingest.packed import PackedLogs
from sidecar.model import DecideReason, LogRecord, RecordRef, Span, SpanKind, Trace


@dataclass(slots=True)
class AssemblerStats:
    spans: int = 0
    late_spans: int = 0
    evicted_open_traces: int = 0
    span_limit_hits: int = 0
    orphan_traces: int = 0
    dropped_revoked: int = 0
    redelivered_spans: int = 0
    duplicate_span_ids: int = 0
    logs: int = 0
    late_logs: int = 0
    logs_without_trace: int = 0
    # Traces open now (a gauge; the others count since start).
    open: int = 0


# What an open trace holds of its spans, in arrival order: decoded spans, or a
# record (as read, or the part of it for this trace) held undecoded: protobuf bytes,
# or spans decoded on arrival and packed (OTLP/JSON); decoded when the trace is decided.
_Part = Span | Held
_NO_LOGS: tuple[LogRecord, ...] = ()


@dataclass(slots=True)
class _Open:
    trace_id: str
    first_arrival: float
    last_arrival: float
    parts: list[_Part] = field(default_factory=list)
    # Span id of the first copy under each id -> its parent id (None for none); ids as
    # 8 raw bytes when they are lowercase hex (always, from the decoders).
    ids: dict[bytes | str, bytes | str | None] = field(default_factory=dict)
    # Spans kept (copies under an id already seen included).
    spans: int = 0
    duplicates: bool = False
    first_offsets: dict[int, int] = field(default_factory=dict)
    # Log records as decoded, or packed (a call's records for this trace).
    logs: list[LogRecord | PackedLogs] | tuple[LogRecord, ...] = _NO_LOGS
    log_count: int = 0
    first_log_offsets: dict[int, int] | None = None
    # has_root's answer until the next span arrives (due() asks on every round).
    rooted: bool | None = None
    # The decoded spans, kept from has_root to the decision when it found a root.
    decoded: list[Span] | None = None
    # The first span under each id, once two spans of the trace shared an id: from
    # then on the trace holds its spans decoded (redeliveries are compared).
    firsts: dict[bytes | str, Span] | None = None

    def decode(self) -> list[Span]:
        if self.decoded is not None:
            return self.decoded
        spans: list[Span] = []
        for part in self.parts:
            if isinstance(part, Span):
                spans.append(part)
            else:
                spans.extend(decode_held(part))
        return spans

    def has_root(self, root_spans: RootSpans) -> bool:
        if self.rooted is None:
            parents = self.ids.values()
            if None in parents:
                self.rooted = True
            elif not self.duplicates and all(parent in self.ids for parent in parents):
                self.rooted = False
            else:
                # A parent outside the trace (or copies under one id): the spans decide.
                spans = self.decode()
                span_ids = {s.span_id for s in spans}
                self.rooted = any(_is_root(s, span_ids, root_spans) for s in spans)
                if self.rooted:
                    self.decoded = spans
        return self.rooted

    def to_trace(self, reason: DecideReason, truncated: bool, root_spans: RootSpans) -> Trace:
        has_root = self.has_root(root_spans)
        spans = sorted(self.decode(), key=lambda s: (s.start_time_unix_nano, s.span_id))
        return Trace(
            trace_id=self.trace_id,
            spans=tuple(spans),
            reason=reason,
            truncated=truncated,
            has_root=has_root,
            first_offsets=dict(self.first_offsets),
            logs=tuple(_unpacked(self.logs)),
            first_log_offsets=dict(self.first_log_offsets or {}),
        )

    @property
    def records(self) -> int:
        return self.spans + self.log_count

    def changed(self) -> None:
        self.rooted = None
        self.decoded = None


def _unpacked(logs: Iterable[LogRecord | PackedLogs]) -> Iterator[LogRecord]:
    for item in logs:
        if isinstance(item, PackedLogs):
            yield from item.logs()
        else:
            yield item


def _id_key(span_id: str | None) -> bytes | str | None:
    """The key of a hex span id in ``_Open.ids``: its 8 bytes (the scanned records' form)."""
    if span_id is None or len(span_id) != 16:
        return span_id
    try:
        raw = bytes.fromhex(span_id)
    except ValueError:
        return span_id
    return raw if raw.hex() == span_id else span_id


def _is_root(span: Span, span_ids: Container[str], root_spans: RootSpans) -> bool:
    if span.parent_span_id is None:
        return True
    if span.parent_span_id in span_ids:
        return False
    # A remote parent: accept an agent invocation span as the root of this trace.
    return span.kind in (SpanKind.SERVER, SpanKind.INTERNAL) and root_spans.matches(span)


# Seconds without a new span after the root ended before a trace is decided (the default).
DECISION_WAIT_S = 5.0


class Assembler:
    """Bounded per-trace span buffer with a deterministic decision rule."""

    def __init__(
        self,
        *,
        decision_wait: float = DECISION_WAIT_S,
        max_trace_age: float = 120.0,
        max_open_traces: int = 50_000,
        max_spans_per_trace: int = 2_000,
        decided_memory: int = 200_000,
        root_spans: RootSpans = ROOT_SPANS,
    ) -> None:
        if min(max_open_traces, max_spans_per_trace, decided_memory) < 1:
            raise ValueError("assembler bounds must be at least 1")
        self.decision_wait = decision_wait
        self.max_trace_age = max_trace_age
        self.max_open_traces = max_open_traces
        self.max_spans_per_trace = max_spans_per_trace
        self.decided_memory = decided_memory
        self.root_spans = root_spans
        self.stats = AssemblerStats()
        # Insertion order of _open is first arrival; _quiet is ordered by last arrival.
        # Both are read from the front as entries leave from there: an OrderedDict finds
        # its first entry at once, where a dict steps over every slot freed since it was
        # last resized (27 µs against 0.3 per eviction at 50,000 open traces).
        self._open: OrderedDict[str, _Open] = OrderedDict()
        # The lowest first offsets of the open traces, per partition (held_offsets).
        self._held_spans = _HeldOffsets(self._open, _span_offsets)
        self._held_logs = _HeldOffsets(self._open, _log_offsets)
        self._quiet: OrderedDict[str, None] = OrderedDict()
        self._decided: OrderedDict[str, None] = OrderedDict()
        # The record add_record is reading, and its spans not yet in their traces' parts.
        self._scanned: ScannedSpans | DecodedRecord | None = None
        self._pending: dict[str, list[int]] = {}

    @property
    def open_traces(self) -> int:
        return len(self._open)

    def add(self, spans: Iterable[Span], now: float, ref: RecordRef | None = None) -> list[Trace]:
        """Buffer spans; returns traces decided early because a bound was hit."""
        early: list[Trace] = []
        for span in spans:
            self.stats.spans += 1
            trace_id = span.trace_id
            if trace_id in self._decided:
                self.stats.late_spans += 1
                continue
            entry = self._entry(trace_id, now, early)
            key = _id_key(span.span_id)
            assert key is not None
            if self._keep(entry, key, _id_key(span.parent_span_id), span):
                self._added(entry, now, ref, early)
        return early

    def add_record(
        self, payload: bytes, encoding: Encoding, now: float, ref: RecordRef | None = None
    ) -> list[Trace]:
        """Buffer the spans of one record as :func:`~sidecar.ingest.decode.decode` reads it.

        A record is kept as read (or, when it holds spans of other traces or
        copies already seen, the part of it for each trace) and decoded when
        its trace is decided: protobuf as its bytes; a record that must be
        decoded to be read (OTLP/JSON, protobuf read leniently) as its spans
        packed (:class:`~sidecar.ingest.packed.PackedSpans`). An open trace
        costs about its protobuf bytes. Raises DecodeError as ``decode``
        does. Returns traces decided early because a bound was hit.
        """
        scanned = scan_record(payload, encoding)
        early: list[Trace] = []
        self._scanned = scanned
        self._pending = {}
        try:
            for index, (trace_id, span_id, parent) in enumerate(scanned.spans):
                self.stats.spans += 1
                if trace_id in self._decided:
                    self.stats.late_spans += 1
                    continue
                entry = self._entry(trace_id, now, early)
                if entry.firsts is None and span_id not in entry.ids:
                    entry.ids[span_id] = parent
                    self._pending.setdefault(trace_id, []).append(index)
                else:
                    self._flush(trace_id)
                    if not self._keep(entry, span_id, parent, scanned.span(index)):
                        continue
                self._added(entry, now, ref, early)
            for trace_id in list(self._pending):
                self._flush(trace_id)
        finally:
            self._scanned = None
            self._pending = {}
        return early

    def _flush(self, trace_id: str) -> None:
        """The current record's spans of ``trace_id`` go to its parts."""
        indices = self._pending.pop(trace_id, None)
        if not indices or self._scanned is None:
            return
        scanned = self._scanned
        entry = self._open[trace_id]
        try:
            if len(indices) == len(scanned.spans):
                entry.parts.append(scanned.held())  # the whole record is this trace's
            else:
                entry.parts.append(scanned.subset(indices))
        except ValueError:  # a value packing cannot write (no decoder makes one): kept decoded
            entry.parts.extend(scanned.span(index) for index in indices)

    def _keep(self, entry: _Open, key: bytes | str, parent: bytes | str | None, span: Span) -> bool:
        """Whether ``span`` is new to ``entry`` (then held): a redelivery is not (counted)."""
        if key not in entry.ids:
            entry.ids[key] = parent
            if entry.firsts is not None:
                entry.firsts[key] = span
        else:
            if entry.firsts is None:
                spans = entry.decode()
                entry.parts = list(spans)
                entry.firsts = {}
                for held in spans:
                    entry.firsts.setdefault(_id_key(held.span_id) or "", held)
            if entry.firsts.get(key) == span:
                self.stats.redelivered_spans += 1
                return False  # the same span delivered again; nothing new
            self.stats.duplicate_span_ids += 1
            entry.duplicates = True
        entry.parts.append(span)
        return True

    def _added(self, entry: _Open, now: float, ref: RecordRef | None, early: list[Trace]) -> None:
        entry.spans += 1
        entry.changed()
        self._touch(entry, now)
        if ref is not None and lower(entry.first_offsets, ref):
            self._held_spans.lowered(ref, entry.trace_id)
        self._check_limit(entry, early)

    def add_logs(
        self, logs: Iterable[LogRecord], now: float, ref: RecordRef | None = None
    ) -> list[Trace]:
        """Buffer log records with their traces (``ref`` is on the logs topic).

        The records of one call are held packed per trace
        (:class:`~sidecar.ingest.packed.PackedLogs`) once the call has read
        them all. Returns traces decided early because a bound was hit.
        """
        early: list[Trace] = []
        # Open traces given records in this call, with where their new records start.
        fed: dict[str, tuple[_Open, int]] = {}
        for log in logs:
            self.stats.logs += 1
            trace_id = log.trace_id
            if trace_id is None:
                self.stats.logs_without_trace += 1
                continue
            if trace_id in self._decided:
                self.stats.late_logs += 1
                continue
            entry = self._entry(trace_id, now, early)
            if not isinstance(entry.logs, list):
                entry.logs = []
            if trace_id not in fed or fed[trace_id][0] is not entry:
                fed[trace_id] = (entry, len(entry.logs))
            entry.logs.append(log)
            entry.log_count += 1
            self._touch(entry, now)
            if ref is not None:
                if entry.first_log_offsets is None:
                    entry.first_log_offsets = {}
                if lower(entry.first_log_offsets, ref):
                    self._held_logs.lowered(ref, entry.trace_id)
            self._check_limit(entry, early)
        for trace_id, (entry, start) in fed.items():
            if self._open.get(trace_id) is entry and isinstance(entry.logs, list):
                new = entry.logs[start:]
                try:
                    packed = PackedLogs.of(new)  # type: ignore[arg-type]  # all LogRecords
                except ValueError:  # a value packing cannot write (no decoder makes one)
                    continue
                entry.logs[start:] = [packed]
        return early

    def _entry(self, trace_id: str, now: float, early: list[Trace]) -> _Open:
        entry = self._open.get(trace_id)
        if entry is None:
            if len(self._open) >= self.max_open_traces:
                oldest = next(iter(self._open))
                self.stats.evicted_open_traces += 1
                early.append(self._decide(oldest, DecideReason.EVICTED, truncated=True))
            entry = _Open(trace_id, first_arrival=now, last_arrival=now)
            self._open[trace_id] = entry
            self.stats.open = len(self._open)
        return entry

    def _touch(self, entry: _Open, now: float) -> None:
        entry.last_arrival = now
        self._quiet[entry.trace_id] = None
        self._quiet.move_to_end(entry.trace_id)

    def _check_limit(self, entry: _Open, early: list[Trace]) -> None:
        if entry.records >= self.max_spans_per_trace:
            self.stats.span_limit_hits += 1
            early.append(self._decide(entry.trace_id, DecideReason.SPAN_LIMIT, truncated=True))

    def due(self, now: float, limit: int | None = None) -> list[Trace]:
        """Traces whose decision time has come, at most ``limit`` (oldest first)."""
        room = len(self._open) if limit is None else limit
        decided: list[Trace] = []
        aged: list[str] = []
        for trace_id, entry in self._open.items():
            # First-arrival order: the first young trace ends the aged prefix.
            if now - entry.first_arrival < self.max_trace_age or len(aged) >= room:
                break
            aged.append(trace_id)
        for trace_id in aged:
            decided.append(self._decide(trace_id, DecideReason.MAX_AGE, truncated=False))
        # Quiet traces in last-arrival order, up to the first that is not quiet yet. One
        # without its root waits for more spans (or its age) outside this queue: only a
        # new span can root it, and a new span queues it again (``_touch``). So each call
        # reads the traces it decides, not every open one.
        complete: list[str] = []
        rootless: list[str] = []
        for trace_id in self._quiet:
            if len(decided) + len(complete) >= room:
                break
            entry = self._open[trace_id]
            if now - entry.last_arrival < self.decision_wait:
                break
            (complete if entry.has_root(self.root_spans) else rootless).append(trace_id)
        for trace_id in rootless:
            del self._quiet[trace_id]
        for trace_id in complete:
            decided.append(self._decide(trace_id, DecideReason.COMPLETE, truncated=False))
        return decided

    def drain(self, reason: DecideReason, *, require_root: bool = False) -> list[Trace]:
        """Decide every open trace now (end of input, or shutdown).

        With ``require_root`` traces without a root are not decided: they stay
        open and keep holding their offsets in :meth:`held_offsets`, so their
        records stay uncommitted and the next owner reads them again.
        """
        decided: list[Trace] = []
        for trace_id in list(self._open):
            entry = self._open[trace_id]
            if require_root and not entry.has_root(self.root_spans):
                continue
            decided.append(self._decide(trace_id, reason, truncated=False))
        return decided

    def drop_partitions(self, partitions: Iterable[int]) -> list[str]:
        """Forget undecided traces fed by any of ``partitions`` (on revoke)."""
        # The topics are co-partitioned: partition i of spans and of logs go together.
        revoked = set(partitions)
        dropped = [
            tid
            for tid, entry in self._open.items()
            if revoked.intersection(entry.first_offsets)
            or revoked.intersection(entry.first_log_offsets or ())
        ]
        for trace_id in dropped:
            self._forget(trace_id)
        self.stats.dropped_revoked += len(dropped)
        return dropped

    def held_offsets(self) -> dict[int, int]:
        """Lowest offset per partition still needed by an undecided trace."""
        return self._held_spans.lowest()

    def held_log_offsets(self) -> dict[int, int]:
        """Lowest logs-topic offset per partition still needed by an undecided trace."""
        return self._held_logs.lowest()

    def _forget(self, trace_id: str) -> None:
        del self._open[trace_id]
        self._quiet.pop(trace_id, None)
        self.stats.open = len(self._open)

    def _decide(self, trace_id: str, reason: DecideReason, *, truncated: bool) -> Trace:
        self._flush(trace_id)
        entry = self._open[trace_id]
        self._forget(trace_id)
        self._decided[trace_id] = None
        if len(self._decided) > self.decided_memory:
            self._decided.popitem(last=False)
        trace = entry.to_trace(reason, truncated, self.root_spans)
        if not trace.has_root:
            self.stats.orphan_traces += 1
        return trace


def _span_offsets(entry: _Open) -> Mapping[int, int]:
    return entry.first_offsets


def _log_offsets(entry: _Open) -> Mapping[int, int]:
    return entry.first_log_offsets or {}


# The heaps are never made again for fewer stale entries than this.
_REMAKE_FLOOR = 1024


class _HeldOffsets:
    """The lowest first offset per partition over the open traces, kept as they are fed.

    A commit (every ``commit_interval_s``) needs it, without reading every
    open trace. Each partition keeps a heap of (offset, trace id), pushed
    when a trace's first offset there is set or lowered. Entries of decided
    traces, or offsets since lowered, are dropped when they come to the top;
    when the entries pushed outnumber the open traces four to one, the next
    push makes the heaps again from the open traces, so they stay within a
    few entries per open trace.
    """

    __slots__ = ("_heaps", "_offsets_of", "_open", "_pushed")

    def __init__(
        self, open_traces: Mapping[str, _Open], offsets_of: Callable[[_Open], Mapping[int, int]]
    ) -> None:
        self._open = open_traces
        self._offsets_of = offsets_of
        self._heaps: dict[int, list[tuple[int, str]]] = {}
        self._pushed = 0  # entries pushed since the heaps were last made

    def lowered(self, ref: RecordRef, trace_id: str) -> None:
        # Made again here too: a reader that never commits (backfill) never reads them.
        if self._pushed > 4 * max(len(self._open), _REMAKE_FLOOR):
            self._remake()
        heapq.heappush(self._heaps.setdefault(ref.partition, []), (ref.offset, trace_id))
        self._pushed += 1

    def lowest(self) -> dict[int, int]:
        open_traces, offsets_of = self._open, self._offsets_of
        held: dict[int, int] = {}
        for partition, heap in list(self._heaps.items()):
            while heap:
                offset, trace_id = heap[0]
                entry = open_traces.get(trace_id)
                if entry is not None and offsets_of(entry).get(partition) == offset:
                    held[partition] = offset
                    break
                heapq.heappop(heap)
            else:
                del self._heaps[partition]
        return held

    def _remake(self) -> None:
        heaps: dict[int, list[tuple[int, str]]] = {}
        for trace_id, entry in self._open.items():
            for partition, offset in self._offsets_of(entry).items():
                heaps.setdefault(partition, []).append((offset, trace_id))
        for heap in heaps.values():
            heapq.heapify(heap)
        self._heaps = heaps
        self._pushed = sum(map(len, heaps.values()))
