"""Hostile records never kill the service: out-of-range numbers and deep values (classes 1, 2).

A record holding ``Infinity``, ``NaN``, ``1e400``, a 5,000-digit integer or a
negative number where OTLP wants a 64-bit timestamp or integer is a counted
decode rejection (``bad_number``), dead-lettered with its reason; the good
traces of the same batch still get their verdicts, and ``sidecar replay``
reports the record and goes on. A kvlist/array value nested deeper than the
bound is unreadable: that attribute is missing, the span counts it, and the
rest of the record is read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sidecar.bounds import MAX_NESTING
from sidecar.cli import main
from sidecar.engine.replica import Service
from sidecar.errors import DecodeError
from sidecar.evaluate.rubric import Rubric
from sidecar.ingest.decode import Encoding, decode
from sidecar.model import Span
from tests.fakes import MemoryTopic
from tests.fuzz_shapes import proto_record
from tests.service_rig import (
    INTERVAL,
    WAIT,
    Rig,
    make_rig,
    quiesce,
    spans,
)

TRACE = "5b8efff798038103d269b633813fc60c"
SPAN = "eee19b7ec3c1b174"


def record(**span_fields: Any) -> bytes:
    span: dict[str, Any] = {
        "traceId": TRACE,
        "spanId": SPAN,
        "name": "invoke_agent shop",
        "startTimeUnixNano": "1000",
        "endTimeUnixNano": "2000",
        **span_fields,
    }
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()


def attribute(value: Any) -> list[dict[str, Any]]:
    return [{"key": "a", "value": value}, {"key": "b", "value": {"stringValue": "kept"}}]


HUGE = "9" * 5000

BAD_NUMBERS = [
    pytest.param(b'{"resourceSpans": [], "x": ' + HUGE.encode() + b"}", id="5000-digit-json-int"),
    pytest.param(record(startTimeUnixNano=HUGE), id="5000-digit-timestamp-string"),
    pytest.param(record(endTimeUnixNano="-5"), id="negative-timestamp"),
    pytest.param(record(endTimeUnixNano=-5), id="negative-timestamp-number"),
    pytest.param(record(startTimeUnixNano=str(2**64)), id="timestamp-past-uint64"),
    pytest.param(record(startTimeUnixNano=1.5), id="fractional-timestamp"),
    pytest.param(
        record(startTimeUnixNano=1000).replace(b"1000", b"Infinity", 1), id="timestamp-infinity"
    ),
    pytest.param(record(startTimeUnixNano=1000).replace(b"1000", b"NaN", 1), id="timestamp-nan"),
    pytest.param(
        record(startTimeUnixNano=1000).replace(b"1000", b"1e400", 1), id="timestamp-1e400"
    ),
    pytest.param(
        record(events=[{"name": "e", "timeUnixNano": "-1"}]), id="negative-event-timestamp"
    ),
    pytest.param(record(attributes=attribute({"intValue": HUGE})), id="5000-digit-int-value"),
    pytest.param(record(attributes=attribute({"intValue": str(2**63)})), id="int-value-past-int64"),
    pytest.param(
        record(attributes=attribute({"intValue": 1})).replace(
            b'"intValue": 1', b'"intValue": 1e400'
        ),
        id="int-value-1e400",
    ),
    pytest.param(
        record(attributes=attribute({"intValue": 1})).replace(b'"intValue": 1', b'"intValue": NaN'),
        id="int-value-nan",
    ),
    pytest.param(
        record(attributes=attribute({"doubleValue": 1})).replace(
            b'"doubleValue": 1', b'"doubleValue": ' + HUGE.encode()
        ),
        id="double-value-4000-digit-int",
    ),
]


@pytest.mark.parametrize("payload", BAD_NUMBERS)
def test_out_of_range_numbers_are_a_bad_number_rejection(payload: bytes) -> None:
    with pytest.raises(DecodeError) as info:
        decode(payload)
    assert info.value.reason == "bad_number"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param({"doubleValue": "Infinity"}, float("inf"), id="double-infinity-string"),
        pytest.param({"doubleValue": "-Infinity"}, float("-inf"), id="double-minus-infinity"),
        pytest.param({"doubleValue": 1e300}, 1e300, id="double-large"),
        pytest.param({"intValue": str(2**63 - 1)}, 2**63 - 1, id="int64-max"),
        pytest.param({"intValue": -(2**63)}, -(2**63), id="int64-min"),
        pytest.param({"boolValue": "false"}, False, id="bool-as-string"),
    ],
)
def test_numbers_in_range_are_read(value: dict[str, Any], expected: object) -> None:
    [span] = decode(record(attributes=attribute(value)))
    assert span.attributes["a"] == expected


def test_a_double_nan_is_read_as_nan() -> None:
    [span] = decode(record(attributes=attribute({"doubleValue": "NaN"})))
    value = span.attributes["a"]
    assert isinstance(value, float)
    assert value != value


def nested_json_value(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"stringValue": "bottom"}
    for level in range(depth):
        if level % 2:
            value = {"arrayValue": {"values": [value]}}
        else:
            value = {"kvlistValue": {"values": [{"key": "k", "value": value}]}}
    return value


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 200])
def test_a_kvlist_nested_too_deep_is_missing_and_counted(depth: int) -> None:
    [span] = decode(record(attributes=attribute(nested_json_value(depth))))
    assert span.attributes == {"a": None, "b": "kept"}
    assert span.unreadable == 1


def test_a_kvlist_within_the_bound_is_read_whole() -> None:
    [span] = decode(record(attributes=attribute(nested_json_value(MAX_NESTING))))
    assert span.attributes["a"] is not None
    assert span.unreadable == 0


def test_protobuf_values_are_read_to_the_parsers_depth_and_refused_past_it() -> None:
    [span] = decode(proto_record(40))
    assert span.unreadable == 0
    assert span.attributes["a"] is not None
    # protobuf's parser stops at about 100 message levels: the record is bad_protobuf.
    with pytest.raises(DecodeError) as info:
        decode(proto_record(5000))
    assert info.value.reason == "bad_protobuf"


# -- the service: one bad record is one dead letter -------------------------------------

RUBRIC = Rubric.model_validate(
    {"id": "shop", "version": "1", "checks": [{"name": "clean", "type": "no_error_spans"}]}
)


def service(topic: MemoryTopic, **kwargs: Any) -> Rig:
    return make_rig(topic, rubrics=[RUBRIC], review={"enabled": False}, **kwargs)


def value(svc: Service, name: str, **labels: str) -> float | None:
    return svc.telemetry.registry.get_sample_value(name, labels)


async def test_bad_numbers_are_dead_lettered_and_good_traces_in_the_batch_get_verdicts() -> None:
    topic = MemoryTopic(partitions=1)
    topic.append(0, spans(1))
    for case in BAD_NUMBERS:
        topic.append(0, case.values[0])
    topic.append(0, spans(2))
    rig = service(topic)
    svc, sink, clock = rig.service, rig.sink, rig.clock
    await svc.start()
    try:
        await svc.step()
        await quiesce()
        clock.advance(WAIT)
        await svc.step()
        await quiesce()
        clock.advance(INTERVAL)
        await svc.step()
        await quiesce()
    finally:
        await svc.close()
    assert [trace for trace, _ in sink.verdicts] == [f"{1:032x}", f"{2:032x}"]
    assert [reason for _, reason, _ in sink.dead_letters] == ["bad_number"] * len(BAD_NUMBERS)
    assert value(svc, "sidecar_dead_letters_total", reason="bad_number") == len(BAD_NUMBERS)
    assert topic.committed == {0: len(BAD_NUMBERS) + 2}


def broken_decoder(payload: bytes, encoding: Encoding) -> list[Span]:
    if b"boom" in payload:
        raise LookupError("a decoder bug")
    return decode(payload, encoding)


async def test_an_unexpected_decoder_exception_dead_letters_that_record_only() -> None:
    topic = MemoryTopic(partitions=1)
    topic.append(0, b'{"boom": 1}')
    topic.append(0, spans(1))
    rig = service(topic, decoder=broken_decoder)
    svc, sink, clock = rig.service, rig.sink, rig.clock
    await svc.start()
    try:
        await svc.step()
        await quiesce()
        clock.advance(WAIT)
        await svc.step()
        await quiesce()
    finally:
        await svc.close()
    assert [(r.offset, reason) for r, reason, _ in sink.dead_letters] == [(0, "internal_error")]
    assert value(svc, "sidecar_internal_errors_total", stage="decode") == 1
    assert [trace for trace, _ in sink.verdicts] == [f"{1:032x}"]


# -- replay reports the record and goes on ----------------------------------------------


def test_replay_reports_hostile_records_and_evaluates_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rubrics = tmp_path / "rubrics"
    rubrics.mkdir()
    (rubrics / "shop.yaml").write_text(
        "id: shop\nversion: '1'\nchecks:\n  - {name: clean, type: no_error_spans}\n"
    )
    lines = [
        spans(1),
        record(startTimeUnixNano=1000).replace(b"1000", b"Infinity", 1),
        record(attributes=attribute({"intValue": HUGE})),
        b'{"resourceSpans": [' + b"[" * 50_000 + b"]" * 50_000 + b"]}",
        record(attributes=attribute(nested_json_value(150))),
        spans(2),
    ]
    path = tmp_path / "spans.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    code = main(["replay", str(path), "--rubrics", str(rubrics)])
    out, err = capsys.readouterr()
    verdicts = sorted(json.loads(line)["trace_id"] for line in out.splitlines())
    assert code == 0
    assert verdicts == sorted([f"{1:032x}", f"{2:032x}", TRACE])
    assert f"{path}:2: bad_number" in err
    assert f"{path}:3: bad_number" in err
    assert f"{path}:4: bad_json" in err
    assert "unreadable_values 1" in err
