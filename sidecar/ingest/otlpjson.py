"""Write OTLP/JSON (traces or logs): the protobuf JSON mapping with hex ids, as the Collector's file exporter does."""

from __future__ import annotations

import base64
import json
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

_ID_FIELDS = {"traceId", "spanId", "parentSpanId"}


def request_to_dict(request: Message) -> dict[str, Any]:
    document: dict[str, Any] = MessageToDict(request)
    _hex_ids(document)
    return document


def request_to_json_line(request: Message) -> str:
    return json.dumps(request_to_dict(request), separators=(",", ":"), ensure_ascii=False)


def _hex_ids(node: object) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_FIELDS and isinstance(value, str):
                node[key] = base64.b64decode(value).hex()
            else:
                _hex_ids(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item)
