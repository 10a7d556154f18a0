"""Decode OTLP log payloads (``ExportLogsServiceRequest``, protobuf or OTLP/JSON) into :class:`LogRecord`.

The second input: GenAI content sent as events, which
producers export as OTLP log records. Read with the bounds and failure rules
of :mod:`sidecar.ingest.decode`: anything that is not a well-formed request raises
:class:`DecodeError` with a reason from the same closed set (``no_logs``
instead of ``no_spans``), so the caller can dead-letter it; values nested past
:data:`sidecar.bounds.MAX_NESTING` are kept as missing and counted in
``LogRecord.unreadable``.

A record's ids may be absent (a log written outside any span): they are
``None`` then, never an error; an id of the wrong length is ``bad_id``. The
event name is the ``event_name`` field (OTLP 1.5+), else the ``event.name``
attribute (older SDKs). The body is any AnyValue: a string, or a kvlist
(``dict``) for the per-message GenAI events.

:func:`decode_signal` reads a payload whose signal is not known (files given
to ``sidecar replay``): by content, a JSON document's ``resourceSpans`` or
``resourceLogs``; a binary payload as traces first, then as logs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from sidecar.errors import DecodeError
from sidecar.ingest.decode import (
    _MALFORMED,
    Encoding,
    _Cut,
    _decode_with,
    _json_attributes,
    _json_id,
    _json_read,
    _json_request,
    _json_uint64,
    _json_value,
    _list,
    _parse_proto,
    _pb_attributes,
    _pb_value,
    _suspect,
    _TooDeep,
    decode,
    is_json_payload,
)
from sidecar.model import AttrValue, LogRecord, Span, new_log_record
from sidecar.text import repair

__all__ = ["Decoded", "decode_logs", "decode_signal"]

_EVENT_NAME_KEY = "event.name"


def decode_logs(payload: bytes, encoding: Encoding = "auto") -> list[LogRecord]:
    """Decode one logs record. ``auto`` takes a payload starting with ``{`` as OTLP/JSON.

    Raises :class:`DecodeError` and nothing else for any payload.
    """
    return _decode_with(payload, encoding, decode_logs_json, decode_logs_proto)


@dataclass(frozen=True, slots=True)
class Decoded:
    """What one payload of unknown signal held: spans or log records (one of them empty)."""

    spans: list[Span]
    logs: list[LogRecord]


def decode_signal(payload: bytes, encoding: Encoding = "auto") -> Decoded:
    """Decode a traces or logs payload, told apart by content; DecodeError when it is neither.

    ``auto`` takes a payload starting with ``{`` as OTLP/JSON. A binary payload is tried as traces first: a logs request parsed as traces
    has records without valid span ids (``bad_id``/``no_spans``), and then the
    logs reading decides. The error raised is the traces reading's, unless the
    payload is JSON that names ``resourceLogs``.
    """
    if encoding == "auto":
        encoding = "otlp_json" if is_json_payload(payload) else "otlp_proto"
    if encoding == "otlp_json":
        if _json_logs(payload):
            return Decoded([], decode_logs(payload, "otlp_json"))
        return Decoded(decode(payload, "otlp_json"), [])
    try:
        return Decoded(decode(payload, "otlp_proto"), [])
    except DecodeError as as_traces:
        try:
            return Decoded([], decode_logs(payload, "otlp_proto"))
        except DecodeError:
            raise as_traces from None


def _json_logs(payload: bytes) -> bool:
    """Whether an OTLP/JSON record is a logs request: ``resourceLogs`` at its top, no ``resourceSpans``.

    Most records name only one of the two anywhere, and that decides. A record
    naming both (a log whose body quotes the other key, say) is parsed to read
    its top-level keys.
    """
    logs, spans = b'"resourceLogs"' in payload, b'"resourceSpans"' in payload
    if logs != spans:
        return logs
    if not logs:
        return False
    try:
        document = json.loads(payload.decode("utf-8-sig", "surrogateescape"))
    except (ValueError, RecursionError):
        return False  # the traces reading says what is wrong with it
    return (
        isinstance(document, dict)
        and "resourceLogs" in document
        and "resourceSpans" not in document
    )


# --- protobuf ---------------------------------------------------------------------------


def decode_logs_proto(payload: bytes) -> list[LogRecord]:
    request = ExportLogsServiceRequest()
    # Repaired text is not flagged per log record: its spans are flagged when joined.
    _parse_proto(request, payload, ("resource_logs", "scope_logs", "log_records"))
    try:
        records = list(_pb_records(request))
    except _MALFORMED as exc:
        raise DecodeError("bad_protobuf", f"malformed OTLP: {type(exc).__name__}: {exc}") from exc
    if not records:
        raise DecodeError("no_logs", "request holds no log records")
    return records


def _pb_records(request: ExportLogsServiceRequest) -> Iterator[LogRecord]:
    for resource_logs in request.resource_logs:
        resource_cut = _Cut()
        resource = _pb_attributes(resource_logs.resource.attributes, resource_cut)
        for scope_logs in resource_logs.scope_logs:
            scope_name = scope_logs.scope.name
            for r in scope_logs.log_records:
                cut = _Cut(resource_cut.count)
                attributes = _pb_attributes(r.attributes, cut)
                yield new_log_record(
                    trace_id=_pb_optional_id(r.trace_id, 16, "trace_id"),
                    span_id=_pb_optional_id(r.span_id, 8, "span_id"),
                    event_name=r.event_name or _event_attribute(attributes),
                    time_unix_nano=r.time_unix_nano or r.observed_time_unix_nano,
                    attributes=attributes,
                    body=_pb_body(r.body, cut) if r.HasField("body") else None,
                    resource=resource,
                    scope_name=scope_name,
                    unreadable=cut.count,
                )


def _pb_optional_id(raw: bytes, size: int, field: str) -> str | None:
    if not raw or raw == bytes(size):
        return None
    if len(raw) != size:
        raise DecodeError("bad_id", f"{field} has {len(raw)} bytes, expected {size}")
    return raw.hex()


def _pb_body(value: AnyValue, cut: _Cut) -> AttrValue:
    try:
        return _pb_value(value, 0)
    except _TooDeep:
        cut.count += 1
        return None


# --- OTLP/JSON --------------------------------------------------------------------------


def decode_logs_json(payload: bytes | str | Mapping[str, Any]) -> list[LogRecord]:
    document = _json_request(payload, "resourceLogs", "ExportLogsServiceRequest")
    if _suspect(payload):
        repair(document)
    records = _json_read(_json_records, document)
    if not records:
        raise DecodeError("no_logs", "request holds no log records")
    return records


def _json_records(document: Mapping[str, Any]) -> Iterator[LogRecord]:
    for resource_logs in _list(document.get("resourceLogs")):
        resource_cut = _Cut()
        resource = _json_attributes(
            (resource_logs.get("resource") or {}).get("attributes"), resource_cut
        )
        for scope_logs in _list(resource_logs.get("scopeLogs")):
            scope = scope_logs.get("scope") or {}
            scope_name = str(scope.get("name", ""))
            for r in _list(scope_logs.get("logRecords")):
                cut = _Cut(resource_cut.count)
                attributes = _json_attributes(r.get("attributes"), cut)
                event_name = r.get("eventName")
                time = _json_uint64(r.get("timeUnixNano", 0), "timeUnixNano") or _json_uint64(
                    r.get("observedTimeUnixNano", 0), "observedTimeUnixNano"
                )
                yield new_log_record(
                    trace_id=_json_optional_id(r.get("traceId"), 16, "traceId"),
                    span_id=_json_optional_id(r.get("spanId"), 8, "spanId"),
                    event_name=event_name
                    if isinstance(event_name, str) and event_name
                    else _event_attribute(attributes),
                    time_unix_nano=time,
                    attributes=attributes,
                    body=_json_body(r.get("body"), cut),
                    resource=resource,
                    scope_name=scope_name,
                    unreadable=cut.count,
                )


def _json_optional_id(value: object, size: int, field: str) -> str | None:
    if value is None or value == "":
        return None
    try:
        return _json_id(value, size, field)
    except DecodeError:
        # All zeros is how some writers spell "no id"; anything else malformed is an error.
        if isinstance(value, str) and value.strip("0") == "":
            return None
        raise


def _json_body(value: object, cut: _Cut) -> AttrValue:
    try:
        return _json_value(value, 0)
    except _TooDeep:
        cut.count += 1
        return None


def _event_attribute(attributes: Mapping[str, AttrValue]) -> str:
    value = attributes.get(_EVENT_NAME_KEY)
    return value if isinstance(value, str) else ""
