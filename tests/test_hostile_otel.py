"""Verdict-span export honours the standard OTEL_* variables and shuts down in bounded time.

- ``OTEL_SDK_DISABLED=true`` and ``OTEL_TRACES_EXPORTER=none`` turn export off;
  ``otlp``/``otlp_proto_grpc``/``otlp_proto_http``/``console`` pick the exporter;
  the OTLP exporters read ``OTEL_EXPORTER_OTLP_*`` themselves; an unknown
  exporter is a configuration error naming the variable.
- An exporter that never returns (an unreachable collector) costs at most
  ``otel.shutdown_timeout_s`` at shutdown, in-process and for a real process
  exporting over gRPC to an endpoint that accepts connections and never answers.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator, Sequence

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SpanExporter, SpanExportResult

from sidecar.adapters.otel import VerdictSpans, exporter_from_env, tracer_provider, verdict_spans
from sidecar.errors import ConfigError
from sidecar.evaluate.verdict import Verdict
from sidecar.model import CaseOutcome
from tests.integration.harness import REPO, run_python


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        pytest.param({}, GrpcExporter, id="default-otlp-grpc"),
        pytest.param({"OTEL_TRACES_EXPORTER": "otlp"}, GrpcExporter, id="otlp"),
        pytest.param(
            {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, HttpExporter, id="otlp-protocol-http"
        ),
        pytest.param(
            {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"},
            HttpExporter,
            id="otlp-traces-protocol-http",
        ),
        pytest.param(
            {"OTEL_TRACES_EXPORTER": "otlp_proto_http"}, HttpExporter, id="otlp-proto-http"
        ),
        pytest.param(
            {"OTEL_TRACES_EXPORTER": "otlp_proto_grpc"}, GrpcExporter, id="otlp-proto-grpc"
        ),
        pytest.param({"OTEL_TRACES_EXPORTER": "console"}, ConsoleSpanExporter, id="console"),
        pytest.param({"OTEL_TRACES_EXPORTER": "none"}, None, id="none"),
        pytest.param({"OTEL_TRACES_EXPORTER": " None "}, None, id="none-any-case"),
        pytest.param({"OTEL_TRACES_EXPORTER": "otlp,none"}, None, id="none-in-a-list"),
        pytest.param({"OTEL_SDK_DISABLED": "true"}, None, id="sdk-disabled"),
        pytest.param({"OTEL_SDK_DISABLED": "TRUE"}, None, id="sdk-disabled-any-case"),
        pytest.param({"OTEL_SDK_DISABLED": "false"}, GrpcExporter, id="sdk-not-disabled"),
    ],
)
def test_the_exporter_is_chosen_by_the_standard_variables(
    environ: dict[str, str], expected: type[SpanExporter] | None
) -> None:
    exporter = exporter_from_env(environ)
    try:
        assert (exporter is None) if expected is None else isinstance(exporter, expected)
    finally:
        if exporter is not None:
            exporter.shutdown()


def test_an_unknown_exporter_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError, match="OTEL_TRACES_EXPORTER: zipkin"):
        exporter_from_env({"OTEL_TRACES_EXPORTER": "zipkin"})


def test_disabled_export_emits_nowhere_and_shuts_down_at_once() -> None:
    spans = verdict_spans(
        enabled=True,
        service_name="sidecar",
        timeout_s=5.0,
        environ={"OTEL_TRACES_EXPORTER": "none"},
    )
    assert not spans.emit(verdict())  # no exporter: no span is built at all
    assert spans.shutdown()


class StuckExporter(SpanExporter):
    """Never returns from export, like an exporter retrying an unreachable collector."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.exporting = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.exporting.set()
        self.release.wait()
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self.release.wait()


@pytest.fixture
def stuck() -> Iterator[StuckExporter]:
    exporter = StuckExporter()
    yield exporter
    exporter.release.set()


def verdict() -> Verdict:
    return Verdict(
        id="x",
        trace_id="5b8efff798038103d269b633813fc60c",
        root_span_id="eee19b7ec3c1b174",
        rubric_id="shop",
        rubric_version="1",
        judge_model="m",
        agent=None,
        agent_version=None,
        outcome=CaseOutcome.ACCEPTABLE,
        judged=False,
        sample_reason="ratio",
        injection_suspected=False,
        review=False,
        checks=(),
        criteria=(),
    )


def test_flush_and_shutdown_together_wait_at_most_one_bound(stuck: StuckExporter) -> None:
    spans = VerdictSpans(tracer_provider(stuck), timeout_s=0.5)
    spans.emit(verdict())
    started = time.monotonic()
    assert spans.flush() is False
    assert stuck.exporting.is_set()
    assert spans.shutdown() is False
    assert time.monotonic() - started < 2.0


@pytest.fixture
def silent_collector() -> Iterator[int]:
    """A TCP endpoint that accepts connections and never says a word."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


EXPORT_ONE = """
import sys, time
from sidecar.adapters.otel import verdict_spans
from tests.test_hostile_otel import verdict
spans = verdict_spans(enabled=True, service_name="sidecar", timeout_s=float(sys.argv[1]))
spans.emit(verdict())
started = time.monotonic()
flushed = spans.flush()
stopped = spans.shutdown()
print(flushed, stopped, round(time.monotonic() - started, 1))
"""


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_real_process_exporting_to_a_silent_collector_exits_in_bounded_time(
    silent_collector: int, protocol: str
) -> None:
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{silent_collector}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_EXPORTER_OTLP_TIMEOUT": "30",
        "PYTHONPATH": str(REPO),
    }
    started = time.monotonic()
    done = run_python("-c", EXPORT_ONE, "1.0", env=env, timeout=60, check=True)
    elapsed = time.monotonic() - started
    flushed, stopped, waited = done.stdout.split()
    assert (flushed, stopped) == ("False", "False")
    assert float(waited) <= 1.5
    # Interpreter start-up and exit included: far below the exporter's own 30 s timeout.
    assert elapsed < 15, done.stderr
