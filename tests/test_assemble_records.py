"""Records held as read: ``Assembler.add_record`` decides as ``add(decode(record))`` does.

Every scenario feeds the same records to two assemblers, one through
``add_record`` (protobuf kept as bytes, OTLP/JSON packed, until the trace is
decided) and one through ``add`` of the decoded spans, and requires the same
traces (every field), in the same order, and the same counters. Each
scenario runs with its records as protobuf and again as OTLP/JSON.
"""

from __future__ import annotations

import base64
import json
import tracemalloc
from collections.abc import Callable, Sequence

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from sidecar.bounds import MAX_NESTING
from sidecar.errors import DecodeError
from sidecar.ingest.assemble import Assembler
from sidecar.ingest.decode import decode
from sidecar.ingest.otlpjson import request_to_json_line
from sidecar.model import Attributes, DecideReason, RecordRef, Span, SpanKind, Trace
from tests.agents.genai_spans import make_cases
from tests.agents.otlp import split_requests
from tests.builders import numbered_span


def _value(target: AnyValue, value: object) -> None:
    if isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, int):
        target.int_value = value
    elif isinstance(value, float):
        target.double_value = value
    else:
        target.string_value = str(value)


def _attributes(target: object, attributes: Attributes) -> None:
    for key, value in attributes.items():
        kv = target.add()  # type: ignore[attr-defined]
        kv.key = key
        _value(kv.value, value)


def record(*groups: Sequence[Span], resource: Attributes | None = None) -> bytes:
    """One protobuf request; each group of spans its own resource_spans."""
    request = ExportTraceServiceRequest()
    for spans in groups:
        resource_spans = request.resource_spans.add()
        _attributes(resource_spans.resource.attributes, resource or {"service.name": "svc"})
        scope_spans = resource_spans.scope_spans.add()
        scope_spans.scope.name = "test"
        for s in spans:
            out = scope_spans.spans.add()
            out.trace_id = bytes.fromhex(s.trace_id)
            out.span_id = bytes.fromhex(s.span_id)
            if s.parent_span_id is not None:
                out.parent_span_id = bytes.fromhex(s.parent_span_id)
            out.name = s.name
            out.kind = int(s.kind)  # type: ignore[assignment]
            out.start_time_unix_nano = s.start_time_unix_nano
            out.end_time_unix_nano = s.end_time_unix_nano
            _attributes(out.attributes, s.attributes)
    return request.SerializeToString()


def span(n: int, *, trace: int = 1, parent: int | None = None, **fields: object) -> Span:
    return numbered_span(n, trace=trace, parent=parent, **fields)  # type: ignore[arg-type]


Step = tuple[float, bytes]


def run(
    steps: Sequence[Step],
    feed: Callable[[Assembler, bytes, float, RecordRef], list[Trace]],
    **bounds: float,
) -> tuple[list[Trace], object]:
    assembler = Assembler(decision_wait=5.0, max_trace_age=120.0, **bounds)  # type: ignore[arg-type]
    decided: list[Trace] = []
    for offset, (now, payload) in enumerate(steps):
        decided += feed(assembler, payload, now, RecordRef(0, offset))
        decided += assembler.due(now)
    decided += assembler.due(1e6)
    decided += assembler.drain(DecideReason.SHUTDOWN)
    return decided, assembler.stats


def lazily(assembler: Assembler, payload: bytes, now: float, ref: RecordRef) -> list[Trace]:
    return assembler.add_record(payload, "auto", now, ref)


def eagerly(assembler: Assembler, payload: bytes, now: float, ref: RecordRef) -> list[Trace]:
    return assembler.add(decode(payload, "auto"), now, ref)


def agent_records() -> list[Step]:
    cases = make_cases(12, seed=3)
    return [(float(i), part) for i, c in enumerate(cases) for part in split_requests(c.spans, 2)]


ROOT = span(1, name="invoke_agent refund-agent", kind=SpanKind.SERVER)
CHILD = span(2, parent=1, name="chat", attrs={"gen_ai.request.model": "m"})
TWO = [span(1, trace=2, name="root of two"), span(2, trace=2, parent=1)]

SCENARIOS = [
    pytest.param(agent_records(), {}, id="agent-traces-in-two-records-each"),
    pytest.param([(0, record([ROOT, CHILD], TWO))], {}, id="two-traces-in-one-record"),
    pytest.param([(0, record([ROOT, TWO[0], CHILD, TWO[1]]))], {}, id="traces-interleaved"),
    pytest.param(
        [(0, record([ROOT])), (1, record([ROOT])), (2, record([CHILD]))], {}, id="redelivered"
    ),
    pytest.param(
        [(0, record([ROOT, CHILD])), (1, record([CHILD, span(3, parent=1)]))],
        {},
        id="redelivered-beside-a-new-span",
    ),
    pytest.param(
        [(0, record([ROOT, CHILD, span(2, parent=1, name="forged")]))],
        {},
        id="different-span-same-id-in-one-record",
    ),
    pytest.param(
        [
            (0, record([ROOT, CHILD])),
            (1, record([span(2, parent=1, name="forged")])),
            (2, record([CHILD])),
        ],
        {},
        id="different-span-same-id-later",
    ),
    pytest.param(
        [(0, record([span(1, parent=99, name="invoke_agent refund-agent")]))],
        {},
        id="remote-parent-root",
    ),
    pytest.param([(0, record([span(3, parent=99, name="tool")]))], {}, id="orphan-to-max-age"),
    pytest.param(
        [(0, record([ROOT, CHILD, span(3, parent=1), span(4, parent=1), span(5, parent=1)]))],
        {"max_spans_per_trace": 3},
        id="span-limit-within-a-record",
    ),
    pytest.param(
        [(0, record([ROOT, TWO[0], CHILD, TWO[1]])), (1, record([span(1, trace=3)]))],
        {"max_open_traces": 1},
        id="eviction-within-a-record",
    ),
    pytest.param(
        [(0, record([ROOT], resource={"service.name": "a", "n": 1})), (1, record([CHILD]))],
        {},
        id="resources-kept-per-part",
    ),
    pytest.param(
        [
            (0, record([ROOT])),
            (
                1,
                b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"'
                + ROOT.trace_id.encode()
                + b'","spanId":"0000000000000002","parentSpanId":"0000000000000001","name":"j"}]}]}]}',
            ),
        ],
        {},
        id="json-record-beside-protobuf",
    ),
]


def as_json(payload: bytes) -> bytes:
    """A protobuf record written as OTLP/JSON (hex ids), as the Collector's JSON encoding has it."""
    if payload.lstrip()[:1] == b"{":
        return payload
    request = ExportTraceServiceRequest.FromString(payload)
    return request_to_json_line(request).encode()


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
@pytest.mark.parametrize(("steps", "bounds"), SCENARIOS)
def test_records_held_as_read_decide_as_decoded_spans_do(
    steps: Sequence[Step], bounds: dict[str, float], encoding: str
) -> None:
    if encoding == "json":
        steps = [(now, as_json(payload)) for now, payload in steps]
    got, got_stats = run(steps, lazily, **bounds)
    want, want_stats = run(steps, eagerly, **bounds)
    assert got == want
    assert got_stats == want_stats
    assert got  # every scenario decides something


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\xff\x00garbage",
        record([]),
        record([span(1)])[:-3],
        record([span(1)]).replace(bytes.fromhex(span(1).span_id), bytes(8)),
        b'{"resourceSpans": [}',
    ],
)
def test_a_record_refused_by_decode_is_refused_with_the_same_reason(payload: bytes) -> None:
    with pytest.raises(DecodeError) as expected:
        decode(payload, "auto")
    with pytest.raises(DecodeError) as got:
        Assembler().add_record(payload, "auto", 0.0)
    assert got.value.reason == expected.value.reason


def held_open(records: list[bytes]) -> dict[str, int]:
    """Bytes allocated to hold ``records`` open, fed ``lazily`` and ``eagerly``, one trace each."""
    held: dict[str, int] = {}
    for name, feed in (("lazily", lazily), ("eagerly", eagerly)):
        assembler = Assembler(decision_wait=1e9, max_trace_age=1e9)
        tracemalloc.start()
        for offset, r in enumerate(records):
            assert not feed(assembler, r, 0.0, RecordRef(0, offset))
        held[name] = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        assert assembler.open_traces == len(records)
    return held


def test_open_traces_hold_about_their_bytes_not_decoded_spans() -> None:
    records = [part for c in make_cases(150, seed=5) for part in split_requests(c.spans, 1)]
    payload = sum(len(r) for r in records)
    held = held_open(records)
    # The records themselves were allocated before: what is added is bookkeeping.
    assert held["lazily"] < 0.5 * payload, held
    assert held["eagerly"] > payload, held


def test_a_record_read_again_is_a_redelivery_and_a_forged_copy_is_kept() -> None:
    assembler = Assembler(decision_wait=0.0)
    assembler.add_record(record([ROOT, CHILD]), "auto", 0.0)
    assembler.add_record(record([ROOT, CHILD]), "auto", 0.0)
    assert (assembler.stats.redelivered_spans, assembler.stats.duplicate_span_ids) == (2, 0)
    forged = span(2, parent=1, name="forged")
    assembler.add_record(record([forged]), "auto", 0.0)
    assert (assembler.stats.redelivered_spans, assembler.stats.duplicate_span_ids) == (2, 1)
    [trace] = assembler.due(1.0)
    assert sorted(s.name for s in trace.spans) == sorted([ROOT.name, CHILD.name, "forged"])


def _json_span(trace: int, n: int, parent: int | None = None, **extra: object) -> dict[str, object]:
    out: dict[str, object] = {
        "traceId": span(n, trace=trace).trace_id,
        "spanId": span(n, trace=trace).span_id,
        "name": f"span {n}",
        "startTimeUnixNano": str(1000 + n),
        "endTimeUnixNano": 2000 + n,
        **extra,
    }
    if parent is not None:
        out["parentSpanId"] = span(parent, trace=trace).span_id
    return out


def _json_record(*resources: dict[str, object]) -> bytes:
    return json.dumps({"resourceSpans": list(resources)}).encode()


def _scoped(
    *spans: dict[str, object], key: str = "scopeSpans", **extra: object
) -> dict[str, object]:
    return {
        "resource": {"attributes": []},
        key: [{"scope": {"name": "s"}, "spans": list(spans)}],
        **extra,
    }


def _nested(depth: int) -> object:
    value: object = {"stringValue": "deep"}
    for _ in range(depth):
        value = {"arrayValue": {"values": [value]}}
    return value


def _b64(hex_id: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_id)).decode()


_DEEP_JUNK: object = []
for _ in range(400):
    _DEEP_JUNK = [_DEEP_JUNK]

JSON_SCENARIOS = [
    pytest.param(
        [
            (
                0,
                _json_record(
                    _scoped(_json_span(1, 1), _json_span(2, 1), key="instrumentationLibrarySpans")
                ),
            )
        ],
        id="legacy-scope-key-two-traces",
    ),
    pytest.param(
        [
            (
                0,
                _json_record(
                    {
                        "scopeSpans": [],
                        "instrumentationLibrarySpans": [
                            {
                                "instrumentationLibrary": {"name": "old"},
                                "spans": [_json_span(1, 1), _json_span(2, 1)],
                            }
                        ],
                    }
                ),
            )
        ],
        id="empty-new-scope-key-beside-the-old",
    ),
    pytest.param(
        [
            (
                0,
                _json_record(
                    _scoped(
                        {
                            **_json_span(1, 1),
                            "traceId": _b64(span(1).trace_id),
                            "spanId": _b64(span(1).span_id),
                        },
                        _json_span(2, 1),
                        _json_span(
                            1,
                            2,
                            parent=1,
                            kind="SPAN_KIND_CLIENT",
                            status={"code": 2, "message": "x"},
                        ),
                    )
                ),
            )
        ],
        id="base64-ids-and-enum-names",
    ),
    pytest.param(
        [
            (
                0,
                _json_record(
                    _scoped(
                        _json_span(
                            1,
                            1,
                            attributes=[
                                {"key": "deep", "value": _nested(MAX_NESTING + 3)},
                                {"key": "nan", "value": {"doubleValue": "NaN"}},
                                {"key": "big", "value": {"intValue": "9223372036854775807"}},
                                {"key": "text", "value": {"stringValue": "caf\u00e9 \u2603"}},
                            ],
                            events=[{"name": "e", "timeUnixNano": "5", "attributes": []}],
                            unknown={"a": [1, 2, {"b": None}]},
                        ),
                        _json_span(2, 1),
                        junk=_DEEP_JUNK,
                    ),
                ),
            )
        ],
        id="values-cut-unknown-keys-and-deep-junk",
    ),
    pytest.param(
        [
            (
                0,
                _json_record(_scoped(_json_span(1, 1), _json_span(2, 1))).replace(
                    b'"span 1"', b'"\\ud800 x"', 1
                ),
            ),
            (
                1,
                _json_record(
                    _scoped(_json_span(1, 2, parent=1), _json_span(2, 2, parent=1))
                ).replace(b"span 2", b"\xff\xfe", 1),
            ),
        ],
        id="text-needing-repair-read-as-decode-does",
    ),
    pytest.param(
        [
            (
                0,
                b'{"resourceSpans":[{"scopeSpans":[{"spans":['
                + json.dumps(_json_span(1, 1)).encode()[:-1]
                + b',"name":"second","name":"last"},'
                + json.dumps(_json_span(2, 1)).encode()
                + b"]}]}]}",
            )
        ],
        id="repeated-keys-last-wins",
    ),
    pytest.param(
        [
            (0, _json_record(_scoped(_json_span(1, 1), _json_span(2, 1)))),
            (1, _json_record(_scoped(_json_span(1, 1), _json_span(1, 2, parent=1)))),
            (
                2,
                _json_record(
                    _scoped(
                        {**_json_span(1, 2, parent=1), "name": "forged"}, _json_span(2, 2, parent=1)
                    )
                ),
            ),
        ],
        id="redelivered-and-forged-in-json",
    ),
]


@pytest.mark.parametrize("steps", JSON_SCENARIOS)
def test_json_records_held_packed_decide_as_decoded_spans_do(steps: Sequence[Step]) -> None:
    got, got_stats = run(steps, lazily)
    want, want_stats = run(steps, eagerly)
    # By repr: a NaN value comes back as NaN, which never equals another NaN.
    assert repr(got) == repr(want)
    assert got_stats == want_stats
    assert got


def test_open_json_traces_hold_less_than_decoded_spans() -> None:
    records = [
        as_json(part) for c in make_cases(150, seed=5) for part in split_requests(c.spans, 1)
    ]
    held = held_open(records)
    # Packed, about the protobuf's size; decoded, twice that (bench/bench_memory.py).
    assert held["lazily"] < 0.7 * held["eagerly"], held
