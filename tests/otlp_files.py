"""What the file-input tests share: OTLP/JSON lines and binary requests, and ``sidecar replay``.

Conversions are test side, independent of sidecar's code: the protobuf JSON
mapping with ids turned between hex (OTLP/JSON) and base64 (protobuf JSON),
parsed and printed by protobuf itself.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from sidecar.cli import main
from sidecar.commands.demo import demo_data

DEMO_RUBRICS = demo_data()[1]
_ID_KEYS = {"traceId", "spanId", "parentSpanId"}


def _map_ids(node: object, convert: Callable[[str], str]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_KEYS and isinstance(value, str) and value:
                node[key] = convert(value)
            else:
                _map_ids(value, convert)
    elif isinstance(node, list):
        for item in node:
            _map_ids(item, convert)


def _to_proto(line: str, message: Message) -> bytes:
    document = json.loads(line)
    _map_ids(document, lambda v: base64.b64encode(bytes.fromhex(v)).decode("ascii"))
    return bytes(ParseDict(document, message).SerializeToString())


def proto_to_otlp_json(payload: bytes) -> dict[str, Any]:
    """OTLP/JSON of a binary traces request: the protobuf JSON mapping, but ids in hex."""
    document = MessageToDict(ExportTraceServiceRequest.FromString(payload))
    _map_ids(document, lambda v: base64.b64decode(v).hex())
    return document


def traces_proto(line: str) -> bytes:
    """A binary ExportTraceServiceRequest of an OTLP/JSON line."""
    return _to_proto(line, ExportTraceServiceRequest())


def logs_proto(line: str) -> bytes:
    """A binary ExportLogsServiceRequest of an OTLP/JSON line."""
    return _to_proto(line, ExportLogsServiceRequest())


def length_prefixed(messages: Sequence[bytes]) -> bytes:
    """The Collector file exporter's proto format: each message after its 4-byte length."""
    return b"".join(struct.pack(">I", len(m)) + m for m in messages)


def line_trace_id(line: str) -> str:
    """The trace id of the first span of an OTLP/JSON traces line."""
    for resource_spans in json.loads(line)["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                return str(span["traceId"]).lower()
    raise AssertionError("line without spans")


def replay(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, list[str], str]:
    """Run ``sidecar replay``; (exit code, stdout lines, stderr)."""
    try:
        code = main(["replay", *map(str, argv)])
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def records(lines: Sequence[str]) -> list[dict[str, Any]]:
    return sorted(
        (json.loads(line) for line in lines), key=lambda r: (r["trace_id"], r["rubric_id"])
    )
