"""OTLP requests from finished SDK spans, encoded by the OTel SDK's own encoder.

Imports only the OTel SDK, protobuf and ``sidecar.ingest.otlpjson`` (which needs only
protobuf), so both environments can use it: the project's, and the ADK one
``adk_agent`` runs in, where the rest of sidecar cannot be imported.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan

from sidecar.ingest.otlpjson import request_to_json_line


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
    line: sidecar's own writer (it needs only protobuf, so the ADK environment
    can import it too).
    """
    return request_to_json_line(encode_spans(spans))
