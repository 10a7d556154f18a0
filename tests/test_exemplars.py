from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from sidecar.adapters.exemplars import (
    ExemplarMemory,
    MergedExemplars,
    bucket_bound,
    verdict_exemplar,
)
from sidecar.adapters.exposition import exposition, wants_openmetrics
from sidecar.adapters.http import MetricsServer
from sidecar.adapters.prometheus import VERDICT_LATENCY_BUCKETS, Metrics, record_verdict
from sidecar.evaluate.verdict import Verdict
from tests.builders import TRACE_ID
from tests.builders import metric_verdict as verdict

SPAN_ID = "00f067aa0ba902b7"


def decided(trace_id: str = TRACE_ID, seconds: float = 3.0) -> Verdict:
    v = verdict(trace_id=trace_id)
    return dataclasses.replace(
        v,
        trace_end=1_700_000_000_000_000_000,
        decided_at=1_700_000_000_000_000_000 + int(seconds * 1e9),
    )


def exemplars_of(body: bytes) -> dict[str, list[dict[str, str]]]:
    """Every exemplar in an OpenMetrics body, by sample name."""
    found: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.exemplar is not None:
                found.setdefault(sample.name, []).append(dict(sample.exemplar.labels))
    return found


EXEMPLIFIED = (
    "sidecar_cases_total",
    "sidecar_check_results_total",
    "sidecar_criterion_verdicts_total",
    "sidecar_verdict_latency_seconds_bucket",
)


def test_each_verdict_family_carries_the_trace_and_span_of_the_latest_verdict() -> None:
    metrics = Metrics(CollectorRegistry())
    record_verdict(metrics, decided("1" * 32), "1" * 16)
    record_verdict(metrics, decided(TRACE_ID), SPAN_ID)
    content_type, body = exposition(metrics.registry, "application/openmetrics-text")
    assert content_type.startswith("application/openmetrics-text; version=1.0.0")
    found = exemplars_of(body)
    for name in EXEMPLIFIED:
        assert {"trace_id": TRACE_ID, "span_id": SPAN_ID} in found[name], name
        assert all(e["trace_id"] == TRACE_ID for e in found[name]), name


def test_the_prometheus_text_format_stays_the_default_and_has_no_exemplars() -> None:
    metrics = Metrics(CollectorRegistry())
    record_verdict(metrics, decided(), SPAN_ID)
    content_type, body = exposition(metrics.registry, "")
    assert content_type.startswith("text/plain; version=")
    assert TRACE_ID not in body.decode()
    assert "sidecar_cases_total{" in body.decode()


def test_latency_is_observed_from_trace_end_to_decision() -> None:
    metrics = Metrics(CollectorRegistry())
    record_verdict(metrics, decided(seconds=7.0), SPAN_ID)
    record_verdict(metrics, verdict(), SPAN_ID)  # no decision time: not observed
    get = metrics.registry.get_sample_value
    assert get("sidecar_verdict_latency_seconds_count", {"rubric": "refund-support"}) == 1
    assert get("sidecar_verdict_latency_seconds_sum", {"rubric": "refund-support"}) == 7.0


def test_exemplar_labels_stay_under_the_openmetrics_limit() -> None:
    labels = verdict_exemplar("f" * 32, "f" * 16)
    assert sum(len(k) + len(v) for k, v in labels.items()) <= 128
    assert verdict_exemplar(TRACE_ID, None) == {"trace_id": TRACE_ID}


@pytest.mark.parametrize(
    ("accept", "openmetrics"),
    [
        ("", False),
        ("*/*", False),
        ("text/plain;version=0.0.4", False),
        (
            "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.1",
            True,
        ),
        ("Application/OpenMetrics-Text; version=0.0.1", True),
        ("application/openmetrics-text;q=0", False),
        ("application/openmetrics-text;q=nonsense", False),
    ],
    ids=["none", "any", "text", "prometheus-3", "case", "refused", "bad-q"],
)
def test_accept_negotiation(accept: str, openmetrics: bool) -> None:
    assert wants_openmetrics(accept) is openmetrics


@pytest.mark.parametrize(("value", "le"), [(0.1, "0.5"), (0.5, "0.5"), (3.0, "5.0"), (1e6, "+Inf")])
def test_bucket_bound(value: float, le: str) -> None:
    assert bucket_bound(value, VERDICT_LATENCY_BUCKETS) == le


async def scrape(port: int, accept: str | None) -> tuple[str, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = "GET /metrics HTTP/1.1\r\nHost: localhost\r\n"
    if accept is not None:
        head += f"Accept: {accept}\r\n"
    writer.write((head + "\r\n").encode())
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), timeout=10)
    writer.close()
    await writer.wait_closed()
    headers, _, body = raw.partition(b"\r\n\r\n")
    content_type = next(
        line.split(":", 1)[1].strip()
        for line in headers.decode().split("\r\n")
        if line.lower().startswith("content-type:")
    )
    return content_type, body


async def test_metrics_endpoint_negotiates_the_format() -> None:
    metrics = Metrics(CollectorRegistry())
    record_verdict(metrics, decided(), SPAN_ID)
    server = MetricsServer(metrics.registry, lambda: (True, "ok"), host="127.0.0.1", port=0)
    await server.start()
    try:
        plain_type, plain = await scrape(server.port, None)
        om_type, om = await scrape(server.port, "application/openmetrics-text;version=1.0.0")
    finally:
        await server.stop()
    assert plain_type.startswith("text/plain")
    assert TRACE_ID not in plain.decode()
    assert om_type.startswith("application/openmetrics-text")
    assert om.endswith(b"# EOF\n")
    assert {"trace_id": TRACE_ID, "span_id": SPAN_ID} in exemplars_of(om)["sidecar_cases_total"]


WORKER = textwrap.dedent(
    """
    import dataclasses, sys
    from pathlib import Path
    from prometheus_client import CollectorRegistry
    from sidecar.adapters.prometheus import Metrics, record_verdict
    from sidecar.adapters.workers import StatsBridge
    from tests.test_exemplars import decided

    metrics = Metrics(CollectorRegistry())
    bridge = StatsBridge(metrics, exemplar_dir=Path(sys.argv[1]))
    record_verdict(metrics, decided(sys.argv[2]), sys.argv[3])
    bridge.sync()
    """
)


def test_workers_exemplars_survive_the_supervisors_sum(tmp_path: Path) -> None:
    """Two real multiprocess workers; the supervisor's view sums them and keeps an exemplar."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PYTHONPATH": str(root)}
    workers = [("a" * 32, "a" * 16), ("b" * 32, "b" * 16)]
    for trace_id, span_id in workers:
        subprocess.run(
            [sys.executable, "-c", WORKER, str(tmp_path), trace_id, span_id],
            env=env,
            cwd=root,
            check=True,
            timeout=60,
        )
    registry = CollectorRegistry()
    registry.register(MergedExemplars(MultiProcessCollector(None, path=str(tmp_path)), tmp_path))
    _, body = exposition(registry, "application/openmetrics-text")
    labels = {
        "rubric": "refund-support",
        "rubric_version": "3",
        "judge_model": "gemini-2.5-flash",
        "agent": "refund-agent",
        "agent_version": "1.4.2",
        "outcome": "unacceptable",
        "scope": "trace",
    }
    assert registry.get_sample_value("sidecar_cases_total", labels) == 2
    found = exemplars_of(body)
    known = [{"trace_id": t, "span_id": s} for t, s in workers]
    for name in EXEMPLIFIED:
        assert found.get(name), f"{name} lost its exemplar across workers"
        assert all(e in known for e in found[name]), name


def test_a_worker_writes_its_exemplar_file_only_when_an_exemplar_came(tmp_path: Path) -> None:
    memory = ExemplarMemory()
    memory.remember("sidecar_cases_total", {"rubric": "r"}, {"trace_id": "a" * 32}, 1.0, 1.0)
    assert memory.changed
    memory.write(tmp_path, pid=1)
    assert not memory.changed
    path = tmp_path / "exemplars_1.json"
    written = path.read_text()
    memory.remember("sidecar_cases_total", {"rubric": "r"}, {"trace_id": "b" * 32}, 1.0, 2.0)
    assert memory.changed
    memory.write(tmp_path, pid=1)
    assert path.read_text() != written
