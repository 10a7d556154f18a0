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

from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from sidecar.model import Span
from tests.builders import trace_id


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


SpanSpec = tuple[int, int | None, str]  # (span number, parent number or None, name)


def span_tree(n: int, *spans: SpanSpec, start_ns: int = 1000, end_ns: int = 900_000) -> bytes:
    """Trace ``n``'s ``spans`` of service ``shop`` as one OTLP/JSON record.

    Span ids are the span numbers in hex; span ``number`` starts at
    ``start_ns + number`` and every span ends at ``end_ns``.
    """
    items: list[dict[str, Any]] = []
    for number, parent, name in spans:
        item: dict[str, Any] = {
            "traceId": trace_id(n),
            "spanId": f"{number:016x}",
            "name": name,
            "kind": 1,
            "startTimeUnixNano": str(start_ns + number),
            "endTimeUnixNano": str(end_ns),
        }
        if parent is not None:
            item["parentSpanId"] = f"{parent:016x}"
        items.append(item)
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "shop"}}]}
    return json.dumps(
        {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": items}]}]}
    ).encode()


def fill_any_value(out: AnyValue, value: object) -> AnyValue:
    """The protobuf ``out`` set to ``value``, children built in place (a copy would re-parse)."""
    match value:
        case bool():
            out.bool_value = value
        case int():
            out.int_value = value
        case float():
            out.double_value = value
        case str():
            out.string_value = value
        case bytes():
            out.bytes_value = value
        case list():
            out.array_value.SetInParent()  # an empty array is still an array
            for item in value:
                fill_any_value(out.array_value.values.add(), item)
        case dict():
            out.kvlist_value.SetInParent()
            for key, item in value.items():
                fill_any_value(out.kvlist_value.values.add(key=key).value, item)
    return out
