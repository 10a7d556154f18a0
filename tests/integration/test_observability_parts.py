"""The observability parts built from Go modules work as the tests will use them.

Prometheus 3 scrapes an OpenMetrics endpoint and keeps a counter's exemplar,
found again through ``/api/v1/query_exemplars``; Jaeger v2 takes a parent and
child span over OTLP/HTTP from the OpenTelemetry SDK and finds them by tag.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from prometheus_client import CollectorRegistry, Counter
from prometheus_client import exposition as text_exposition
from prometheus_client.openmetrics import exposition as openmetrics_exposition

from tests.integration import realparts_obs as obs


class MetricsServer:
    """``registry`` over HTTP at ``/metrics``: OpenMetrics when the scraper asks for it.

    Records each request's ``Accept`` header, to show which format was scraped.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.accepts: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                accept = self.headers.get("Accept", "")
                server.accepts.append(accept)
                if "application/openmetrics-text" in accept:
                    body = openmetrics_exposition.generate_latest(registry)
                    kind = openmetrics_exposition.CONTENT_TYPE_LATEST
                else:
                    body = text_exposition.generate_latest(registry)
                    kind = text_exposition.CONTENT_TYPE_LATEST
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # quiet: Prometheus scrapes every second

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.target = f"127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> MetricsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)


@pytest.fixture
def metrics_server() -> Iterator[tuple[MetricsServer, Counter]]:
    registry = CollectorRegistry()
    counter = Counter(
        "sidecar_parts_verdicts", "Verdicts (observability parts test).", registry=registry
    )
    with MetricsServer(registry) as server:
        yield server, counter


def test_prometheus3_keeps_the_exemplar_of_an_openmetrics_counter(
    tmp_path: Path, metrics_server: tuple[MetricsServer, Counter]
) -> None:
    binary = obs.prometheus3()
    server, counter = metrics_server
    trace_id = uuid.uuid4().hex
    started = time.time()
    counter.inc(exemplar={"trace_id": trace_id})

    with obs.start_prometheus(binary, tmp_path, [server.target]) as prom:
        series = obs.wait_until(
            lambda: obs.query(prom.url, "sidecar_parts_verdicts_total"), 30, "the first scrape"
        )
        assert series[0]["metric"]["job"] == "targets"
        assert float(series[0]["value"][1]) == 1.0

        found = obs.wait_until(
            lambda: obs.query_exemplars(
                prom.url, "sidecar_parts_verdicts_total", started - 60, time.time() + 60
            ),
            30,
            "the exemplar",
        )

    assert any("application/openmetrics-text" in a for a in server.accepts), server.accepts
    assert len(found) == 1
    assert found[0]["seriesLabels"]["__name__"] == "sidecar_parts_verdicts_total"
    exemplars = found[0]["exemplars"]
    assert [e["labels"] for e in exemplars] == [{"trace_id": trace_id}]
    assert float(exemplars[0]["value"]) == 1.0
    assert started - 5 <= float(exemplars[0]["timestamp"]) <= time.time() + 5


def test_jaeger_stores_an_otlp_parent_and_child_found_by_tag(tmp_path: Path) -> None:
    binary = obs.jaeger()
    service = f"parts-{uuid.uuid4().hex[:8]}"
    case = uuid.uuid4().hex

    with obs.start_jaeger(binary, tmp_path) as jaeger:
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        provider.add_span_processor(
            SimpleSpanProcessor(OTLPSpanExporter(endpoint=jaeger.otlp_http_traces, timeout=10))
        )
        tracer = provider.get_tracer("sidecar.tests")
        with (
            tracer.start_as_current_span("invoke_agent") as parent,
            tracer.start_as_current_span("sidecar.verdict") as child,  # parent's child
        ):
            child.set_attribute("sidecar.test_case", case)
            child.set_attribute("sidecar.verdict.outcome", "pass")
        provider.shutdown()
        trace_id = format(parent.get_span_context().trace_id, "032x")
        parent_id = format(parent.get_span_context().span_id, "016x")
        child_id = format(child.get_span_context().span_id, "016x")

        traces = obs.wait_until(
            lambda: obs.find_traces(jaeger.query_url, service, {"sidecar.test_case": case}),
            30,
            "the trace in Jaeger",
        )
        assert [t["traceID"] for t in traces] == [trace_id]
        assert obs.find_traces(jaeger.query_url, service, {"sidecar.test_case": "other"}) == []
        stored = obs.get_trace(jaeger.query_url, trace_id)
        assert obs.get_trace(jaeger.query_url, "0" * 31 + "1") is None

    assert stored is not None
    spans = {s["spanID"]: s for s in stored["spans"]}
    assert set(spans) == {parent_id, child_id}
    assert obs.parent_span_id(spans[parent_id]) is None
    assert obs.parent_span_id(spans[child_id]) == parent_id
    assert spans[child_id]["operationName"] == "sidecar.verdict"
    assert obs.span_tags(spans[child_id])["sidecar.verdict.outcome"] == "pass"
    process = stored["processes"][spans[child_id]["processID"]]
    assert process["serviceName"] == service
