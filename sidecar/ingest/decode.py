"""Decode OTLP trace payloads (protobuf or OTLP/JSON) into plain :class:`Span` records.

OTLP/JSON differs from the protobuf JSON mapping in two ways that matter here:
trace and span ids are hex strings (not base64), and 64-bit integers may be
JSON numbers or strings. Enum fields may be integers or their names.
Anything that is not a well-formed ``ExportTraceServiceRequest`` raises
:class:`DecodeError` with a short reason, so the caller can dead-letter it;
nothing else escapes :func:`decode`. Reasons (a closed set, metric labels):
``empty``, ``bad_protobuf``, ``bad_json``, ``bad_id``, ``no_spans``,
``bad_number`` (a timestamp or integer outside its 64-bit wire type:
negative, fractional, infinite, NaN, ``1e400``, thousands of digits) and
``too_large`` (the record could not be held in memory).

Values are read to a bounded depth (:data:`sidecar.bounds.MAX_NESTING`): an
attribute whose kvlist/array value nests deeper is *unreadable* and kept as
missing (``None``); the span counts it in ``Span.unreadable``. Protobuf's own
parser refuses messages nested past about 100 levels (about 45 AnyValue
levels), which makes the record ``bad_protobuf``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from sys import intern
from typing import Any, Literal, TypeVar

from google.protobuf.message import DecodeError as ProtobufDecodeError
from google.protobuf.message import Message
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from sidecar.bounds import INT64_MAX, INT64_MIN, MAX_INT_DIGITS, MAX_NESTING, UINT64_MAX
from sidecar.errors import DecodeError
from sidecar.ingest.lenient import parse_lenient
from sidecar.ingest.packed import PackedSpans
from sidecar.model import AttrValue, Span, SpanKind, StatusCode, new_span, new_span_event
from sidecar.text import may_hold_surrogates, repair

Encoding = Literal["otlp_proto", "otlp_json", "auto"]

_T = TypeVar("_T")

_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16
_HEX = frozenset("0123456789abcdef")

# What reading hostile input may raise besides DecodeError: each becomes one.
_MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError, UnicodeError)


def decode(payload: bytes, encoding: Encoding = "auto") -> list[Span]:
    """Decode one record. ``auto`` takes a payload starting with ``{`` as OTLP/JSON.

    Raises :class:`DecodeError` and nothing else for any payload.
    """
    return _decode_with(payload, encoding, decode_json, decode_proto)


_BOM = b"\xef\xbb\xbf"


def is_json_payload(payload: bytes) -> bool:
    """``auto``'s reading of a record: JSON when it starts with ``{`` (or ``[``).

    White space before it is skipped, and so is a UTF-8 byte order mark (files
    saved by some editors and tools start with one); JSON that is not a
    request is then refused as JSON. A protobuf request starts with its first
    field's tag, byte 0x0A, which is also a newline: when the byte after it (the
    field's length) reads as ``{`` or ``[``, the record is protobuf if its
    top-level fields run exactly to its end.
    """
    if payload.startswith(_BOM):
        payload = payload[len(_BOM) :]
    if payload.lstrip()[:1] not in (b"{", b"["):
        return False
    return payload[:1] != b"\n" or not _proto_fields(payload)


def _proto_fields(payload: bytes) -> bool:
    """Whether ``payload`` is a request's top-level fields (field 1, length-delimited) to its end."""
    pos, end = 0, len(payload)
    while pos < end:
        if payload[pos] != 0x0A:
            return False
        pos += 1
        length = shift = 0
        while True:
            if pos >= end or shift > 63:
                return False
            byte = payload[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
        pos += length
    return pos == end


def _decode_with(
    payload: bytes,
    encoding: Encoding,
    read_json: Callable[[bytes], list[_T]],
    read_proto: Callable[[bytes], list[_T]],
) -> list[_T]:
    """One record by ``encoding`` (``auto``: a payload starting with ``{`` is OTLP/JSON).

    The checks every signal shares: empty, and what the readers may raise past
    their own checks (memory, recursion) turned into :class:`DecodeError`.
    """
    if not payload:
        raise DecodeError("empty", "record is empty")
    if encoding == "auto":
        encoding = "otlp_json" if is_json_payload(payload) else "otlp_proto"
    try:
        if encoding == "otlp_json":
            return read_json(payload)
        return read_proto(payload)
    except MemoryError as exc:
        raise DecodeError("too_large", "record too large to decode in memory") from exc
    except RecursionError as exc:
        raise DecodeError(
            "bad_json" if encoding == "otlp_json" else "bad_protobuf",
            "record nested too deeply to decode",
        ) from exc


# --- protobuf ---------------------------------------------------------------------------


def decode_proto(payload: bytes) -> list[Span]:
    request = ExportTraceServiceRequest()
    repaired = _parse_proto(request, payload, _SPAN_LEAVES)
    try:
        spans = spans_from_request(request)
    except _MALFORMED as exc:
        raise DecodeError("bad_protobuf", f"malformed OTLP: {type(exc).__name__}: {exc}") from exc
    if repaired:
        spans = [
            replace(span, repaired=count) if count else span
            for span, count in zip(spans, repaired, strict=True)
        ]
    return spans


_SPAN_LEAVES = ("resource_spans", "scope_spans", "spans")


def _parse_proto(request: Message, payload: bytes, leaves: tuple[str, str, str]) -> list[int]:
    """Read ``payload`` into ``request``; ``bad_protobuf`` when it is not one.

    A request refused only for strings that are not UTF-8 is read leniently
    (:mod:`sidecar.ingest.lenient`): the bad values are repaired, and the
    repairs per leaf record come back (``[]`` when the strict read worked).
    """
    try:
        request.ParseFromString(payload)
        return []
    except ProtobufDecodeError as exc:
        strict = exc
    try:
        return parse_lenient(request, payload, leaves)
    except ProtobufDecodeError:
        raise DecodeError(
            "bad_protobuf", f"not an OTLP protobuf {request.DESCRIPTOR.name}: {strict}"
        ) from strict


@dataclass(slots=True)
class ScannedSpans:
    """A protobuf record read only as far as the trace buffer needs it (:func:`scan_proto`).

    ``spans``: per span in record order, its trace id (hex), its span id and
    its parent's (8 raw bytes; the parent ``None`` as :func:`decode` has it).
    The spans themselves are decoded later from ``payload``, or from
    :meth:`subset` when only some of them are wanted.
    """

    payload: bytes
    request: ExportTraceServiceRequest
    spans: list[tuple[str, bytes, bytes | None]]
    # (resource_spans, scope_spans, span) index of each span.
    where: list[tuple[int, int, int]]

    def subset(self, indices: Sequence[int]) -> bytes:
        """A request holding only the spans at ``indices`` (in order), with their resource and scope."""
        request = self.request
        out = ExportTraceServiceRequest()
        resource_out = scope_out = None
        last_resource = last_scope = -1
        for index in indices:
            r, s, i = self.where[index]
            resource_spans = request.resource_spans[r]
            if r != last_resource or resource_out is None:
                resource_out = out.resource_spans.add()
                resource_out.resource.CopyFrom(resource_spans.resource)
                resource_out.schema_url = resource_spans.schema_url
                last_resource, last_scope = r, -1
            scope_spans = resource_spans.scope_spans[s]
            if s != last_scope or scope_out is None:
                scope_out = resource_out.scope_spans.add()
                scope_out.scope.CopyFrom(scope_spans.scope)
                scope_out.schema_url = scope_spans.schema_url
                last_scope = s
            scope_out.spans.append(scope_spans.spans[i])
        return out.SerializeToString()

    def span(self, index: int) -> Span:
        """The span at ``index``, decoded."""
        return decode_proto(self.subset([index]))[0]

    def held(self) -> bytes:
        return self.payload


@dataclass(slots=True)
class DecodedRecord:
    """A record the trace buffer had to decode on arrival (OTLP/JSON, protobuf read leniently).

    ``spans`` as in :class:`ScannedSpans`; what is held of them is packed
    (:class:`~sidecar.ingest.packed.PackedSpans`).
    """

    decoded: list[Span]
    spans: list[tuple[str, bytes, bytes | None]]

    def held(self) -> PackedSpans:
        return PackedSpans.of(self.decoded)

    def subset(self, indices: Sequence[int]) -> PackedSpans:
        decoded = self.decoded
        return PackedSpans.of([decoded[index] for index in indices])

    def span(self, index: int) -> Span:
        return self.decoded[index]


# What the trace buffer holds of a record's spans until they are decided.
Held = bytes | PackedSpans


def decode_held(part: Held) -> list[Span]:
    """The spans of a held part, equal to what :func:`decode` gave when it was read."""
    return part.spans() if isinstance(part, PackedSpans) else decode_proto(part)


def scan_record(payload: bytes, encoding: Encoding = "auto") -> ScannedSpans | DecodedRecord:
    """A record read as far as the trace buffer needs it (raising :func:`decode`'s DecodeError).

    Protobuf the strict parser reads is scanned (:func:`scan_proto`) and held
    as its bytes; anything else is decoded now, to be held packed.
    """
    scanned = scan_proto(payload, encoding)
    if scanned is not None:
        return scanned
    decoded = decode(payload, encoding)
    # The decoders give ids as lowercase hex; the buffer keys them by their bytes.
    ids = [
        (s.trace_id, bytes.fromhex(s.span_id), None if p is None else bytes.fromhex(p))
        for s in decoded
        for p in (s.parent_span_id,)
    ]
    return DecodedRecord(decoded, ids)


def scan_proto(payload: bytes, encoding: Encoding = "auto") -> ScannedSpans | None:
    """Read a protobuf record's span ids without decoding the spans (the trace buffer's read).

    Raises the :class:`DecodeError` :func:`decode` would raise for a record
    that parses (``empty``, ``bad_id``, ``no_spans``); ``None`` for a record
    :func:`decode` must read itself: OTLP/JSON, or protobuf the strict parser
    refuses (read leniently, or refused as ``bad_protobuf``, by :func:`decode`).
    Decoding ``payload`` later gives exactly the spans :func:`decode` gives now.
    """
    if not payload:
        raise DecodeError("empty", "record is empty")
    if encoding == "otlp_json" or (encoding == "auto" and is_json_payload(payload)):
        return None
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(payload)
    except (ProtobufDecodeError, MemoryError, RecursionError):
        return None
    spans: list[tuple[str, bytes, bytes | None]] = []
    where: list[tuple[int, int, int]] = []
    for r, resource_spans in enumerate(request.resource_spans):
        for s, scope_spans in enumerate(resource_spans.scope_spans):
            for i, span in enumerate(scope_spans.spans):
                raw = span.trace_id
                trace_id = raw.hex()
                if len(raw) != 16 or trace_id == _ZERO_TRACE:
                    _pb_id(raw, 16, "trace_id")
                span_id = span.span_id
                if len(span_id) != 8 or span_id == _ZERO_SPAN_RAW:
                    _pb_id(span_id, 8, "span_id")
                parent: bytes | None = span.parent_span_id
                if len(parent) != 8 or parent == _ZERO_SPAN_RAW:  # type: ignore[arg-type]
                    parent = None
                spans.append((trace_id, span_id, parent))
                where.append((r, s, i))
    if not spans:
        raise DecodeError("no_spans", "request holds no spans")
    return ScannedSpans(payload, request, spans, where)


_ZERO_SPAN_RAW = bytes(8)


def spans_from_request(request: ExportTraceServiceRequest) -> list[Span]:
    # The hot loop of the service: locals and inlined checks, one Span per span and
    # nothing else built (the slow paths raise through _pb_id with the same reasons).
    # One counter for the whole request: a span's unreadable values are what it adds.
    spans: list[Span] = []
    append = spans.append
    kinds, statuses = _KIND_OF, _STATUS_OF
    unspecified, unset = SpanKind.UNSPECIFIED, StatusCode.UNSET
    cut = _Cut()
    for resource_spans in request.resource_spans:
        before = cut.count
        resource = _pb_attributes(resource_spans.resource.attributes, cut)
        resource_unreadable = cut.count - before
        for scope_spans in resource_spans.scope_spans:
            scope_name = scope_spans.scope.name
            for s in scope_spans.spans:
                raw = s.trace_id
                trace_id = raw.hex()
                if len(raw) != 16 or trace_id == _ZERO_TRACE:
                    _pb_id(raw, 16, "trace_id")
                raw = s.span_id
                span_id = raw.hex()
                if len(raw) != 8 or span_id == _ZERO_SPAN:
                    _pb_id(raw, 8, "span_id")
                raw = s.parent_span_id
                parent = raw.hex() if len(raw) == 8 else None
                if parent == _ZERO_SPAN:
                    parent = None
                before = cut.count - resource_unreadable
                status = s.status
                events = s.events
                append(
                    new_span(
                        trace_id,
                        span_id,
                        parent,
                        s.name,
                        kinds.get(s.kind, unspecified),
                        s.start_time_unix_nano,
                        s.end_time_unix_nano,
                        _pb_attributes(s.attributes, cut),
                        resource,
                        scope_name,
                        statuses.get(status.code, unset),
                        status.message,
                        tuple(
                            new_span_event(
                                e.name, e.time_unix_nano, _pb_attributes(e.attributes, cut)
                            )
                            for e in events
                        )
                        if events
                        else (),
                        cut.count - before,
                        0,
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


class _Cut:
    """How many attribute values of one span were too deep to read."""

    __slots__ = ("count",)

    def __init__(self, count: int = 0) -> None:
        self.count = count


class _TooDeep(Exception):
    pass


def _pb_attributes(items: Sequence[KeyValue], cut: _Cut) -> dict[str, AttrValue]:
    attributes: dict[str, AttrValue] = {}
    for kv in items:
        # Keys repeat on every span: one string each (interned strings go with their last use).
        key = intern(kv.key)
        value = kv.value
        # Most values are strings: a non-empty string_value can only be the oneof's own
        # value, so one upb read decides them, without WhichOneof. Other scalars inline,
        # nested values through _pb_value.
        text = value.string_value
        if text:
            attributes[key] = text
            continue
        kind = value.WhichOneof("value")
        if kind in _SCALARS:
            attributes[key] = getattr(value, kind)
        else:
            try:
                attributes[key] = _pb_value(value, 0)
            except _TooDeep:
                attributes[key] = None
                cut.count += 1
    return attributes


_SCALARS = frozenset({"string_value", "bool_value", "int_value", "double_value", "bytes_value"})


def _pb_value(value: AnyValue, depth: int) -> AttrValue:
    text = value.string_value
    if text:  # the common case, as in _pb_attributes
        return text
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
            if depth >= MAX_NESTING:
                raise _TooDeep
            depth += 1
            return [v.string_value or _pb_value(v, depth) for v in value.array_value.values]
        case "kvlist_value":
            if depth >= MAX_NESTING:
                raise _TooDeep
            return {kv.key: _pb_value(kv.value, depth + 1) for kv in value.kvlist_value.values}
        case _:
            return None


# --- OTLP/JSON --------------------------------------------------------------------------


def decode_json(payload: bytes | str | Mapping[str, Any]) -> list[Span]:
    document = _json_request(payload, "resourceSpans", "ExportTraceServiceRequest")
    suspect = _suspect(payload)
    spans = _json_read(lambda d: _json_spans(d, repairing=suspect), document)
    if not spans:
        raise DecodeError("no_spans", "request holds no spans")
    return spans


def _json_request(
    payload: bytes | str | Mapping[str, Any], key: str, request: str
) -> Mapping[str, Any]:
    """The OTLP/JSON ``request`` document in ``payload``: a JSON object holding ``key``."""
    if isinstance(payload, Mapping):
        document: object = payload
    else:
        try:
            try:
                document = json.loads(payload)
            except UnicodeDecodeError:
                if not isinstance(payload, bytes):
                    raise
                # Bytes that are not UTF-8 inside strings: kept as lone surrogates,
                # which the readers repair (and flag) like any other.
                document = json.loads(payload.decode("utf-8-sig", "surrogateescape"))
        except (json.JSONDecodeError, UnicodeError, RecursionError) as exc:
            # RecursionError: the C scanner refuses nesting deeper than the recursion limit.
            raise DecodeError("bad_json", f"not JSON: {type(exc).__name__}: {exc}") from exc
        except ValueError as exc:
            # Python's int-string conversion limit (sys.set_int_max_str_digits).
            raise DecodeError("bad_number", f"number out of range: {exc}") from exc
    if not isinstance(document, dict) or key not in document:
        raise DecodeError("bad_json", f"JSON has no {key}; expected an OTLP/JSON {request}")
    return document


def _json_read(
    read: Callable[[Mapping[str, Any]], Iterator[_T]], document: Mapping[str, Any]
) -> list[_T]:
    """Everything ``read`` yields from ``document``; what hostile input raises is a DecodeError."""
    try:
        return list(read(document))
    except DecodeError:
        raise
    except (ArithmeticError, RecursionError) as exc:
        raise DecodeError("bad_number", f"number out of range: {type(exc).__name__}") from exc
    except _MALFORMED as exc:
        raise DecodeError("bad_json", f"malformed OTLP/JSON: {type(exc).__name__}: {exc}") from exc


def _suspect(payload: bytes | str | Mapping[str, Any]) -> bool:
    """Whether the parsed ``payload`` may hold text that does not encode."""
    if isinstance(payload, Mapping):
        return True
    if isinstance(payload, bytes) and not payload.isascii():
        try:
            payload.decode("utf-8")
        except UnicodeDecodeError:
            return True
    return may_hold_surrogates(payload)


def _repaired(value: object) -> int:
    """How many strings of ``value`` (a fresh parse, changed in place) were made valid."""
    return repair(value)[1] if isinstance(value, dict | list) else 0


def _json_spans(document: Mapping[str, Any], *, repairing: bool = False) -> Iterator[Span]:
    for resource_spans in _list(document.get("resourceSpans")):
        outer = _repaired(resource_spans.get("resource")) if repairing else 0
        resource_cut = _Cut()
        resource = _json_attributes(
            (resource_spans.get("resource") or {}).get("attributes"), resource_cut
        )
        scopes = resource_spans.get("scopeSpans") or resource_spans.get(
            "instrumentationLibrarySpans"
        )
        for scope_spans in _list(scopes):
            scope = scope_spans.get("scope") or scope_spans.get("instrumentationLibrary") or {}
            inner = outer + _repaired(scope) if repairing else 0
            scope_name = str(scope.get("name", ""))
            for s in _list(scope_spans.get("spans")):
                repaired = inner + _repaired(s) if repairing else 0
                status = s.get("status") or {}
                cut = _Cut(resource_cut.count)
                yield new_span(
                    trace_id=_json_id(s.get("traceId"), 16, "traceId"),
                    span_id=_json_id(s.get("spanId"), 8, "spanId"),
                    parent_span_id=_json_parent(s.get("parentSpanId")),
                    name=str(s.get("name", "")),
                    kind=_kind(_json_enum(s.get("kind", 0), "SPAN_KIND_")),
                    start_time_unix_nano=_json_uint64(
                        s.get("startTimeUnixNano", 0), "startTimeUnixNano"
                    ),
                    end_time_unix_nano=_json_uint64(s.get("endTimeUnixNano", 0), "endTimeUnixNano"),
                    attributes=_json_attributes(s.get("attributes"), cut),
                    resource=resource,
                    scope_name=scope_name,
                    status_code=_status(_json_enum(status.get("code", 0), "STATUS_CODE_")),
                    status_message=str(status.get("message", "")),
                    events=tuple(
                        new_span_event(
                            str(e.get("name", "")),
                            _json_uint64(e.get("timeUnixNano", 0), "timeUnixNano"),
                            _json_attributes(e.get("attributes"), cut),
                        )
                        for e in _list(s.get("events"))
                    ),
                    unreadable=cut.count,
                    repaired=repaired,
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
        if _DECIMAL.fullmatch(value) and len(value) <= MAX_INT_DIGITS:
            return int(value)
        name = value.removeprefix(prefix)
        table = _SPAN_KINDS if prefix == "SPAN_KIND_" else _STATUS_CODES
        if name in table:
            return table[name]
    raise ValueError(f"unknown enum value {str(value)[:40]!r}")


# ASCII digits only: int() would also take other scripts' digits, "_" and spaces.
_DECIMAL = re.compile(r"-?[0-9]+")


def _json_integer(value: object, field: str, low: int, high: int) -> int:
    """A 64-bit integer as OTLP/JSON writes it: a JSON number or a decimal string.

    Syntax errors are ``bad_json`` (ValueError); a well-formed number outside
    ``[low, high]`` (or not an integer: ``1.5``, ``Infinity``, ``NaN``, ``1e400``)
    is ``bad_number``.
    """
    number: int
    if isinstance(value, bool):
        raise TypeError(f"{field} is a boolean")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float):
        if not value.is_integer():  # False for inf and nan too
            raise DecodeError("bad_number", f"{field} is not an integer: {value!r}")
        number = int(value)
    elif isinstance(value, str):
        text = value.strip()
        if not _DECIMAL.fullmatch(text):
            raise ValueError(f"{field} is not a number: {value[:40]!r}")
        if len(text) > MAX_INT_DIGITS:
            raise DecodeError("bad_number", f"{field} has {len(text)} digits")
        number = int(text)
    else:
        raise TypeError(f"{field} is a {type(value).__name__}")
    if not low <= number <= high:
        raise DecodeError("bad_number", f"{field} out of range: {_short(number)}")
    return number


def _json_uint64(value: object, field: str) -> int:
    return _json_integer(value, field, 0, UINT64_MAX)


def _short(number: int) -> str:
    # str() of a huge int may itself hit the int-string conversion limit.
    return str(number) if number.bit_length() <= 128 else f"a {number.bit_length()}-bit number"


def _json_id(value: object, size: int, field: str) -> str:
    if not isinstance(value, str):
        raise DecodeError("bad_id", f"{field} is missing or not a string")
    text = value.lower()
    if len(text) != size * 2:
        # Some producers emit the protobuf JSON mapping (base64); accept it.
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise DecodeError(
                "bad_id", f"{field} {value[:64]!r} is neither hex nor base64"
            ) from exc
        if len(raw) != size:
            raise DecodeError("bad_id", f"{field} {value[:64]!r} has the wrong length")
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


def _json_attributes(items: object, cut: _Cut) -> dict[str, AttrValue]:
    attributes: dict[str, AttrValue] = {}
    for kv in _list(items):
        key = kv["key"]
        if not isinstance(key, str):
            raise TypeError(f"attribute key is a {type(key).__name__}")
        if type(key) is str:  # one string per key, as the protobuf reader has it
            key = intern(key)
        try:
            attributes[key] = _json_value(kv.get("value"), 0)
        except _TooDeep:
            attributes[key] = None
            cut.count += 1
    return attributes


def _json_value(value: object, depth: int) -> AttrValue:
    if not isinstance(value, dict) or not value:
        return None
    key, inner = next(iter(value.items()))
    match key:
        case "stringValue":
            return inner if isinstance(inner, str) else _scalar_text(inner)
        case "boolValue":
            return _json_bool(inner)
        case "intValue":
            return _json_integer(inner, "intValue", INT64_MIN, INT64_MAX)
        case "doubleValue":
            return _json_double(inner)
        case "bytesValue":
            return base64.b64decode(str(inner))
        case "arrayValue":
            if depth >= MAX_NESTING:
                raise _TooDeep
            return [_json_value(v, depth + 1) for v in _list(_values(inner))]
        case "kvlistValue":
            if depth >= MAX_NESTING:
                raise _TooDeep
            return {
                _key(kv["key"]): _json_value(kv.get("value"), depth + 1)
                for kv in _list(_values(inner))
            }
        case _:
            return None


def _values(inner: object) -> object:
    if inner is None:
        return None
    if not isinstance(inner, dict):
        raise TypeError(f"expected an object, got {type(inner).__name__}")
    return inner.get("values")


def _key(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"attribute key is a {type(value).__name__}")
    return value


def _scalar_text(value: object) -> str:
    if isinstance(value, bool | float) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        return _short(value) if value.bit_length() > 128 else str(value)
    raise TypeError(f"stringValue is a {type(value).__name__}")


def _json_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if value in ("true", "false"):
        return value == "true"
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ValueError(f"boolValue is not a boolean: {str(value)[:40]!r}")


# The protobuf JSON mapping writes non-finite doubles as these strings.
_SPECIAL_DOUBLES = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def _json_double(value: object) -> float:
    if isinstance(value, bool):
        raise TypeError("doubleValue is a boolean")
    if isinstance(value, float):
        return value
    if isinstance(value, int):
        # float() of a huge int raises OverflowError: a bad number, not a crash.
        return float(value)
    if isinstance(value, str):
        if value in _SPECIAL_DOUBLES:
            return _SPECIAL_DOUBLES[value]
        return float(value)
    raise TypeError(f"doubleValue is a {type(value).__name__}")


_KIND_OF = {k.value: k for k in SpanKind}
_STATUS_OF = {c.value: c for c in StatusCode}


def _kind(value: int) -> SpanKind:
    return _KIND_OF.get(value, SpanKind.UNSPECIFIED)


def _status(value: int) -> StatusCode:
    return _STATUS_OF.get(value, StatusCode.UNSET)
