"""GenAI content sent as events (OTLP log records), put back where span readers look for it.

The OTel GenAI conventions let a producer move message content off its
spans onto events, which SDKs export as OTLP log records carrying the trace
and span id of the span they belong to. :func:`join_logs` folds a trace's
log records into its spans, so every convention reader sees the content
exactly as if the span had carried it:

- ``gen_ai.client.inference.operation.details`` (ADK 2, the OTel GenAI
  utilities in ``EVENT_ONLY``): its content keys (:data:`CONTENT_KEYS`:
  ``gen_ai.input.messages``, ``gen_ai.output.messages``,
  ``gen_ai.system_instructions``, tool call arguments and results), taken
  from its attributes or from a kvlist body, become attributes of the span;
- the per-message events (:data:`MESSAGE_EVENTS`: ``gen_ai.system.message``,
  ``gen_ai.user.message``, ``gen_ai.assistant.message``,
  ``gen_ai.tool.message``, ``gen_ai.choice`` and the older
  ``gen_ai.content.prompt``/``completion``), whose body holds the message
  (``content``, ``tool_calls``, ``id``, ``message``), become span events with
  the body's fields as attributes, the shape span events of those names have.

The details event may also come as an event on the span itself (Strands,
OpenLLMetry's newer instrumentations): its content keys become attributes
the same way, so one reader (``sidecar.evaluate.conventions.content``) sees
attributes, span events and log records alike. A span may have several
details events, each with some of the keys; the first value of each key wins.

What the span carries itself wins (``SPAN_AND_EVENT`` sends both, equal);
records of other event names are left out. A record whose span is not in the
trace (or that names none) is read as a span of its own (an LLM call for the
details and message events), with the record's span id (``0000000000000000``
for none), parented on the trace's root span, or on a parent that is not in
the trace when there is no root, so the transcript flags it ``incomplete``
rather than take it for the run. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from sidecar.model import Attributes, AttrValue, LogRecord, Span, SpanEvent, SpanKind

__all__ = ["CONTENT_KEYS", "DETAILS_EVENT", "MESSAGE_EVENTS", "join_logs"]

DETAILS_EVENT = "gen_ai.client.inference.operation.details"
CONTENT_KEYS = (
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
)
MESSAGE_EVENTS = frozenset(
    {
        "gen_ai.system.message",
        "gen_ai.user.message",
        "gen_ai.assistant.message",
        "gen_ai.tool.message",
        "gen_ai.choice",
        "gen_ai.content.prompt",
        "gen_ai.content.completion",
    }
)
# Attributes that name the record, not the message.
_NAMING_KEYS = frozenset({"event.name", "event.domain"})
_NO_SPAN = "0" * 16
_MISSING_PARENT = "f" * 16


def join_logs(spans: Sequence[Span], logs: Sequence[LogRecord]) -> tuple[Span, ...]:
    """``spans`` with the content of ``logs`` folded in (see the module docstring)."""
    for span in spans:
        if span.events:  # a loop, not any(): most traces have no events to look at
            spans = [_with_details(span) if span.events else span for span in spans]
            break
    useful = [log for log in logs if log.event_name == DETAILS_EVENT or _is_message(log)]
    if not useful:
        return tuple(spans)
    by_span: dict[str, list[LogRecord]] = {}
    for log in sorted(useful, key=lambda log: log.time_unix_nano):
        by_span.setdefault(log.span_id or _NO_SPAN, []).append(log)
    joined = [_with_logs(span, by_span.pop(span.span_id, ())) for span in spans]
    root = _root_id(spans)
    for span_id, records in by_span.items():
        joined.append(_with_logs(_stand_in(span_id, records, root), records))
    return tuple(joined)


def _with_details(span: Span) -> Span:
    """``span`` with the content keys of its details span events as attributes."""
    found: dict[str, AttrValue] | None = None
    for event in span.events:
        if event.name != DETAILS_EVENT:
            continue
        for key in CONTENT_KEYS:
            value = event.attributes.get(key)
            if value is not None and span.attributes.get(key) is None:
                found = {} if found is None else found
                found.setdefault(key, value)
    if found is None:
        return span
    return replace(span, attributes={**span.attributes, **found})


def _is_message(log: LogRecord) -> bool:
    return log.event_name in MESSAGE_EVENTS


def _with_logs(span: Span, logs: Sequence[LogRecord]) -> Span:
    if not logs:
        return span
    attributes = dict(span.attributes)
    events = list(span.events)
    unreadable = span.unreadable
    for log in logs:
        unreadable += log.unreadable
        if log.event_name == DETAILS_EVENT:
            for key, value in _content(log).items():
                if attributes.get(key) is None:
                    attributes[key] = value
        else:
            events.append(SpanEvent(log.event_name, log.time_unix_nano, _message_fields(log)))
    return replace(span, attributes=attributes, events=tuple(events), unreadable=unreadable)


def _content(log: LogRecord) -> dict[str, AttrValue]:
    """The details event's content keys, from its attributes, else from a kvlist body."""
    found: dict[str, AttrValue] = {}
    body = log.body if isinstance(log.body, dict) else {}
    for key in CONTENT_KEYS:
        value = log.attributes.get(key)
        if value is None:
            value = body.get(key)
        if value is not None:
            found[key] = value
    return found


def _message_fields(log: LogRecord) -> Attributes:
    """A message event's attributes as a span event of its name carries them.

    The body's fields (``content``, ``tool_calls``, ``id``, ``message``, ...)
    join the record's attributes; a body that is plain text is the content.
    """
    fields: dict[str, AttrValue] = {
        key: value for key, value in log.attributes.items() if key not in _NAMING_KEYS
    }
    body = log.body
    if isinstance(body, Mapping):
        fields.update(body)
    elif body is not None:
        fields.setdefault("content", body)
    return fields


def _root_id(spans: Sequence[Span]) -> str:
    roots = [s for s in spans if s.parent_span_id is None]
    if not roots:
        return _MISSING_PARENT
    return min(roots, key=lambda s: (s.start_time_unix_nano, s.span_id)).span_id


def _stand_in(span_id: str, logs: Sequence[LogRecord], parent: str) -> Span:
    """A span for records whose own span is not in the trace: an LLM call at their time."""
    first = logs[0]
    return Span(
        trace_id=first.trace_id or "",
        span_id=span_id,
        parent_span_id=parent if parent != span_id else _MISSING_PARENT,
        name="chat",
        kind=SpanKind.CLIENT,
        start_time_unix_nano=first.time_unix_nano,
        end_time_unix_nano=logs[-1].time_unix_nano,
        attributes={"gen_ai.operation.name": "chat"},
        resource=first.resource,
        scope_name=first.scope_name,
    )
