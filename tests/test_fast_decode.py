"""The decoder's fast paths give what the general paths give (issue 14).

- The record builders (``new_span``, ``new_span_event``, ``new_log_record``)
  give the very record the dataclass constructor gives: same type, equality,
  repr, frozenness, ``replace`` and pickling.
- The protobuf attribute reader decides non-empty strings without
  ``WhichOneof``: it reads every AnyValue as a plain ``WhichOneof`` reader does,
  including empty strings, zeros, unset values and the depth bound.
- One unreadable counter per request: each span counts its own values and its
  resource's, as the OTLP/JSON decoder (a counter per span) counts them.
"""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from sidecar.bounds import MAX_NESTING
from sidecar.ingest.decode import _Cut, _pb_attributes, decode_json, spans_from_request
from sidecar.ingest.otlpjson import request_to_dict
from sidecar.model import (
    LogRecord,
    Span,
    SpanEvent,
    SpanKind,
    StatusCode,
    new_log_record,
    new_span,
    new_span_event,
)
from tests.fuzz_strategies import FUZZ
from tests.otlp_records import fill_any_value

EVENT_FIELDS: dict[str, Any] = {"name": "exception", "time_unix_nano": 15, "attributes": {"a": 1}}
SPAN_FIELDS: dict[str, Any] = {
    "trace_id": "5b8efff798038103d269b633813fc60c",
    "span_id": "eee19b7ec3c1b174",
    "parent_span_id": None,
    "name": "chat m",
    "kind": SpanKind.CLIENT,
    "start_time_unix_nano": 10,
    "end_time_unix_nano": 20,
    "attributes": {"gen_ai.system": "openai", "list": ["a", 1]},
    "resource": {"service.name": "agent"},
    "scope_name": "tests",
    "status_code": StatusCode.ERROR,
    "status_message": "failed",
    "events": (SpanEvent(**EVENT_FIELDS),),
    "unreadable": 2,
    "repaired": 1,
}
LOG_FIELDS: dict[str, Any] = {
    "trace_id": None,
    "span_id": "eee19b7ec3c1b174",
    "event_name": "gen_ai.user.message",
    "time_unix_nano": 7,
    "attributes": {"event.name": "gen_ai.user.message"},
    "body": {"content": "hi"},
    "resource": {},
    "scope_name": "tests",
    "unreadable": 0,
}
BUILDERS = [
    pytest.param(Span, new_span, SPAN_FIELDS, id="span"),
    pytest.param(SpanEvent, new_span_event, EVENT_FIELDS, id="span-event"),
    pytest.param(LogRecord, new_log_record, LOG_FIELDS, id="log-record"),
]


@pytest.mark.parametrize(("record", "build", "fields"), BUILDERS)
def test_builder_gives_the_constructors_record(
    record: type[Any], build: Any, fields: dict[str, Any]
) -> None:
    built, constructed = build(**fields), record(**fields)
    assert type(built) is record
    assert built == constructed
    assert repr(built) == repr(constructed)
    assert dataclasses.astuple(built) == dataclasses.astuple(constructed)
    assert pickle.loads(pickle.dumps(built)) == constructed
    other = {"b": 2}
    assert dataclasses.replace(built, attributes=other) == record(**{**fields, "attributes": other})
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.attributes = other
    assert not hasattr(built, "__dict__")


@pytest.mark.parametrize(("record", "build", "fields"), BUILDERS)
def test_builder_takes_every_field_in_order(
    record: type[Any], build: Any, fields: dict[str, Any]
) -> None:
    # A field added to the record must be added to its builder too (and no default hides it).
    names = [f.name for f in dataclasses.fields(record)]
    parameters = inspect.signature(build).parameters.values()
    assert [p.name for p in parameters] == names == list(fields)
    assert all(p.default is inspect.Parameter.empty for p in parameters)
    assert build(*fields.values()) == record(*fields.values())


# --- attribute values: the string-first reader against a WhichOneof reader ------------


class _Deep(Exception):
    pass


def _plain_value(value: AnyValue, depth: int) -> object:
    """An AnyValue read the plain way: WhichOneof, then that field (the decoder before issue 14)."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        if depth >= MAX_NESTING:
            raise _Deep
        return [_plain_value(v, depth + 1) for v in value.array_value.values]
    if kind == "kvlist_value":
        if depth >= MAX_NESTING:
            raise _Deep
        return {kv.key: _plain_value(kv.value, depth + 1) for kv in value.kvlist_value.values}
    return None if kind is None else getattr(value, kind)


def _plain_attributes(items: list[KeyValue]) -> tuple[dict[str, object], int]:
    attributes: dict[str, object] = {}
    unreadable = 0
    for kv in items:
        try:
            attributes[kv.key] = _plain_value(kv.value, 0)
        except _Deep:
            attributes[kv.key] = None
            unreadable += 1
    return attributes, unreadable


_UNSET = object()


def _kv(key: str, value: object) -> KeyValue:
    kv = KeyValue(key=key)
    fill_any_value(kv.value, value)
    return kv


def _nested(depth: int, leaf: object) -> object:
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


# Values where a string-first reader could go wrong: empty strings, zero scalars
# (string_value reads "" for them), unset values, strings inside arrays and kvlists.
scalars = st.sampled_from(["", "x", 0, 1, False, True, 0.0, -1.5, b"", b"\x00", _UNSET]) | st.text(
    max_size=5
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=20,
)


@FUZZ
@given(st.dictionaries(st.text(max_size=4), values, max_size=6))
def test_attributes_read_as_a_plain_reader_reads_them(attributes: dict[str, object]) -> None:
    items = [_kv(k, v) for k, v in attributes.items()]
    cut = _Cut()
    assert (_pb_attributes(items, cut), cut.count) == _plain_attributes(items)


@pytest.mark.parametrize("depth", [MAX_NESTING - 1, MAX_NESTING, MAX_NESTING + 1, MAX_NESTING + 2])
@pytest.mark.parametrize(
    "leaf", ["leaf", "", 0, _UNSET, []], ids=["text", "empty", "zero", "unset", "array"]
)
def test_depth_bound_holds_for_every_leaf(depth: int, leaf: object) -> None:
    # Built in Python (protobuf's parser refuses nesting this deep before the bound applies).
    items = [
        _kv("deep", _nested(depth, leaf)),
        _kv("s", "s"),
    ]
    cut = _Cut(3)
    read = _pb_attributes(items, cut)
    plain, unreadable = _plain_attributes(items)
    assert (read, cut.count) == (plain, 3 + unreadable)
    assert unreadable == (depth + (leaf == []) > MAX_NESTING)


# --- unreadable counts per span with one counter per request --------------------------


def _request() -> ExportTraceServiceRequest:
    """Two resources (one with a value too deep), spans with 0, 1 and 2 values too deep."""
    too_deep = _nested(MAX_NESTING + 1, "x")
    request = ExportTraceServiceRequest()
    for resource_deep in (1, 0):
        resource_spans = request.resource_spans.add()
        fill_any_value(resource_spans.resource.attributes.add(key="service.name").value, "agent")
        for _ in range(resource_deep):
            fill_any_value(resource_spans.resource.attributes.add(key="deep").value, too_deep)
        for scope in ("a", "b"):
            scope_spans = resource_spans.scope_spans.add()
            scope_spans.scope.name = scope
            for own in (0, 1, 2):
                pb = scope_spans.spans.add(
                    trace_id=bytes.fromhex("5b8efff798038103d269b633813fc60c"),
                    span_id=bytes([1 + own, resource_deep, ord(scope), 0, 0, 0, 0, 1]),
                    name=f"span {own}",
                )
                fill_any_value(pb.attributes.add(key="text").value, "t")
                if own:
                    fill_any_value(pb.attributes.add(key="deep").value, too_deep)
                if own == 2:
                    event = pb.events.add(name="e", time_unix_nano=3)
                    fill_any_value(event.attributes.add(key="deep").value, too_deep)
    return request


def test_each_span_counts_its_own_and_its_resources_unreadable_values() -> None:
    request = _request()
    spans = spans_from_request(request)
    assert [s.unreadable for s in spans] == [1, 2, 3] * 2 + [0, 1, 2] * 2
    # The OTLP/JSON decoder, with a counter per span, reads the same request the same way.
    assert spans == decode_json(request_to_dict(request))
