"""Decode OTLP trace payloads (protobuf or OTLP/JSON) into plain :class:`Span` records.

OTLP/JSON differs from the protobuf JSON mapping in two ways that matter here:
trace and span ids are hex strings (not base64), and 64-bit integers may be
JSON numbers or strings. Enum fields may be integers or their names.
Anything that is not a well-formed ``ExportTraceServiceRequest`` raises
:class:`DecodeError` with a short reason, so the caller can dead-letter it.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

from google.protobuf.message import DecodeError as ProtobufDecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from sidecar.errors import DecodeError
from sidecar.model import AttrValue, Span, SpanEvent, SpanKind, StatusCode

Encoding = Literal["otlp_proto", "otlp_json", "auto"]

_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16
_HEX = frozenset("0123456789abcdef")


def decode(payload: bytes, encoding: Encoding = "auto") -> list[Span]:
    """Decode one record. ``auto`` takes a payload starting with ``{`` as OTLP/JSON."""
    if not payload:
        raise DecodeError("empty", "record is empty")
    if encoding == "auto":
        encoding = "otlp_json" if payload.lstrip()[:1] == b"{" else "otlp_proto"
    if encoding == "otlp_json":
        return decode_json(payload)
    return decode_proto(payload)


# --- protobuf ---------------------------------------------------------------------------


def decode_proto(payload: bytes) -> list[Span]:
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(payload)
    except ProtobufDecodeError as exc:
        raise DecodeError(
            "bad_protobuf", f"not an OTLP protobuf ExportTraceServiceRequest: {exc}"
        ) from exc
    return spans_from_request(request)


def spans_from_request(request: ExportTraceServiceRequest) -> list[Span]:
    spans: list[Span] = []
    for resource_spans in request.resource_spans:
        resource = _pb_attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            scope_name = scope_spans.scope.name
            for s in scope_spans.spans:
                trace_id = _pb_id(s.trace_id, 16, "trace_id")
                span_id = _pb_id(s.span_id, 8, "span_id")
                parent = s.parent_span_id.hex() if s.parent_span_id else None
                if parent is not None and (len(parent) != 16 or parent == _ZERO_SPAN):
                    parent = None
                spans.append(
                    Span(
                        trace_id=trace_id,
                        span_id=span_id,
                        parent_span_id=parent,
                        name=s.name,
                        kind=_kind(s.kind),
                        start_time_unix_nano=s.start_time_unix_nano,
                        end_time_unix_nano=s.end_time_unix_nano,
                        attributes=_pb_attributes(s.attributes),
                        resource=resource,
                        scope_name=scope_name,
                        status_code=_status(s.status.code),
                        status_message=s.status.message,
                        events=tuple(
                            SpanEvent(e.name, e.time_unix_nano, _pb_attributes(e.attributes))
                            for e in s.events
                        ),
                    )
                )
    if not spans:
        raise DecodeError("no_spans", "request holds no spans")
    return spans


def _pb_id(raw: bytes, size: int, field: str) -> str:
    if len(raw) != size:
        raise DecodeError("bad_id", f"{field} has {len(raw)} bytes, expected {size}")
    value = raw.hex()
    if value == "0" * (size * 2):
        raise DecodeError("bad_id", f"{field} is all zeros")
    return value


def _pb_attributes(items: Sequence[KeyValue]) -> dict[str, AttrValue]:
    return {kv.key: _pb_value(kv.value) for kv in items}


def _pb_value(value: AnyValue) -> AttrValue:
    match value.WhichOneof("value"):
        case "string_value":
            return value.string_value
        case "bool_value":
            return value.bool_value
        case "int_value":
            return value.int_value
        case "double_value":
            return value.double_value
        case "bytes_value":
            return value.bytes_value
        case "array_value":
            return [_pb_value(v) for v in value.array_value.values]
        case "kvlist_value":
            return _pb_attributes(value.kvlist_value.values)
        case _:
            return None


# --- OTLP/JSON --------------------------------------------------------------------------


def decode_json(payload: bytes | str | Mapping[str, Any]) -> list[Span]:
    if isinstance(payload, Mapping):
        document: object = payload
    else:
        try:
            document = json.loads(payload)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise DecodeError("bad_json", f"not JSON: {type(exc).__name__}: {exc}") from exc
    if not isinstance(document, dict) or "resourceSpans" not in document:
        raise DecodeError(
            "bad_json", "JSON has no resourceSpans; expected an OTLP/JSON ExportTraceServiceRequest"
        )
    try:
        spans = list(_json_spans(document))
    # RecursionError: absurdly nested kvlist/array values must not escape as a crash.
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:
        raise DecodeError("bad_json", f"malformed OTLP/JSON: {type(exc).__name__}: {exc}") from exc
    if not spans:
        raise DecodeError("no_spans", "request holds no spans")
    return spans


def _json_spans(document: Mapping[str, Any]) -> Iterator[Span]:
    for resource_spans in _list(document.get("resourceSpans")):
        resource = _json_attributes((resource_spans.get("resource") or {}).get("attributes"))
        scopes = resource_spans.get("scopeSpans") or resource_spans.get(
            "instrumentationLibrarySpans"
        )
        for scope_spans in _list(scopes):
            scope = scope_spans.get("scope") or scope_spans.get("instrumentationLibrary") or {}
            scope_name = str(scope.get("name", ""))
            for s in _list(scope_spans.get("spans")):
                status = s.get("status") or {}
                yield Span(
                    trace_id=_json_id(s.get("traceId"), 16, "traceId"),
                    span_id=_json_id(s.get("spanId"), 8, "spanId"),
                    parent_span_id=_json_parent(s.get("parentSpanId")),
                    name=str(s.get("name", "")),
                    kind=_kind(_json_enum(s.get("kind", 0), "SPAN_KIND_")),
                    start_time_unix_nano=int(s.get("startTimeUnixNano", 0)),
                    end_time_unix_nano=int(s.get("endTimeUnixNano", 0)),
                    attributes=_json_attributes(s.get("attributes")),
                    resource=resource,
                    scope_name=scope_name,
                    status_code=_status(_json_enum(status.get("code", 0), "STATUS_CODE_")),
                    status_message=str(status.get("message", "")),
                    events=tuple(
                        SpanEvent(
                            str(e.get("name", "")),
                            int(e.get("timeUnixNano", 0)),
                            _json_attributes(e.get("attributes")),
                        )
                        for e in _list(s.get("events"))
                    ),
                )


def _list(value: object) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {type(value).__name__}")
    return value


_SPAN_KINDS = {k.name: k.value for k in SpanKind}
_STATUS_CODES = {c.name: c.value for c in StatusCode}


def _json_enum(value: object, prefix: str) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        if value.isdigit():
            return int(value)
        name = value.removeprefix(prefix)
        table = _SPAN_KINDS if prefix == "SPAN_KIND_" else _STATUS_CODES
        if name in table:
            return table[name]
    raise ValueError(f"unknown enum value {value!r}")


def _json_id(value: object, size: int, field: str) -> str:
    if not isinstance(value, str):
        raise DecodeError("bad_id", f"{field} is missing or not a string")
    text = value.lower()
    if len(text) != size * 2:
        # Some producers emit the protobuf JSON mapping (base64); accept it.
        try:
            raw = base64.b64decode(value, validate=True)
        except binascii.Error as exc:
            raise DecodeError("bad_id", f"{field} {value!r} is neither hex nor base64") from exc
        if len(raw) != size:
            raise DecodeError("bad_id", f"{field} {value!r} has the wrong length")
        text = raw.hex()
    # int(text, 16) would also accept "+", "_" and whitespace.
    if not _HEX.issuperset(text):
        raise DecodeError("bad_id", f"{field} {value!r} is not hex")
    if text == "0" * (size * 2):
        raise DecodeError("bad_id", f"{field} is all zeros")
    return text


def _json_parent(value: object) -> str | None:
    if not value:
        return None
    try:
        parent = _json_id(value, 8, "parentSpanId")
    except DecodeError:
        return None
    return None if parent == _ZERO_SPAN else parent


def _json_attributes(items: object) -> dict[str, AttrValue]:
    return {str(kv["key"]): _json_value(kv.get("value")) for kv in _list(items)}


def _json_value(value: object) -> AttrValue:
    if not isinstance(value, dict) or not value:
        return None
    key, inner = next(iter(value.items()))
    match key:
        case "stringValue":
            return str(inner)
        case "boolValue":
            return bool(inner)
        case "intValue":
            return int(inner)
        case "doubleValue":
            return float(inner)
        case "bytesValue":
            return base64.b64decode(str(inner))
        case "arrayValue":
            return [_json_value(v) for v in _list((inner or {}).get("values"))]
        case "kvlistValue":
            return _json_attributes((inner or {}).get("values"))
        case _:
            return None


_KIND_OF = {k.value: k for k in SpanKind}
_STATUS_OF = {c.value: c for c in StatusCode}


def _kind(value: int) -> SpanKind:
    return _KIND_OF.get(value, SpanKind.UNSPECIFIED)


def _status(value: int) -> StatusCode:
    return _STATUS_OF.get(value, StatusCode.UNSET)
