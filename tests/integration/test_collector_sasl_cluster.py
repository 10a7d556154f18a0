"""deploy/collector/agents-sasl-ssl.yaml, unchanged but for test ports and topics, exports to
the SASL_SSL cluster (SCRAM-SHA-512, the cluster's CA, the brokers' names verified) as the
``producer`` user, which may only WRITE and DESCRIBE the test's topics."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml
from aiokafka import AIOKafkaConsumer, TopicPartition
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from tests import realparts
from tests.agents.genai_spans import make_cases
from tests.integration.cluster import cluster, create_topics, grant
from tests.integration.harness import REPO, free_port

pytestmark = [pytest.mark.kafka]


async def records_of(topic: str, expect: int, within: float = 60.0) -> list[bytes]:
    """The keys of ``topic``'s records, read as the admin, once ``expect`` of them came."""
    consumer = AIOKafkaConsumer(enable_auto_commit=False, **cluster().client_kwargs("admin"))
    await consumer.start()
    partitions = [TopicPartition(topic, p) for p in range(3)]
    consumer.assign(partitions)
    await consumer.seek_to_beginning(*partitions)
    keys: list[bytes] = []
    try:
        deadline = time.monotonic() + within
        while len(keys) < expect and time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                keys.extend(bytes(r.key or b"") for r in batch)
    finally:
        await consumer.stop()
    return keys


def start_collector(path: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(realparts.otelcol()), "--config", str(path)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )


async def test_the_sasl_ssl_exporter_writes_to_the_cluster(tmp_path: Path) -> None:
    prefix = f"oc-{uuid.uuid4().hex[:8]}"
    spans, logs = f"{prefix}.otlp_spans", f"{prefix}.otlp_logs"
    await create_topics([spans, logs], partitions=3)
    for operation in ("WRITE", "DESCRIBE"):
        await grant("producer", operation, "TOPIC", prefix, pattern="PREFIXED")

    config = yaml.safe_load((REPO / "deploy" / "collector" / "agents-sasl-ssl.yaml").read_text())
    grpc_port = free_port()
    config["receivers"]["otlp"]["protocols"] = {"grpc": {"endpoint": f"127.0.0.1:{grpc_port}"}}
    config["service"]["telemetry"] = {"metrics": {"level": "none"}, "logs": {"level": "warn"}}
    config["exporters"]["kafka"]["traces"]["topic"] = spans
    config["exporters"]["kafka"]["logs"]["topic"] = logs
    config["exporters"]["debug"] = {}
    config["service"]["pipelines"]["traces/backend"]["exporters"] = ["debug"]
    path = tmp_path / "agents-sasl-ssl.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))

    kc = cluster()
    env = {
        **os.environ,
        "KAFKA_BROKERS": kc.bootstrap.split(",")[0],
        "KAFKA_USERNAME": kc.info["users"]["producer"]["username"],
        "KAFKA_PASSWORD": kc.password("producer"),
        "KAFKA_CA_FILE": kc.ca_file,
        "TRACING_BACKEND_ENDPOINT": "127.0.0.1:1",
    }
    log = tmp_path / "otelcol.log"
    proc = start_collector(path, env, log)
    try:
        cases = make_cases(10, seed=7)
        exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{grpc_port}", insecure=True)
        deadline = time.monotonic() + 90
        try:
            for case in cases:
                while (result := exporter.export(case.spans)) is not SpanExportResult.SUCCESS:
                    assert proc.poll() is None, log.read_text()
                    assert time.monotonic() < deadline, log.read_text()
                    await asyncio.sleep(0.5)
                assert result is SpanExportResult.SUCCESS
        finally:
            exporter.shutdown()
        keys = await records_of(spans, expect=len(cases), within=90)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    # One record per export, keyed by the trace id (partition_traces_by_id).
    assert sorted(keys) == sorted(c.trace_id.encode() for c in cases), log.read_text()
    assert kc.password("producer") not in log.read_text()
