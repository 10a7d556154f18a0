from __future__ import annotations

import base64
import json
import random
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind as OtelSpanKind
from opentelemetry.trace import Status
from opentelemetry.trace import StatusCode as OtelStatusCode

from sidecar.errors import DecodeError
from sidecar.ingest.decode import decode
from sidecar.ingest.otlpjson import request_to_json_line
from sidecar.model import Span, SpanEvent, SpanKind, StatusCode

TRACE = "5b8efff798038103d269b633813fc60c"
SPAN = "eee19b7ec3c1b174"
PARENT = "eee19b7ec3c1b173"
EXAMPLE_JSON = "otlp_proto_examples_trace.json"
EXAMPLE_PROTO = "otlp_proto_examples_trace.protobuf-bin"


def json_span(**overrides: Any) -> dict[str, Any]:
    """One OTLP/JSON span; keys given as ``None`` are removed."""
    base: dict[str, Any] = {
        "traceId": TRACE,
        "spanId": SPAN,
        "parentSpanId": PARENT,
        "name": "work",
        "kind": 1,
        "startTimeUnixNano": "1000",
        "endTimeUnixNano": "2000",
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def json_request(*spans: dict[str, Any], scope_key: str = "scopeSpans") -> dict[str, Any]:
    scope_name_key = "instrumentationLibrary" if scope_key != "scopeSpans" else "scope"
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]
                },
                scope_key: [{scope_name_key: {"name": "lib"}, "spans": list(spans)}],
            }
        ]
    }


def as_bytes(document: object) -> bytes:
    return json.dumps(document).encode()


def only(spans: list[Span]) -> Span:
    assert len(spans) == 1
    return spans[0]


# --- the upstream example: one request, two encodings ----------------------------------


def test_upstream_example_decodes_to_equal_spans_from_json_and_protobuf(shared_data: Path) -> None:
    from_json = decode((shared_data / EXAMPLE_JSON).read_bytes())
    from_proto = decode((shared_data / EXAMPLE_PROTO).read_bytes())

    assert from_json == from_proto
    assert only(from_json) == Span(
        trace_id=TRACE,
        span_id=SPAN,
        parent_span_id=PARENT,
        name="I'm a server span",
        kind=SpanKind.SERVER,
        start_time_unix_nano=1544712660000000000,
        end_time_unix_nano=1544712661000000000,
        attributes={"my.span.attr": "some value"},
        resource={"service.name": "my.service"},
        scope_name="my.library",
    )


@pytest.mark.parametrize(
    ("encoding", "path"),
    [
        pytest.param("otlp_json", EXAMPLE_JSON, id="json-explicit"),
        pytest.param("otlp_proto", EXAMPLE_PROTO, id="proto-explicit"),
        pytest.param("auto", EXAMPLE_JSON, id="json-auto"),
        pytest.param("auto", EXAMPLE_PROTO, id="proto-auto"),
    ],
)
def test_upstream_example_with_each_encoding_setting(
    shared_data: Path, encoding: Any, path: str
) -> None:
    assert only(decode((shared_data / path).read_bytes(), encoding)).span_id == SPAN


# --- OTLP/JSON variants -----------------------------------------------------------------


def b64(hex_id: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_id)).decode()


FIELD_CASES = [
    pytest.param(
        {"startTimeUnixNano": "1544712660000000000"},
        "start_time_unix_nano",
        1544712660000000000,
        id="time-as-string",
    ),
    pytest.param(
        {"startTimeUnixNano": 1544712660000000000},
        "start_time_unix_nano",
        1544712660000000000,
        id="time-as-number",
    ),
    pytest.param({"endTimeUnixNano": None}, "end_time_unix_nano", 0, id="time-missing-is-zero"),
    pytest.param({"kind": "SPAN_KIND_SERVER"}, "kind", SpanKind.SERVER, id="kind-enum-name"),
    pytest.param({"kind": "SERVER"}, "kind", SpanKind.SERVER, id="kind-short-name"),
    pytest.param({"kind": 3}, "kind", SpanKind.CLIENT, id="kind-int"),
    pytest.param({"kind": "3"}, "kind", SpanKind.CLIENT, id="kind-int-as-string"),
    pytest.param({"kind": 42}, "kind", SpanKind.UNSPECIFIED, id="kind-out-of-range-unspecified"),
    pytest.param({"kind": None}, "kind", SpanKind.UNSPECIFIED, id="kind-missing-unspecified"),
    pytest.param(
        {"status": {"code": "STATUS_CODE_ERROR", "message": "boom"}},
        "status_code",
        StatusCode.ERROR,
        id="status-enum-name",
    ),
    pytest.param({"status": {"code": 2}}, "status_code", StatusCode.ERROR, id="status-int"),
    pytest.param(
        {"status": {"code": "STATUS_CODE_OK"}}, "status_code", StatusCode.OK, id="status-ok-name"
    ),
    pytest.param(
        {"status": {"message": "boom", "code": 2}}, "status_message", "boom", id="status-message"
    ),
    pytest.param({"status": {}}, "status_code", StatusCode.UNSET, id="status-empty-unset"),
    pytest.param({"traceId": TRACE.upper()}, "trace_id", TRACE, id="trace-id-uppercase-hex"),
    pytest.param({"traceId": b64(TRACE)}, "trace_id", TRACE, id="trace-id-base64"),
    pytest.param({"spanId": b64(SPAN)}, "span_id", SPAN, id="span-id-base64"),
    pytest.param({"parentSpanId": b64(PARENT)}, "parent_span_id", PARENT, id="parent-id-base64"),
    pytest.param({"parentSpanId": ""}, "parent_span_id", None, id="parent-empty-is-root"),
    pytest.param({"parentSpanId": None}, "parent_span_id", None, id="parent-missing-is-root"),
    pytest.param({"parentSpanId": "0" * 16}, "parent_span_id", None, id="parent-zero-is-root"),
    pytest.param(
        {"parentSpanId": "not-an-id"}, "parent_span_id", None, id="parent-garbage-is-root"
    ),
    pytest.param(
        {
            "events": [
                {
                    "name": "exception",
                    "timeUnixNano": "5",
                    "attributes": [{"key": "exception.message", "value": {"stringValue": "x"}}],
                }
            ]
        },
        "events",
        (SpanEvent("exception", 5, {"exception.message": "x"}),),
        id="event-with-attributes",
    ),
]


@pytest.mark.parametrize(("overrides", "field", "expected"), FIELD_CASES)
def test_json_span_fields(overrides: dict[str, Any], field: str, expected: object) -> None:
    span = only(decode(as_bytes(json_request(json_span(**overrides))), "otlp_json"))
    assert getattr(span, field) == expected


VALUE_CASES = [
    pytest.param({"stringValue": "x"}, "x", id="string"),
    pytest.param({"boolValue": True}, True, id="bool"),
    pytest.param({"intValue": "9007199254740993"}, 9007199254740993, id="int-as-string"),
    pytest.param({"intValue": 42}, 42, id="int-as-number"),
    pytest.param({"doubleValue": 0.5}, 0.5, id="double"),
    pytest.param({"doubleValue": "0.5"}, 0.5, id="double-as-string"),
    pytest.param({"bytesValue": "AQI="}, b"\x01\x02", id="bytes-base64"),
    pytest.param(
        {"arrayValue": {"values": [{"intValue": "1"}, {"stringValue": "two"}]}},
        [1, "two"],
        id="array",
    ),
    pytest.param({"arrayValue": {}}, [], id="array-empty"),
    pytest.param(
        {
            "kvlistValue": {
                "values": [
                    {"key": "role", "value": {"stringValue": "user"}},
                    {
                        "key": "parts",
                        "value": {
                            "arrayValue": {
                                "values": [
                                    {
                                        "kvlistValue": {
                                            "values": [
                                                {"key": "content", "value": {"stringValue": "hi"}}
                                            ]
                                        }
                                    }
                                ]
                            }
                        },
                    },
                ]
            }
        },
        {"role": "user", "parts": [{"content": "hi"}]},
        id="kvlist-nested-array-of-kvlist",
    ),
    pytest.param({}, None, id="empty-value-is-none"),
    pytest.param({"somethingNew": 1}, None, id="unknown-value-kind-is-none"),
]


@pytest.mark.parametrize(("value", "expected"), VALUE_CASES)
def test_json_attribute_values(value: dict[str, Any], expected: object) -> None:
    document = json_request(json_span(attributes=[{"key": "a", "value": value}]))
    assert only(decode(as_bytes(document), "otlp_json")).attributes == {"a": expected}


def test_legacy_instrumentation_library_spans_are_read() -> None:
    document = json_request(json_span(), scope_key="instrumentationLibrarySpans")
    span = only(decode(as_bytes(document)))
    assert (span.span_id, span.scope_name, span.resource) == (SPAN, "lib", {"service.name": "svc"})


def test_json_accepts_a_parsed_mapping() -> None:
    from sidecar.ingest.decode import decode_json

    assert only(decode_json(json_request(json_span()))).span_id == SPAN


# --- garbage: always DecodeError with a closed reason ----------------------------------

DEEP = b'{"resourceSpans":' + b"[" * 100_000 + b"]" * 100_000 + b"}"

GARBAGE_CASES = [
    pytest.param(b"", "auto", "empty", id="empty-payload"),
    pytest.param(b"", "otlp_json", "empty", id="empty-payload-json"),
    pytest.param(b"\xff\xfe\xfd\x00\x01", "otlp_proto", "bad_protobuf", id="proto-bad-wire-type"),
    pytest.param(b'{"hello": "world"}', "auto", "bad_json", id="json-not-otlp"),
    pytest.param(b"[1, 2, 3]", "otlp_json", "bad_json", id="json-array-top-level"),
    pytest.param(b'{"resourceSpans": ', "auto", "bad_json", id="json-truncated"),
    pytest.param(b'{"resourceSpans": [] \xff}', "auto", "bad_json", id="json-invalid-utf8"),
    pytest.param(DEEP, "auto", "bad_json", id="json-absurdly-deep-nesting"),
    pytest.param(as_bytes({"resourceSpans": []}), "auto", "no_spans", id="json-no-resource-spans"),
    pytest.param(
        as_bytes({"resourceSpans": [{"scopeSpans": [{"spans": []}]}]}),
        "auto",
        "no_spans",
        id="json-empty-spans",
    ),
    pytest.param(
        as_bytes({"resourceSpans": {"oops": 1}}),
        "auto",
        "bad_json",
        id="json-resource-spans-not-a-list",
    ),
    pytest.param(
        as_bytes({"resourceSpans": ["x"]}),
        "auto",
        "bad_json",
        id="json-resource-spans-item-not-object",
    ),
    pytest.param(
        as_bytes(json_request(json_span(kind="SPAN_KIND_BOGUS"))),
        "auto",
        "bad_json",
        id="json-unknown-kind-name",
    ),
    pytest.param(
        as_bytes(json_request(json_span(startTimeUnixNano="soon"))),
        "auto",
        "bad_json",
        id="json-time-not-a-number",
    ),
    pytest.param(
        as_bytes(json_request(json_span(attributes=[{"value": {"stringValue": "x"}}]))),
        "auto",
        "bad_json",
        id="json-attribute-without-key",
    ),
    pytest.param(
        as_bytes(
            json_request(json_span(attributes=[{"key": "a", "value": {"bytesValue": "AQI"}}]))
        ),
        "auto",
        "bad_json",
        id="json-bytes-bad-base64-padding",
    ),
    pytest.param(
        as_bytes(json_request(json_span(traceId=None))),
        "auto",
        "bad_id",
        id="json-trace-id-missing",
    ),
    pytest.param(
        as_bytes(json_request(json_span(traceId=12345))),
        "auto",
        "bad_id",
        id="json-trace-id-number",
    ),
    pytest.param(
        as_bytes(json_request(json_span(traceId="xyz"))),
        "auto",
        "bad_id",
        id="json-trace-id-garbage",
    ),
    pytest.param(
        as_bytes(json_request(json_span(traceId=TRACE[:30]))),
        "auto",
        "bad_id",
        id="json-trace-id-short-hex",
    ),
    pytest.param(
        as_bytes(json_request(json_span(traceId="g" * 32))),
        "auto",
        "bad_id",
        id="json-trace-id-non-hex",
    ),
    pytest.param(
        as_bytes(json_request(json_span(traceId="+" + TRACE[1:]))),
        "auto",
        "bad_id",
        id="json-trace-id-with-sign",
    ),
    pytest.param(
        as_bytes(json_request(json_span(traceId=TRACE[:8] + "_" + TRACE[9:]))),
        "auto",
        "bad_id",
        id="json-trace-id-with-underscore",
    ),
    pytest.param(
        as_bytes(json_request(json_span(traceId=" " + TRACE[1:]))),
        "auto",
        "bad_id",
        id="json-trace-id-with-space",
    ),
    pytest.param(
        as_bytes(json_request(json_span(traceId=b64(SPAN)))),
        "auto",
        "bad_id",
        id="json-trace-id-base64-wrong-length",
    ),
    pytest.param(
        as_bytes(json_request(json_span(traceId="0" * 32))),
        "auto",
        "bad_id",
        id="json-trace-id-zero",
    ),
    pytest.param(
        as_bytes(json_request(json_span(spanId="0" * 16))), "auto", "bad_id", id="json-span-id-zero"
    ),
    pytest.param(
        as_bytes(json_request(json_span(spanId=b64("00" * 8)))),
        "auto",
        "bad_id",
        id="json-span-id-zero-base64",
    ),
]


@pytest.mark.parametrize(("payload", "encoding", "reason"), GARBAGE_CASES)
def test_garbage_raises_decode_error_with_reason(
    payload: bytes, encoding: Any, reason: str
) -> None:
    with pytest.raises(DecodeError) as info:
        decode(payload, encoding)
    assert info.value.reason == reason
    assert str(info.value)


def proto_request(trace_id: bytes, span_id: bytes, parent: bytes = b"") -> bytes:
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    span = scope.spans.add()
    span.trace_id, span.span_id, span.parent_span_id, span.name = trace_id, span_id, parent, "x"
    return request.SerializeToString()


PROTO_ID_CASES = [
    pytest.param(proto_request(bytes(16), bytes.fromhex(SPAN)), "bad_id", id="trace-id-zero"),
    pytest.param(
        proto_request(b"\x01\x02\x03", bytes.fromhex(SPAN)), "bad_id", id="trace-id-short"
    ),
    pytest.param(proto_request(b"", bytes.fromhex(SPAN)), "bad_id", id="trace-id-missing"),
    pytest.param(proto_request(bytes.fromhex(TRACE), bytes(8)), "bad_id", id="span-id-zero"),
    pytest.param(proto_request(bytes.fromhex(TRACE), b"\x01" * 9), "bad_id", id="span-id-long"),
    pytest.param(
        ExportTraceServiceRequest(resource_spans=[{}]).SerializeToString(),
        "no_spans",
        id="resource-without-spans",
    ),
]


@pytest.mark.parametrize(("payload", "reason"), PROTO_ID_CASES)
def test_protobuf_bad_ids_and_empty_requests(payload: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode(payload, "otlp_proto")
    assert info.value.reason == reason


@pytest.mark.parametrize(
    ("parent", "expected"),
    [
        pytest.param(b"", None, id="no-parent"),
        pytest.param(bytes(8), None, id="zero-parent"),
        pytest.param(b"\x01\x02", None, id="short-parent"),
        pytest.param(bytes.fromhex(PARENT), PARENT, id="parent"),
    ],
)
def test_protobuf_parent_ids(parent: bytes, expected: str | None) -> None:
    payload = proto_request(bytes.fromhex(TRACE), bytes.fromhex(SPAN), parent)
    assert only(decode(payload)).parent_span_id == expected


@pytest.mark.parametrize("seed", [pytest.param(seed, id=f"seed-{seed}") for seed in range(40)])
def test_random_bytes_raise_decode_error(seed: int) -> None:
    rng = random.Random(seed)
    payload = rng.randbytes(rng.randint(1, 400))
    with pytest.raises(DecodeError) as info:
        decode(payload)
    assert info.value.reason in {"bad_protobuf", "bad_json", "no_spans", "bad_id"}


@pytest.mark.parametrize(
    "keep", [pytest.param(n, id=f"first-{n}-bytes") for n in (1, 2, 10, 50, 100, 150, 200, 213)]
)
def test_truncated_protobuf_raises_decode_error(shared_data: Path, keep: int) -> None:
    payload = (shared_data / EXAMPLE_PROTO).read_bytes()
    assert keep < len(payload)
    with pytest.raises(DecodeError) as info:
        decode(payload[:keep], "otlp_proto")
    assert info.value.reason == "bad_protobuf"


# --- round trip through the OTel SDK's own encoder -------------------------------------


def sdk_request() -> ExportTraceServiceRequest:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "refund-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("round-trip", "1.0")
    with tracer.start_as_current_span(
        "invoke_agent refund-agent",
        kind=OtelSpanKind.SERVER,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "flag": True,
            "count": 3,
            "ratio": 0.25,
            "big": 2**62,
            "names": ["a", "b"],
            "numbers": [1, 2, 3],
            "floats": [0.5, 1.5],
            "flags": [True, False],
        },
    ):
        with tracer.start_as_current_span("chat gemini", kind=OtelSpanKind.CLIENT) as chat:
            chat.add_event("gen_ai.choice", {"index": 0, "text": "hello"})
        with tracer.start_as_current_span("execute_tool issue_refund") as tool:
            tool.set_status(Status(OtelStatusCode.ERROR, "refund service down"))
    provider.shutdown()
    return encode_spans(exporter.get_finished_spans())


def test_sdk_spans_round_trip_equal_through_protobuf_and_json() -> None:
    request = sdk_request()

    from_proto = decode(request.SerializeToString(), "otlp_proto")
    from_json = decode(request_to_json_line(request).encode(), "otlp_json")

    assert from_proto == from_json
    by_name = {s.name: s for s in from_proto}
    root = by_name["invoke_agent refund-agent"]
    chat = by_name["chat gemini"]
    tool = by_name["execute_tool issue_refund"]
    assert root.parent_span_id is None
    assert chat.parent_span_id == tool.parent_span_id == root.span_id
    assert {s.trace_id for s in from_proto} == {root.trace_id}
    assert (root.kind, chat.kind, tool.kind) == (
        SpanKind.SERVER,
        SpanKind.CLIENT,
        SpanKind.INTERNAL,
    )
    assert (tool.status_code, tool.status_message) == (StatusCode.ERROR, "refund service down")
    assert root.attributes == {
        "gen_ai.operation.name": "invoke_agent",
        "flag": True,
        "count": 3,
        "ratio": 0.25,
        "big": 2**62,
        "names": ["a", "b"],
        "numbers": [1, 2, 3],
        "floats": [0.5, 1.5],
        "flags": [True, False],
    }
    assert chat.events[0].name == "gen_ai.choice"
    assert chat.events[0].attributes == {"index": 0, "text": "hello"}
    assert root.resource["service.name"] == "refund-agent"
    assert root.scope_name == "round-trip"
    assert root.end_time_unix_nano >= root.start_time_unix_nano > 0


def _request_whose_first_field_is(size: int) -> bytes:
    """A traces request whose first resource_spans is ``size`` bytes long (padded by a name)."""
    request = ExportTraceServiceRequest()
    resource = request.resource_spans.add()
    span = resource.scope_spans.add().spans.add()
    span.trace_id, span.span_id = bytes(range(1, 17)), bytes(range(1, 9))
    for pad in range(size):
        span.name = "s" * pad
        if resource.ByteSize() == size:
            return request.SerializeToString()
    raise AssertionError(f"no padding gives {size} bytes")


# 0x7B is "{", 0x5B "[", 0x20 a space: after the tag 0x0A, a newline.
@pytest.mark.parametrize("size", [0x7B, 0x5B, 0x20])
def test_protobuf_whose_first_length_reads_as_json_is_protobuf(size: int) -> None:
    payload = _request_whose_first_field_is(size)
    assert payload[:2] == bytes([0x0A, size])
    assert [s.span_id for s in decode(payload)] == ["0102030405060708"]


@pytest.mark.parametrize("prefix", [b"", b"\n", b"\n\n  ", b"\xef\xbb\xbf", b"\xef\xbb\xbf\n"])
def test_json_after_white_space_or_a_byte_order_mark_is_json(prefix: bytes) -> None:
    payload = _request_whose_first_field_is(0x7B)
    line = request_to_json_line(ExportTraceServiceRequest.FromString(payload)).encode()
    assert [s.span_id for s in decode(prefix + line)] == ["0102030405060708"]
    with pytest.raises(DecodeError) as caught:
        decode(prefix + b"[1, 2]")
    assert caught.value.reason == "bad_json"
