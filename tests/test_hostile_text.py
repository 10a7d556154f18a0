"""Text that cannot be encoded is repaired where it enters (lone surrogates, bytes not UTF-8).

A lone surrogate is a legal JSON escape and bytes that are not UTF-8 reach
protobuf strings through the Collector. Either becomes U+FFFD once, in the
decoder (or the JSON-in-attribute reader), the trace is flagged
``repaired_text``, the verdict is the one the text gets without it, and every
record, cache key and log line written afterwards encodes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from sidecar.cli import main
from sidecar.errors import DecodeError
from sidecar.evaluate.conventions.attributes import parse_json
from sidecar.evaluate.transcript import build_transcript
from sidecar.ingest.decode import decode
from sidecar.ingest.decode_logs import decode_logs
from sidecar.ingest.lenient import _twin
from sidecar.judge.parse import load_answer
from sidecar.model import Flag, Span
from sidecar.text import REPLACEMENT, loads, repair, valid
from sidecar.wire._base import record_json
from tests.builders import genai_trace, trace
from tests.otlp_records import record

LONE = ["\ud800", "\udfff", "\udc80", "\ud83d"]

RUBRIC = """\
id: shop
version: '1'
applies_to: {service.name: refund-agent}
checks:
  - {name: no_secrets, type: answer_regex, must_not_match: 'password', gate: true}
"""


def _encodes(value: object) -> bool:
    try:
        json.dumps(value, ensure_ascii=False, default=str).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _strings(value: object) -> list[str]:
    found: list[str] = []
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            found.append(node)
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)
    return found


def _span_strings(span: Span) -> list[str]:
    events = [(e.name, e.attributes) for e in span.events]
    return _strings([span.name, span.attributes, span.resource, span.scope_name, events])


def _replay(tmp_path: Path, payload: bytes, capsys: pytest.CaptureFixture[str]) -> list[Any]:
    rubrics = tmp_path / "rubrics"
    rubrics.mkdir(exist_ok=True)
    (rubrics / "shop.yaml").write_text(RUBRIC)
    path = tmp_path / "spans.jsonl"
    path.write_bytes(payload + b"\n")
    code = main(["replay", str(path), "--rubrics", str(rubrics), "--exit-zero"])
    out, _ = capsys.readouterr()
    assert code == 0
    out.encode("utf-8")  # what a real stdout would have to write
    return [json.loads(line) for line in out.splitlines()]


# --- the one helper -------------------------------------------------------------------


@pytest.mark.parametrize("lone", LONE)
def test_valid_replaces_each_lone_surrogate(lone: str) -> None:
    assert valid(f"a{lone}b") == f"a{REPLACEMENT}b"
    assert valid("a😀b") == "a😀b"  # a pair written as two escapes is one character
    assert loads('"\\ud83d\\ude00"') == "😀"


def test_repair_walks_any_depth_without_recursion() -> None:
    value: Any = "\ud800"
    for _ in range(5000):
        value = [{"k\udfff": value}]
    fixed, changed = repair(value)
    assert changed == 5000 + 1  # every key and the leaf
    assert all(text.encode("utf-8") for text in _strings(fixed))


# --- at the boundary: OTLP/JSON, protobuf, JSON text inside attributes ---------------


def _flagged(spans: list[Span]) -> tuple[Flag, ...]:
    return build_transcript(trace(*spans)).flags


@pytest.mark.parametrize("lone", LONE)
def test_otlp_json_strings_are_repaired_and_flagged(lone: str) -> None:
    [span] = decode(
        json.dumps(
            {
                "resourceSpans": [
                    {
                        "resource": {
                            "attributes": [{"key": f"r{lone}", "value": {"stringValue": lone}}]
                        },
                        "scopeSpans": [
                            {
                                "scope": {"name": f"s{lone}"},
                                "spans": [
                                    {
                                        "traceId": "5b8efff798038103d269b633813fc60c",
                                        "spanId": "eee19b7ec3c1b174",
                                        "name": f"n{lone}",
                                        "status": {"message": lone},
                                        "attributes": [
                                            {"key": "k", "value": {"stringValue": f"v{lone}"}}
                                        ],
                                        "events": [{"name": lone}],
                                    }
                                ],
                            }
                        ],
                    }
                ]
            }
        ).encode()
    )
    assert _encodes([*_span_strings(span), span.status_message])
    assert span.name == f"n{REPLACEMENT}"
    assert span.repaired > 0
    assert Flag.REPAIRED_TEXT in _flagged([span])


def _proto_request(names: list[bytes]) -> bytes:
    # The OTLP schema with string fields as bytes (the same wire format) writes any bytes.
    request = _twin(ExportTraceServiceRequest.DESCRIPTOR)()
    scope = request.resource_spans.add().scope_spans.add()
    for number, name in enumerate(names, start=1):
        span = scope.spans.add()
        span.trace_id = bytes([number]) * 16
        span.span_id = bytes([number]) * 8
        span.name = b"span"
        attribute = span.attributes.add()
        attribute.key = b"gen_ai.agent.name"
        attribute.value.string_value = name
    return bytes(request.SerializeToString())


@pytest.mark.parametrize("bad", [b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b"ok\x80ok"])
def test_one_bad_protobuf_string_repairs_that_span_and_keeps_the_others(bad: bytes) -> None:
    payload = _proto_request([b"good", bad, b"fine"])
    spans = decode(payload)
    assert [s.attributes["gen_ai.agent.name"] for s in spans][0::2] == ["good", "fine"]
    assert REPLACEMENT in str(spans[1].attributes["gen_ai.agent.name"])
    assert [s.repaired for s in spans] == [0, 1, 0]
    assert Flag.REPAIRED_TEXT not in _flagged([spans[0]])


def test_a_record_that_is_not_protobuf_still_fails() -> None:
    with pytest.raises(DecodeError) as caught:
        decode(b"\x0a\xff\xff\xff\xff\x0f")
    assert caught.value.reason == "bad_protobuf"


def test_otlp_json_bytes_that_are_not_utf8_are_repaired() -> None:
    payload = record(genai_trace("hi", answer="MARK").spans).replace(b"MARK", b"ok\xff")
    spans = decode(payload)
    assert any(s.repaired for s in spans)
    assert all(_encodes(_span_strings(s)) for s in spans)


def test_log_records_are_repaired_too() -> None:
    document = {
        "resourceLogs": [
            {
                "scopeLogs": [
                    {"logRecords": [{"body": {"stringValue": "\ud800"}, "eventName": "e\udfff"}]}
                ]
            }
        ]
    }
    [log] = decode_logs(json.dumps(document).encode())
    assert _encodes([log.body, log.event_name])


@pytest.mark.parametrize("lone", LONE)
def test_json_text_inside_an_attribute_is_repaired(lone: str) -> None:
    escaped = json.dumps({"text": f"a{lone}"})  # ASCII: the surrogate as an escape
    assert _encodes(parse_json(escaped))


def test_a_judge_answer_with_a_lone_surrogate_encodes() -> None:
    value, failure = load_answer('{"a": "\\ud800", "b": ["x\\udfff"]}')
    assert failure is None
    assert _encodes(value)


def test_a_record_written_anyway_encodes() -> None:
    assert record_json({"a": "\ud800"}).encode("utf-8")


# --- end to end: the verdict is what it would be without the character --------------


def _surrogate_trace(answer: str, where: str) -> bytes:
    trace = genai_trace("refund please", answer=answer)
    payload = record(trace.spans)
    if where == "escape":  # a JSON escape in the OTLP/JSON string
        return payload.replace(b"MARK", b"\\ud800")
    # an escape inside the JSON text of a content attribute (protobuf carries that too)
    return payload.replace(b"MARK", b"\\\\ud800")


@pytest.mark.parametrize("where", ["escape", "inner"])
def test_a_gating_regex_still_fails_with_a_surrogate_in_the_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    [verdict] = _replay(tmp_path, _surrogate_trace("your password is hunter2 MARK", where), capsys)
    [check] = [c for c in verdict["checks"] if c["name"] == "no_secrets"]
    assert check["outcome"] == "FAIL"
    if where == "escape":
        assert "repaired_text" in verdict["flags"]


@pytest.mark.parametrize("where", ["escape", "inner"])
def test_a_clean_answer_with_a_surrogate_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    [verdict] = _replay(tmp_path, _surrogate_trace("refunded MARK", where), capsys)
    [check] = [c for c in verdict["checks"] if c["name"] == "no_secrets"]
    assert check["outcome"] == "PASS"


def test_replay_writes_its_records_to_a_real_pipe(tmp_path: Path) -> None:
    rubrics = tmp_path / "rubrics"
    rubrics.mkdir()
    (rubrics / "shop.yaml").write_text(RUBRIC)
    path = tmp_path / "spans.jsonl"
    path.write_bytes(_surrogate_trace("refunded MARK", "escape") + b"\n")
    done = subprocess.run(
        [sys.executable, "-m", "sidecar", "replay", str(path), "--rubrics", str(rubrics)],
        capture_output=True,
        timeout=120,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )
    assert b"Traceback" not in done.stderr, done.stderr.decode("utf-8", "replace")
    assert done.returncode == 0
    [verdict] = [json.loads(line) for line in done.stdout.decode("utf-8").splitlines()]
    assert "repaired_text" in verdict["flags"]


# --- fuzz: surrogates and bad bytes in every string field ---------------------------

_TEXT = st.text(
    alphabet=st.one_of(st.characters(codec="utf-8"), st.sampled_from(LONE)), max_size=12
)


@settings(max_examples=80, deadline=None)
@given(
    name=_TEXT,
    key=_TEXT,
    value=_TEXT,
    scope=_TEXT,
    service=_TEXT,
    status=_TEXT,
    event=_TEXT,
)
def test_fuzz_surrogates_in_every_json_string_field(
    name: str, key: str, value: str, scope: str, service: str, status: str, event: str
) -> None:
    span = {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": "eee19b7ec3c1b174",
        "name": name,
        "status": {"message": status},
        "attributes": [
            {"key": key, "value": {"stringValue": value}},
            {
                "key": "nested",
                "value": {
                    "kvlistValue": {
                        "values": [
                            {
                                "key": key,
                                "value": {"arrayValue": {"values": [{"stringValue": value}]}},
                            }
                        ]
                    }
                },
            },
        ],
        "events": [{"name": event, "attributes": [{"key": key, "value": {"stringValue": value}}]}],
    }
    document = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": service}}]
                },
                "scopeSpans": [{"scope": {"name": scope}, "spans": [span]}],
            }
        ]
    }
    [decoded] = decode(json.dumps(document).encode())
    assert _encodes([*_span_strings(decoded), decoded.status_message])
    lone = any(
        c in text for text in (name, key, value, scope, service, status, event) for c in LONE
    )
    assert (decoded.repaired > 0) == lone
    transcript = build_transcript(trace(decoded))
    assert (Flag.REPAIRED_TEXT in transcript.flags) == lone


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=8), min_size=1, max_size=4))
def test_fuzz_any_bytes_in_protobuf_strings(names: list[bytes]) -> None:
    spans = decode(_proto_request(names))
    assert all(_encodes(_span_strings(s)) for s in spans)
    assert len(spans) == len(names)
