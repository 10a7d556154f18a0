"""OTLP requests from finished SDK spans, encoded by the OTel SDK's own encoder.

Imports only the OTel SDK and protobuf, so both environments can use it: the
project's, and the ADK one ``adk_agent`` runs in (which cannot import sidecar).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan

_ID_FIELDS = frozenset({"traceId", "spanId", "parentSpanId"})


def encode_request(spans: Sequence[ReadableSpan]) -> bytes:
    """One binary ExportTraceServiceRequest, encoded by the OTel SDK's own OTLP encoder."""
    return bytes(encode_spans(spans).SerializeToString())


def split_requests(spans: Sequence[ReadableSpan], n: int) -> list[bytes]:
    """Spread one trace's spans over ``n`` requests in finish order, as a batching exporter would."""
    if n < 1:
        raise ValueError("n must be at least 1")
    n = min(n, len(spans))
    size, extra = divmod(len(spans), n)
    chunks, start = [], 0
    for index in range(n):
        end = start + size + (1 if index < extra else 0)
        chunks.append(encode_request(spans[start:end]))
        start = end
    return chunks


def json_line(spans: Sequence[ReadableSpan]) -> str:
    """One request as a line of OTLP/JSON, as the Collector's file exporter writes it.

    The protobuf JSON mapping (camelCase) with trace and span ids in hex, on one
    line; the same bytes sidecar.otlpjson writes for the demo data.
    """
    document = MessageToDict(encode_spans(spans))
    _hex_ids(document)
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


def _hex_ids(node: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_FIELDS and isinstance(value, str):
                node[key] = base64.b64decode(value).hex()
            else:
                _hex_ids(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item)
