"""Decoded spans and log records held compactly until their trace is decided.

The trace buffer holds a protobuf span record as its bytes. What it had to
decode on arrival (OTLP/JSON, protobuf read leniently, log records) would
otherwise be held as records, dicts and strings: several times their size
on the wire. :class:`PackedSpans` and :class:`PackedLogs` keep them as one
``marshal`` blob, about the size of the protobuf (5.1 KB for a six-span
agent trace that is 4.8 KB as protobuf and 8.1 KB as OTLP/JSON), and give
back equal records when the trace is decided. The blob is not compressed:
zlib would make it a quarter of that size, at twice the CPU time of
packing and reading it back.

The fields of the records are plain values (text, numbers, ``None``,
lists, dicts, tuples) apart from a span's kind, status and events, which
are stored as their values and rebuilt. Equal field by field, with one
exception ``==`` cannot see: a NaN value comes back as a NaN, which equals
nothing, not even the one packed.
"""

from __future__ import annotations

import dataclasses
import marshal
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sidecar.model import (
    LogRecord,
    Span,
    SpanKind,
    StatusCode,
    new_log_record,
    new_span,
    new_span_event,
)

__all__ = ["PackedLogs", "PackedSpans"]


@dataclass(frozen=True, slots=True)
class PackedSpans:
    """Spans packed by :meth:`of`; :meth:`spans` gives them back, equal and in order."""

    data: bytes

    @classmethod
    def of(cls, spans: Sequence[Span]) -> PackedSpans:
        """``spans`` packed; ValueError for a value ``marshal`` cannot write (no decoder makes one)."""
        rows: Any = tuple(
            (
                s.trace_id,
                s.span_id,
                s.parent_span_id,
                s.name,
                int(s.kind),
                s.start_time_unix_nano,
                s.end_time_unix_nano,
                s.attributes,
                s.resource,
                s.scope_name,
                int(s.status_code),
                s.status_message,
                tuple((e.name, e.time_unix_nano, e.attributes) for e in s.events),
                s.unreadable,
                s.repaired,
            )
            for s in spans
        )
        return cls(marshal.dumps(rows))

    def spans(self) -> list[Span]:
        spans = []
        for row in marshal.loads(self.data):
            (trace, span, parent, name, kind, start, end, attributes, resource) = row[:9]
            scope, status, message, events, unreadable, repaired = row[9:]
            spans.append(
                new_span(
                    trace,
                    span,
                    parent,
                    name,
                    _KINDS[kind],
                    start,
                    end,
                    attributes,
                    resource,
                    scope,
                    _STATUSES[status],
                    message,
                    tuple(new_span_event(*event) for event in events),
                    unreadable,
                    repaired,
                )
            )
        return spans


_KINDS = {int(kind): kind for kind in SpanKind}
_STATUSES = {int(status): status for status in StatusCode}


@dataclass(frozen=True, slots=True)
class PackedLogs:
    """Log records packed by :meth:`of`; :meth:`logs` gives them back, equal and in order."""

    data: bytes

    @classmethod
    def of(cls, logs: Sequence[LogRecord]) -> PackedLogs:
        """``logs`` packed; ValueError for a value ``marshal`` cannot write (no decoder makes one)."""
        rows: Any = tuple(map(_LOG_FIELDS, logs))
        return cls(marshal.dumps(rows))

    def logs(self) -> list[LogRecord]:
        return [new_log_record(*row) for row in marshal.loads(self.data)]


# A log record's fields in the order new_log_record takes them (all plain values).
_LOG_FIELDS = operator.attrgetter(*(f.name for f in dataclasses.fields(LogRecord)))
