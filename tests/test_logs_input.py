"""OTLP logs as a second input: decoding, joining traces in the assembler, feeding the transcript.

Requests are built with the OTLP protobuf classes (and their OTLP/JSON form
converted here, test side), the shapes taken from what the producers emit:
ADK 2's ``gen_ai.client.inference.operation.details`` with structured
attributes, and the per-message events of ``opentelemetry-instrumentation-openai-v2``
(``gen_ai.user.message``, ``gen_ai.assistant.message`` with ``tool_calls``,
``gen_ai.tool.message`` with ``id``, ``gen_ai.choice`` with ``message``),
whose content is the record's body.
"""

from __future__ import annotations

import base64
import json
import tracemalloc
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord as PbLogRecord

from sidecar.bounds import MAX_NESTING
from sidecar.errors import DecodeError
from sidecar.evaluate.transcript import build_transcript
from sidecar.ingest.assemble import Assembler
from sidecar.ingest.decode_logs import decode_logs, decode_signal
from sidecar.ingest.events import join_logs
from sidecar.model import DecideReason, LogRecord, RecordRef, SpanKind, Trace
from tests.agents.genai_spans import make_genai_trace, recorder
from tests.agents.otlp import encode_request
from tests.builders import TRACE_ID, span
from tests.otlp_files import proto_to_otlp_json

ROOT, CHAT1, TOOL, CHAT2 = "a1" * 8, "b2" * 8, "c3" * 8, "d4" * 8


def _any(value: object) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, list):
        out = AnyValue()
        out.array_value.values.extend(_any(v) for v in value)
        return out
    assert isinstance(value, dict)
    out = AnyValue()
    out.kvlist_value.values.extend(KeyValue(key=k, value=_any(v)) for k, v in value.items())
    return out


def pb_record(
    event: str = "",
    *,
    attrs: dict[str, Any] | None = None,
    body: object = None,
    trace_id: str | None = TRACE_ID,
    span_id: str | None = None,
    time: int = 0,
) -> PbLogRecord:
    record = PbLogRecord(time_unix_nano=time, event_name=event)
    if trace_id is not None:
        record.trace_id = bytes.fromhex(trace_id)
    if span_id is not None:
        record.span_id = bytes.fromhex(span_id)
    record.attributes.extend(KeyValue(key=k, value=_any(v)) for k, v in (attrs or {}).items())
    if body is not None:
        record.body.CopyFrom(_any(body))
    return record


def request(*records: PbLogRecord, service: str = "refund-agent") -> ExportLogsServiceRequest:
    req = ExportLogsServiceRequest()
    resource_logs = req.resource_logs.add()
    resource_logs.resource.attributes.add(key="service.name", value=_any(service))
    scope_logs = resource_logs.scope_logs.add()
    scope_logs.scope.name = "opentelemetry.instrumentation.openai_v2"
    scope_logs.log_records.extend(records)
    return req


def as_json(req: ExportLogsServiceRequest) -> bytes:
    document = MessageToDict(req)

    def hexify(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("traceId", "spanId"):
                    node[key] = base64.b64decode(value).hex()
                else:
                    hexify(value)
        elif isinstance(node, list):
            for item in node:
                hexify(item)

    hexify(document)
    return json.dumps(document).encode()


ENCODINGS = [
    pytest.param(lambda r: r.SerializeToString(), id="protobuf"),
    pytest.param(as_json, id="otlp-json"),
]


# --- decoding -------------------------------------------------------------------------------


@pytest.mark.parametrize("encode", ENCODINGS)
def test_decode_reads_ids_event_name_attributes_and_body(encode: Any) -> None:
    payload = encode(
        request(
            pb_record(
                "gen_ai.choice",
                attrs={"gen_ai.system": "openai"},
                body={"index": 0, "message": {"role": "assistant", "content": "Hi"}},
                span_id=CHAT1,
                time=7,
            ),
            # event.name as an attribute (SDKs before OTLP 1.5), no span id
            pb_record(attrs={"event.name": "gen_ai.user.message"}, body="plain text"),
            pb_record("app.log", trace_id=None, body="no trace"),
        )
    )
    choice, user, untraced = decode_logs(payload)
    assert (choice.trace_id, choice.span_id, choice.event_name) == (
        TRACE_ID,
        CHAT1,
        "gen_ai.choice",
    )
    assert choice.time_unix_nano == 7
    assert choice.attributes == {"gen_ai.system": "openai"}
    assert choice.body == {"index": 0, "message": {"role": "assistant", "content": "Hi"}}
    assert choice.resource == {"service.name": "refund-agent"}
    assert choice.scope_name == "opentelemetry.instrumentation.openai_v2"
    assert (user.span_id, user.event_name, user.body) == (None, "gen_ai.user.message", "plain text")
    assert (untraced.trace_id, untraced.span_id) == (None, None)
    assert decode_signal(payload).logs == [choice, user, untraced]
    assert decode_signal(payload).spans == []


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        pytest.param(b"", "empty", id="empty"),
        pytest.param(b"\xff\xff\xff", "bad_protobuf", id="not-protobuf"),
        pytest.param(b"{", "bad_json", id="not-json"),
        pytest.param(b'{"resourceSpans": []}', "bad_json", id="traces-json"),
        pytest.param(b'{"resourceLogs": []}', "no_logs", id="no-records"),
        pytest.param(
            b'{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"traceId":"xyz"}]}]}]}',
            "bad_id",
            id="bad-trace-id",
        ),
        pytest.param(
            b'{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"timeUnixNano":"-1"}]}]}]}',
            "bad_number",
            id="negative-time",
        ),
        pytest.param(
            b'{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"attributes":7}]}]}]}',
            "bad_json",
            id="attributes-not-a-list",
        ),
    ],
)
def test_decode_refuses_what_is_not_a_logs_request(payload: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as caught:
        decode_logs(payload)
    assert caught.value.reason == reason


def test_binary_trace_id_of_wrong_length_is_bad_id() -> None:
    record = pb_record("x")
    record.trace_id = b"\x01\x02"
    with pytest.raises(DecodeError) as caught:
        decode_logs(request(record).SerializeToString())
    assert caught.value.reason == "bad_id"


def test_a_body_nested_too_deep_is_missing_and_counted() -> None:
    # OTLP/JSON only: protobuf's own parser refuses this depth (bad_protobuf) before we read it.
    deep = '{"stringValue": "x"}'
    for _ in range(MAX_NESTING + 2):
        deep = '{"arrayValue": {"values": [' + deep + "]}}"
    payload = (
        '{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"eventName":"gen_ai.choice",'
        f'"body":{deep}}}]}}]}}]}}'
    )
    (record,) = decode_logs(payload.encode())
    assert record.body is None
    assert record.unreadable == 1


def test_signal_is_told_by_content_for_traces_too() -> None:
    rec = recorder("refund-agent", "9.9.9", seed=3)
    make_genai_trace(rec.provider, "Refund A7", [], "Nothing to do.", agent="refund-agent")
    payload = encode_request(rec.spans())
    decoded = decode_signal(payload)
    assert decoded.logs == []
    assert len(decoded.spans) == len(rec.spans())


@pytest.mark.parametrize(
    "body",
    ["resourceSpans", '{"resourceSpans": []}', "resourceLogs"],
    ids=["key-as-text", "json-as-text", "own-key-as-text"],
)
def test_a_log_quoting_the_other_signal_is_still_a_log(body: str) -> None:
    # Only the top-level keys tell the signal; a body may quote either key.
    payload = json.dumps(
        {
            "resourceLogs": [
                {"scopeLogs": [{"logRecords": [{"eventName": "x", "body": {"stringValue": body}}]}]}
            ]
        }
    ).encode()
    decoded = decode_signal(payload)
    assert decoded.spans == []
    assert [r.body for r in decoded.logs] == [body]


def test_traces_quoting_the_logs_key_are_traces() -> None:
    rec = recorder("refund-agent", "9.9.9", seed=3)
    make_genai_trace(rec.provider, "Refund A7", [], "Nothing to do.", agent="refund-agent")
    request = proto_to_otlp_json(encode_request(rec.spans()))
    first = request["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    first["attributes"].append({"key": "note", "value": {"stringValue": "resourceLogs"}})
    document = json.dumps(request).encode()
    decoded = decode_signal(document)
    assert decoded.logs == []
    assert len(decoded.spans) == len(rec.spans())


@pytest.mark.parametrize("signal", ["traces", "logs"])
def test_json_with_a_byte_order_mark_is_json(signal: str) -> None:
    if signal == "traces":
        rec = recorder("refund-agent", "9.9.9", seed=3)
        make_genai_trace(rec.provider, "Refund A7", [], "Nothing to do.", agent="refund-agent")
        document = json.dumps(proto_to_otlp_json(encode_request(rec.spans()))).encode()
    else:
        document = json.dumps(
            {"resourceLogs": [{"scopeLogs": [{"logRecords": [{"eventName": "x"}]}]}]}
        ).encode()
    plain = decode_signal(document)
    marked = decode_signal(b"\xef\xbb\xbf" + document)
    assert marked == plain
    assert marked.spans or marked.logs


# --- the assembler --------------------------------------------------------------------------


def _log(trace_id: str | None = TRACE_ID, span_id: str | None = None) -> LogRecord:
    return LogRecord(trace_id=trace_id, span_id=span_id, event_name="gen_ai.user.message")


def test_logs_join_their_trace_before_or_after_the_spans() -> None:
    assembler = Assembler(decision_wait=5.0)
    root = span("invoke_agent a", span_id=ROOT)
    assembler.add_logs([_log(span_id=ROOT)], 0.0, RecordRef(3, 10))
    assembler.add([root], 1.0, RecordRef(3, 40))
    assembler.add_logs([_log(span_id=ROOT), _log()], 2.0, RecordRef(3, 12))
    assert assembler.held_offsets() == {3: 40}
    assert assembler.held_log_offsets() == {3: 10}
    assert assembler.due(6.9) == []  # the last log counts as activity
    (trace,) = assembler.due(7.0)
    assert len(trace.logs) == 3
    assert trace.first_offsets == {3: 40}
    assert trace.first_log_offsets == {3: 10}
    assert assembler.held_log_offsets() == {}
    assert assembler.stats.logs == 3


def test_late_logs_and_logs_without_trace_are_counted_and_ignored() -> None:
    assembler = Assembler(decision_wait=0.0)
    assembler.add([span("invoke_agent a")], 0.0)
    assembler.add_logs([_log(trace_id=None)], 0.0, RecordRef(0, 1))
    assert assembler.held_log_offsets() == {}
    (trace,) = assembler.due(0.0)
    assert trace.logs == ()
    assembler.add_logs([_log()], 1.0, RecordRef(0, 2))
    assert assembler.open_traces == 0
    assert (assembler.stats.late_logs, assembler.stats.logs_without_trace) == (1, 1)


def test_a_trace_of_logs_only_has_no_root_and_waits_for_max_age() -> None:
    assembler = Assembler(decision_wait=1.0, max_trace_age=10.0)
    assembler.add_logs([_log()], 0.0, RecordRef(0, 5))
    assert assembler.due(5.0) == []
    (trace,) = assembler.due(10.0)
    assert (trace.reason, trace.has_root) == (DecideReason.MAX_AGE, False)


def test_logs_count_towards_the_record_bound_and_revoke_drops_by_either_topic() -> None:
    assembler = Assembler(max_spans_per_trace=3)
    assembler.add([span("invoke_agent a")], 0.0, RecordRef(0, 1))
    (trace,) = assembler.add_logs([_log(), _log()], 0.0, RecordRef(0, 2))
    assert (trace.reason, trace.truncated) == (DecideReason.SPAN_LIMIT, True)
    assembler.add_logs([_log(trace_id="ee" * 16)], 0.0, RecordRef(1, 9))
    assert assembler.drop_partitions({1}) == ["ee" * 16]


def _content_log(n: int) -> LogRecord:
    return LogRecord(
        trace_id=TRACE_ID,
        span_id=CHAT1,
        event_name="gen_ai.choice",
        time_unix_nano=n,
        attributes={"gen_ai.system": "openai", "n": n, "x": 1.5, "flag": True},
        body={"message": {"role": "assistant", "content": f"answer {n} " * 50}, "list": [1, None]},
        resource={"service.name": "refund-agent"},
        scope_name="scope",
        unreadable=n % 2,
    )


def test_logs_are_held_packed_and_come_back_equal_in_order() -> None:
    def held_by(assembler: Assembler, feed: Any) -> int:
        assembler.add([span("invoke_agent a", span_id=ROOT)], 0.0)
        tracemalloc.start()
        for start in range(0, 40, 8):
            feed([_content_log(n) for n in range(start, start + 8)], 1.0, RecordRef(0, start))
        held = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        return held

    packed = Assembler(decision_wait=5.0)
    decoded: list[LogRecord] = []
    assert held_by(packed, packed.add_logs) < 0.7 * held_by(
        Assembler(), lambda logs, *_: decoded.extend(logs)
    )
    (trace,) = packed.due(10.0)
    assert trace.logs == tuple(_content_log(n) for n in range(40))
    assert packed.stats.logs == 40


# --- the transcript -------------------------------------------------------------------------

USER = "Refund order A7, please."
ANSWER = "Refunded 12.5 USD to your card."


def _spans_without_content() -> list[Any]:
    root = span("invoke_agent refund", span_id=ROOT, start=0, end=100)
    return [
        root,
        span("chat gpt-4o", span_id=CHAT1, parent=root, kind=SpanKind.CLIENT, start=10, end=20,
             attrs={"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}),
        span("execute_tool issue_refund", span_id=TOOL, parent=root, start=30, end=40,
             attrs={"gen_ai.tool.name": "issue_refund", "gen_ai.tool.call.id": "call_1"}),
        span("chat gpt-4o", span_id=CHAT2, parent=root, kind=SpanKind.CLIENT, start=50, end=60,
             attrs={"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}),
    ]  # fmt: skip


CALL = {"id": "call_1", "type": "function",
        "function": {"name": "issue_refund", "arguments": '{"order_id": "A7", "amount": 12.5}'}}  # fmt: skip
RESULT = '{"status": "issued", "amount": 12.5}'

# opentelemetry-instrumentation-openai-v2, events mode: per-message events, content in the body.
OPENAI_EVENTS = [
    pb_record("gen_ai.system.message", body={"content": "You refund orders."}, span_id=CHAT1, time=11),
    pb_record("gen_ai.user.message", body={"content": USER}, span_id=CHAT1, time=12),
    pb_record("gen_ai.choice", span_id=CHAT1, time=19,
              body={"index": 0, "finish_reason": "tool_calls",
                    "message": {"role": "assistant", "tool_calls": [CALL]}}),
    pb_record("gen_ai.user.message", body={"content": USER}, span_id=CHAT2, time=51),
    pb_record("gen_ai.assistant.message", body={"tool_calls": [CALL]}, span_id=CHAT2, time=52),
    pb_record("gen_ai.tool.message", body={"content": RESULT, "id": "call_1"}, span_id=CHAT2, time=53),
    pb_record("gen_ai.choice", span_id=CHAT2, time=59,
              body={"index": 0, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": ANSWER}}),
]  # fmt: skip


def _msg(role: str, *parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": role, "parts": list(parts)}


TEXT_USER = _msg("user", {"type": "text", "content": USER})
TOOL_CALL = _msg("assistant", {"type": "tool_call", "id": "call_1", "name": "issue_refund",
                               "arguments": {"order_id": "A7", "amount": 12.5}})  # fmt: skip
TOOL_RESULT = _msg("tool", {"type": "tool_call_response", "id": "call_1", "response": RESULT})


def _details(where: str, span_id: str, time: int, inputs: list[Any], outputs: list[Any]) -> Any:
    content = {
        "gen_ai.input.messages": inputs,
        "gen_ai.output.messages": outputs,
        "gen_ai.system_instructions": [{"type": "text", "content": "You refund orders."}],
    }
    if where == "attributes":
        return pb_record("gen_ai.client.inference.operation.details", attrs=content,
                         span_id=span_id, time=time)  # fmt: skip
    return pb_record("gen_ai.client.inference.operation.details", body=content,
                     span_id=span_id, time=time)  # fmt: skip


def details_events(where: str) -> list[PbLogRecord]:
    return [
        _details(where, CHAT1, 20, [TEXT_USER], [TOOL_CALL]),
        _details(where, CHAT2, 60, [TEXT_USER, TOOL_CALL, TOOL_RESULT],
                 [_msg("assistant", {"type": "text", "content": ANSWER})]),
    ]  # fmt: skip


def _transcript(records: list[PbLogRecord], *, spans: list[Any] | None = None) -> Any:
    logs = decode_logs(request(*records).SerializeToString())
    spans = _spans_without_content() if spans is None else spans
    trace = Trace(TRACE_ID, tuple(spans), DecideReason.COMPLETE,
                  logs=tuple(logs))  # fmt: skip
    return build_transcript(trace)


@pytest.mark.parametrize(
    "records",
    [
        pytest.param(OPENAI_EVENTS, id="per-message-events"),
        pytest.param(details_events("attributes"), id="details-in-attributes"),
        pytest.param(details_events("body"), id="details-in-body"),
    ],
)
def test_event_content_fills_the_transcript(records: list[PbLogRecord]) -> None:
    transcript = _transcript(records)
    assert transcript.user_input == USER
    assert transcript.answer == ANSWER
    (call,) = transcript.tool_calls
    assert (call.name, call.call_id, call.span_id) == ("issue_refund", "call_1", TOOL)
    assert json.loads(call.arguments or "") == {"order_id": "A7", "amount": 12.5}
    assert json.loads(call.result or "") == json.loads(RESULT)
    assert transcript.flags == ()


def test_without_the_logs_the_same_spans_have_no_content() -> None:
    transcript = _transcript([pb_record("unrelated.event", body="x", span_id=CHAT1)])
    assert (transcript.user_input, transcript.answer) == (None, None)
    assert all(c.arguments is None and c.result is None for c in transcript.tool_calls)


def test_what_the_span_carries_wins_over_the_event() -> None:
    spans = _spans_without_content()
    spans[3] = span("chat gpt-4o", span_id=CHAT2, parent=spans[0], kind=SpanKind.CLIENT,
                    start=50, end=60, attrs={"gen_ai.operation.name": "chat",
                    "gen_ai.output.messages": json.dumps([_msg("assistant", {"type": "text", "content": "From the span."})])})  # fmt: skip
    transcript = _transcript(details_events("attributes"), spans=spans)
    assert transcript.answer == "From the span."


def test_records_whose_span_is_missing_are_read_as_an_llm_call_under_the_root() -> None:
    spans = _spans_without_content()[:1] + _spans_without_content()[2:3]  # no chat spans came
    joined = join_logs(
        spans, decode_logs(request(*details_events("attributes")).SerializeToString())
    )
    stand_ins = [s for s in joined if s.span_id in (CHAT1, CHAT2)]
    assert {s.parent_span_id for s in stand_ins} == {ROOT}
    transcript = _transcript(details_events("attributes"), spans=spans)
    assert (transcript.user_input, transcript.answer) == (USER, ANSWER)
    assert transcript.root_span_id == ROOT


def test_records_of_a_trace_without_spans_are_flagged_incomplete() -> None:
    transcript = _transcript(details_events("attributes"), spans=[])
    assert [f.value for f in transcript.flags] == ["incomplete"]
    assert transcript.answer is None
