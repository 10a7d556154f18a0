"""Fuzz: decoding never raises anything but DecodeError, and what it returns is bounded.

Contract for any payload, protobuf or OTLP/JSON: a list of spans or a
:class:`DecodeError` with a reason from the closed set; never another
exception, within the per-example deadline. Every returned span has hex ids,
timestamps within uint64, and attribute values nested no deeper than the
bound (deeper ones are missing and counted in ``Span.unreadable``).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from sidecar.bounds import MAX_NESTING, UINT64_MAX, value_depth
from sidecar.decode import decode
from sidecar.errors import DecodeError
from sidecar.model import Span
from tests.fuzz_strategies import (
    FUZZ,
    deep_text,
    embeddable,
    huge_ints,
    number_texts,
    texts,
)
from tests.test_hostile_decode import proto_record

REASONS = {"empty", "bad_protobuf", "bad_json", "bad_id", "no_spans", "bad_number", "too_large"}
TRACE = "5b8efff798038103d269b633813fc60c"
SPAN = "eee19b7ec3c1b174"


def check_contract(payload: bytes, encoding: Any = "auto") -> list[Span]:
    try:
        spans = decode(payload, encoding)
    except DecodeError as exc:
        spans, reason = [], exc.reason
    else:
        reason = None
        assert spans
    assert reason is None or reason in REASONS, reason
    for span in spans:
        assert len(span.trace_id) == 32
        assert int(span.trace_id, 16)
        assert len(span.span_id) == 16
        assert int(span.span_id, 16)
        assert 0 <= span.start_time_unix_nano <= UINT64_MAX
        assert 0 <= span.end_time_unix_nano <= UINT64_MAX
        for values in (span.attributes, span.resource, *(e.attributes for e in span.events)):
            for value in values.values():
                assert value_depth(value) <= MAX_NESTING
    return spans


@FUZZ
@given(st.binary(max_size=2000))
@example(b"\x0a\xff\xff\xff\xff\x0f")
@example(b"{" * 100_000)
def test_random_bytes(payload: bytes) -> None:
    check_contract(payload)
    check_contract(payload, "otlp_proto")
    check_contract(payload, "otlp_json")


# Any of these may replace a field of a well-formed span; most are wrong on purpose.
field_values = embeddable | huge_ints | number_texts | st.sampled_from([[], {}, True, None])

# An OTLP/JSON AnyValue, possibly ill-typed, possibly "@DEEP@" to be replaced by deep text.
any_values = st.one_of(
    st.builds(lambda v: {"stringValue": v}, field_values),
    st.builds(lambda v: {"intValue": v}, field_values),
    st.builds(lambda v: {"doubleValue": v}, field_values),
    st.builds(lambda v: {"boolValue": v}, field_values),
    st.builds(lambda v: {"bytesValue": v}, field_values),
    st.builds(lambda v: {"arrayValue": {"values": [{"stringValue": v}]}}, field_values),
    st.builds(lambda v: {"kvlistValue": {"values": [{"key": "k", "value": v}]}}, field_values),
    st.just({"kvlistValue": "@DEEP@"}),
    st.just({"arrayValue": "@DEEP@"}),
    field_values,
)

SPAN_FIELDS = [
    "traceId",
    "spanId",
    "parentSpanId",
    "name",
    "kind",
    "startTimeUnixNano",
    "endTimeUnixNano",
    "status",
    "events",
    "attributes",
]


def deep_any_value(depth: int, kind: str) -> str:
    if kind == "kvlistValue":
        head, tail = '{"values":[{"key":"k","value":{"kvlistValue":', "}}]}"
    else:
        head, tail = '{"values":[{"arrayValue":', "}]}"
    return head * depth + '{"values":[]}' + tail * depth


@st.composite
def otlp_json_records(draw: st.DrawFn) -> bytes:
    span: dict[str, Any] = {
        "traceId": TRACE,
        "spanId": SPAN,
        "name": "invoke_agent shop",
        "startTimeUnixNano": "1000",
        "endTimeUnixNano": "2000",
    }
    for field in draw(st.lists(st.sampled_from(SPAN_FIELDS), max_size=4, unique=True)):
        span[field] = draw(field_values)
    span["attributes"] = [
        {"key": draw(texts), "value": draw(any_values)} for _ in range(draw(st.integers(0, 4)))
    ]
    if draw(st.booleans()):
        span["events"] = [{"name": "e", "timeUnixNano": draw(field_values)}]
    text = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}, default=str)
    depth = draw(st.sampled_from([MAX_NESTING - 2, MAX_NESTING + 2, 300, 20_000]))
    for kind in ("kvlistValue", "arrayValue"):
        text = text.replace(
            f'{{"{kind}": "@DEEP@"}}', f'{{"{kind}": {deep_any_value(depth, kind)}}}'
        )
    return text.encode()


@FUZZ
@given(otlp_json_records())
def test_hostile_otlp_json(payload: bytes) -> None:
    check_contract(payload)


@FUZZ
@given(st.sampled_from([1, 30, 45, 60, 100, 5000]), st.integers(0, 400), st.binary(max_size=8))
def test_deep_and_mutated_protobuf(depth: int, at: int, garbage: bytes) -> None:
    payload = proto_record(depth)
    check_contract(payload)
    cut = at % (len(payload) + 1)
    check_contract(payload[:cut] + garbage + payload[cut:], "otlp_proto")
    check_contract(payload[:cut], "otlp_proto")


@FUZZ
@given(st.sampled_from(["[", "{"]), st.sampled_from([MAX_NESTING, 5_000, 200_000]))
def test_deep_json_anywhere(opener: str, depth: int) -> None:
    check_contract(('{"resourceSpans": ' + deep_text(depth, opener) + "}").encode())
