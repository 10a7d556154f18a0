"""sidecar's own ``Span`` records written back as OTLP/JSON records, for feeding the service.

Test side only, independent of sidecar's decoder: attribute values become
``stringValue``/``boolValue``/``intValue``/``doubleValue``/``bytesValue``,
lists ``arrayValue`` and mappings ``kvlistValue``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from typing import Any

from sidecar.model import Span


def any_value(value: object) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, bytes):
        return {"bytesValue": base64.b64encode(value).decode()}
    if isinstance(value, list | tuple):
        return {"arrayValue": {"values": [any_value(v) for v in value]}}
    if isinstance(value, Mapping):
        return {"kvlistValue": {"values": attributes(value)}}
    if value is None:
        return {}
    return {"stringValue": str(value)}


def attributes(values: Mapping[str, object]) -> list[dict[str, Any]]:
    return [{"key": key, "value": any_value(value)} for key, value in values.items()]


def span_json(span: Span) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": span.trace_id,
        "spanId": span.span_id,
        "name": span.name,
        "kind": int(span.kind),
        "startTimeUnixNano": str(span.start_time_unix_nano),
        "endTimeUnixNano": str(span.end_time_unix_nano),
        "attributes": attributes(span.attributes),
        "status": {"code": int(span.status_code), "message": span.status_message},
        "events": [
            {
                "name": e.name,
                "timeUnixNano": str(e.time_unix_nano),
                "attributes": attributes(e.attributes),
            }
            for e in span.events
        ],
    }
    if span.parent_span_id is not None:
        out["parentSpanId"] = span.parent_span_id
    return out


def record(spans: Iterable[Span]) -> bytes:
    """One OTLP/JSON ExportTraceServiceRequest holding ``spans`` (one resource per span)."""
    resource_spans = [
        {
            "resource": {"attributes": attributes(s.resource)},
            "scopeSpans": [{"scope": {"name": s.scope_name}, "spans": [span_json(s)]}],
        }
        for s in spans
    ]
    return json.dumps({"resourceSpans": resource_spans}).encode()
