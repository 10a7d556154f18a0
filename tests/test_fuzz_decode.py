"""Fuzz: decoding never raises anything but DecodeError, and what it returns is bounded.

Contract for any payload, protobuf or OTLP/JSON: a list of spans or a
:class:`DecodeError` with a reason from the closed set; never another
exception, within the per-example deadline. Every returned span has hex ids,
timestamps within uint64, and attribute values nested no deeper than the
bound (deeper ones are missing and counted in ``Span.unreadable``). What
the trace buffer holds of a record (``scan_record``: protobuf bytes, or the
decoded spans packed) is refused with the same reason, or gives back the
same spans.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sidecar.bounds import MAX_NESTING, UINT64_MAX, value_depth
from sidecar.errors import DecodeError
from sidecar.ingest.decode import decode, decode_held, scan_record
from sidecar.model import Span
from tests.fuzz_shapes import otlp_json_records, proto_record
from tests.fuzz_strategies import (
    FUZZ,
    deep_text,
)

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
    if reason is not None:
        with pytest.raises(DecodeError) as refused:
            scan_record(payload, encoding)
        assert refused.value.reason == reason
    else:
        # By repr: a NaN value comes back as NaN, which never equals another NaN.
        assert repr(decode_held(scan_record(payload, encoding).held())) == repr(spans)
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
