"""Prometheus 3 and Jaeger v2, built from Go modules, run on loopback for integration tests.

scripts/build-prometheus and scripts/build-jaeger build the binaries into the
cache; scripts/test says where they are (``SIDECAR_PROMETHEUS3``,
``SIDECAR_JAEGER``). As with the other real parts (``tests.realparts``), a
missing binary fails the test that needs it with the reason: no skip.

``start_prometheus`` runs Prometheus with exemplar storage, scraping the given
targets (OpenMetrics first, so exemplars are kept); ``query`` and
``query_exemplars`` read its HTTP API. ``start_jaeger`` runs Jaeger's
all-in-one with in-memory storage (tests/integration/jaeger-config.yaml);
``find_traces`` and ``get_trace`` read its HTTP query API (the one the Jaeger
UI uses: Jaeger's JSON model, tags as a ``key``/``type``/``value`` list, parents
as ``references``). Every handle has ``stop()`` and is a context manager; each
process logs to a file in its work directory, whose end goes into every error.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.harness import free_port
from tests.realparts import CACHE

JAEGER_CONFIG = Path(__file__).with_name("jaeger-config.yaml")


def prometheus3() -> Path:
    """The Prometheus 3 binary that scripts/test built (``SIDECAR_PROMETHEUS3``)."""
    return _binary("SIDECAR_PROMETHEUS3", CACHE / "prometheus3" / "prometheus", "build-prometheus")


def jaeger() -> Path:
    """The Jaeger v2 binary that scripts/test built (``SIDECAR_JAEGER``)."""
    return _binary("SIDECAR_JAEGER", CACHE / "jaeger" / "jaeger", "build-jaeger")


def _binary(variable: str, default: Path, script: str) -> Path:
    binary = Path(os.environ.get(variable, default))
    if not binary.is_file():
        pytest.fail(
            f"no binary at {binary} ({variable}): scripts/{script} builds it (scripts/test does)",
            pytrace=False,
        )
    return binary


class Process:
    """A server process whose output goes to ``log_path``; ``stop`` is safe to call twice."""

    def __init__(
        self, name: str, argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None
    ) -> None:
        self.name = name
        self.log_path = log_path
        with log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                list(argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
            )

    def wait_ready(self, ready: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited {self.proc.returncode}:\n{self.log()}")
            if ready():
                return
            time.sleep(0.2)  # polling a starting server
        self.stop()
        raise RuntimeError(f"{self.name} not ready in {timeout}s:\n{self.log()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def log(self, tail: int = 6000) -> str:
        return self.log_path.read_text(errors="replace")[-tail:]


class _Handle:
    process: Process

    def stop(self) -> None:
        self.process.stop()

    def log(self) -> str:
        return self.process.log()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- HTTP ------------------------------------------------------------------------------------


def _get_json(url: str, params: Mapping[str, str] | None = None, timeout: float = 10) -> Any:
    """GET ``url`` with query ``params``; the decoded JSON body, also on HTTP 4xx/5xx."""
    if params:
        url = f"{url}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as exc:
        body = exc.read().decode(errors="replace")
        try:
            return json.loads(body)
        except ValueError:
            raise AssertionError(f"GET {url}: HTTP {exc.code}: {body[:500]}") from None


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


# -- Prometheus 3 ----------------------------------------------------------------------------


class PrometheusHandle(_Handle):
    def __init__(self, url: str, process: Process, config_path: Path) -> None:
        self.url = url
        self.process = process
        self.config_path = config_path

    def __enter__(self) -> PrometheusHandle:
        return self


def start_prometheus(
    binary: Path,
    tmpdir: Path,
    scrape_targets: list[str],
    scrape_interval: str = "1s",
    *,
    job: str = "targets",
    timeout: float = 60.0,
) -> PrometheusHandle:
    """Prometheus with exemplar storage on a free loopback port, scraping ``scrape_targets``.

    ``scrape_targets`` are ``host:port`` scraped at ``/metrics`` as job ``job``.
    Configuration, TSDB and log go in ``tmpdir``. Returns once ``/-/ready`` answers.
    """
    port = free_port()
    config = {
        "global": {
            "scrape_interval": scrape_interval,
            "scrape_timeout": scrape_interval,
            "evaluation_interval": scrape_interval,
        },
        "scrape_configs": [
            {
                "job_name": job,
                # OpenMetrics first (Prometheus 3's default order too): exemplars
                # are only exposed, and only ingested, in OpenMetrics.
                "scrape_protocols": ["OpenMetricsText1.0.0", "PrometheusText0.0.4"],
                "static_configs": [{"targets": list(scrape_targets)}],
            }
        ],
    }
    config_path = tmpdir / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    url = f"http://127.0.0.1:{port}"
    process = Process(
        "prometheus",
        [
            str(binary),
            f"--config.file={config_path}",
            f"--storage.tsdb.path={tmpdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--enable-feature=exemplar-storage",
        ],
        tmpdir / "prometheus.log",
    )
    process.wait_ready(lambda: _status(f"{url}/-/ready") == 200, timeout)
    return PrometheusHandle(url, process, config_path)


def _prometheus_data(url: str, path: str, params: Mapping[str, str]) -> Any:
    body = _get_json(f"{url}{path}", params)
    if body.get("status") != "success":
        raise AssertionError(f"{path} {dict(params)}: {body.get('errorType')}: {body.get('error')}")
    return body["data"]


def query(url: str, promql: str) -> list[dict[str, Any]]:
    """``/api/v1/query`` at now: the result list (``[{"metric": {...}, "value": [t, "v"]}]``)."""
    data = _prometheus_data(url, "/api/v1/query", {"query": promql})
    result: list[dict[str, Any]] = data["result"]
    return result


def query_exemplars(url: str, promql: str, start: float, end: float) -> list[dict[str, Any]]:
    """``/api/v1/query_exemplars`` between Unix times ``start`` and ``end``.

    One entry per series: ``{"seriesLabels": {...}, "exemplars": [{"labels":
    {"trace_id": ...}, "value": "1", "timestamp": 1764657600.123}]}``.
    """
    params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}"}
    data: list[dict[str, Any]] = _prometheus_data(url, "/api/v1/query_exemplars", params)
    return data


# -- Jaeger v2 -------------------------------------------------------------------------------


class JaegerHandle(_Handle):
    def __init__(self, process: Process, ports: Mapping[str, int]) -> None:
        self.process = process
        self.query_url = f"http://127.0.0.1:{ports['query_http']}"
        self.query_grpc = f"127.0.0.1:{ports['query_grpc']}"
        self.otlp_grpc = f"127.0.0.1:{ports['otlp_grpc']}"
        self.otlp_http = f"http://127.0.0.1:{ports['otlp_http']}"
        # Where an OTLP/HTTP span exporter posts (the SDK takes the full URL).
        self.otlp_http_traces = f"{self.otlp_http}/v1/traces"

    def __enter__(self) -> JaegerHandle:
        return self


def start_jaeger(binary: Path, tmpdir: Path, *, timeout: float = 60.0) -> JaegerHandle:
    """Jaeger's all-in-one (in-memory storage) with OTLP and its query API on free ports.

    The log goes in ``tmpdir``. Returns once the query API answers and both OTLP
    ports accept connections.
    """
    ports = {name: free_port() for name in ("otlp_grpc", "otlp_http", "query_http", "query_grpc")}
    env = {f"SIDECAR_JAEGER_{name.upper()}": f"127.0.0.1:{port}" for name, port in ports.items()}
    process = Process(
        "jaeger", [str(binary), "--config", str(JAEGER_CONFIG)], tmpdir / "jaeger.log", env
    )
    handle = JaegerHandle(process, ports)
    process.wait_ready(
        lambda: (
            _status(f"{handle.query_url}/api/services") == 200
            and _port_open(ports["otlp_http"])
            and _port_open(ports["otlp_grpc"])
        ),
        timeout,
    )
    return handle


def find_traces(
    url: str, service: str, tags: Mapping[str, str] | None = None, *, limit: int = 20
) -> list[dict[str, Any]]:
    """Traces of ``service`` with a span carrying every tag in ``tags`` (``/api/traces``).

    Each trace is Jaeger's JSON model: ``{"traceID", "spans": [{"traceID",
    "spanID", "operationName", "references": [{"refType": "CHILD_OF", "traceID",
    "spanID"}], "tags": [{"key", "type", "value"}], "processID", ...}],
    "processes": {"p1": {"serviceName", "tags"}}}``. Searches the last two days
    (Jaeger's default look-back).
    """
    params = {"service": service, "limit": str(limit)}
    if tags:
        params["tags"] = json.dumps(dict(tags))
    body = _get_json(f"{url}/api/traces", params)
    if body.get("errors"):
        raise AssertionError(f"/api/traces {params}: {body['errors']}")
    traces: list[dict[str, Any]] = body.get("data") or []
    return traces


def get_trace(url: str, trace_id: str) -> dict[str, Any] | None:
    """The trace ``trace_id`` (32 hex digits) in Jaeger's JSON model; None when not stored."""
    body = _get_json(f"{url}/api/traces/{trace_id}")
    data = body.get("data") or []
    if not data:
        if body.get("errors") and all(e.get("code") != 404 for e in body["errors"]):
            raise AssertionError(f"/api/traces/{trace_id}: {body['errors']}")
        return None
    trace: dict[str, Any] = data[0]
    return trace


def span_tags(span: Mapping[str, Any]) -> dict[str, Any]:
    """A Jaeger JSON span's tags as a plain dict."""
    return {t["key"]: t["value"] for t in span.get("tags", [])}


def parent_span_id(span: Mapping[str, Any]) -> str | None:
    """The span ID of a Jaeger JSON span's parent (its ``CHILD_OF`` reference), if any."""
    for ref in span.get("references", []):
        if ref.get("refType") == "CHILD_OF":
            return str(ref["spanID"])
    return None


def wait_until(predicate: Callable[[], Any], within: float, what: str) -> Any:
    """Poll ``predicate`` (blocking) until it returns something truthy; that value."""
    deadline = time.monotonic() + within
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        time.sleep(0.5)  # polling a real server
