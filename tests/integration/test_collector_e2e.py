"""Agents -> the real OpenTelemetry Collector (kafka exporter) -> Kafka -> sidecar -> Collector.

Uses the repository's own collector configs (deploy/collector/agents.yaml and
verdicts.yaml) with test ports and topics patched in, and the Collector binary
built from Go modules by scripts/build-collector. The agents' collector also
writes what it receives with the file exporter (JSON and proto), and
``sidecar replay`` over those files must agree with what came through Kafka.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from sidecar.cli import main as sidecar_main
from sidecar.ingest.decode import decode
from tests import realparts
from tests.agents.genai_spans import make_cases
from tests.integration.harness import (
    REPO,
    SidecarProcess,
    consume_all,
    create_topics,
    free_port,
    wait_for,
)
from tests.integration.scenario import expected_outcome, write_rubrics

pytestmark = [pytest.mark.kafka]


class Collector:
    def __init__(
        self, config: dict[str, Any], workdir: Path, name: str, env: dict[str, str]
    ) -> None:
        self.path = workdir / f"{name}.yaml"
        self.path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.log = workdir / f"{name}.log"
        self.env = {**os.environ, **env}
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Collector:
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [str(realparts.otelcol()), "--config", str(self.path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
            )
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def _receiver(config: dict[str, Any], grpc_port: int) -> None:
    config["receivers"]["otlp"]["protocols"] = {"grpc": {"endpoint": f"127.0.0.1:{grpc_port}"}}


def _no_self_telemetry(config: dict[str, Any]) -> None:
    config["service"]["telemetry"] = {"metrics": {"level": "none"}, "logs": {"level": "warn"}}


@pytest.fixture(scope="module")
def collector_binary() -> Path:
    return realparts.otelcol()


def _wait_port(port: int, within: float = 30) -> None:
    import socket

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"collector did not open port {port}")


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path


async def test_agents_through_collector_kafka_and_back(
    collector_binary: Path, kafka_bootstrap: str, topic_prefix: str, workdir: Path
) -> None:
    topic = f"{topic_prefix}.otlp_spans"
    await create_topics(kafka_bootstrap, [topic, f"{topic}.verdicts", f"{topic}.dlq"])
    cases = make_cases(40, seed=31)
    agents_port, verdicts_port = free_port(), free_port()

    agents = yaml.safe_load((REPO / "deploy" / "collector" / "agents.yaml").read_text())
    _receiver(agents, agents_port)
    _no_self_telemetry(agents)
    agents["exporters"]["kafka"]["traces"]["topic"] = topic
    assert agents["exporters"]["kafka"]["partition_traces_by_id"] is True
    agents["exporters"]["file/json"] = {"path": str(workdir / "agents.json")}
    agents["exporters"]["file/proto"] = {"path": str(workdir / "agents.pb"), "format": "proto"}
    agents["service"]["pipelines"]["traces/backend"]["exporters"] = ["file/json", "file/proto"]

    verdicts = yaml.safe_load((REPO / "deploy" / "collector" / "verdicts.yaml").read_text())
    _receiver(verdicts, verdicts_port)
    _no_self_telemetry(verdicts)
    verdicts["exporters"] = {"file/verdicts": {"path": str(workdir / "verdict-spans.json")}}
    verdicts["service"]["pipelines"]["traces/verdicts"]["exporters"] = ["file/verdicts"]

    rubrics = write_rubrics(workdir / "rubrics")
    env = {"KAFKA_BROKERS": kafka_bootstrap, "TRACING_BACKEND_ENDPOINT": "127.0.0.1:1"}
    with (
        Collector(verdicts, workdir, "verdicts", env),
        Collector(agents, workdir, "agents", env),
        SidecarProcess(
            workdir,
            bootstrap=kafka_bootstrap,
            topic=topic,
            group=f"{topic_prefix}.g",
            rubrics_dir=rubrics,
            otlp_port=verdicts_port,
        ) as sidecar,
    ):
        _wait_port(agents_port)
        _wait_port(verdicts_port)
        # The agents' side: the OTel SDK's own OTLP/gRPC exporter, one export per trace.
        exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{agents_port}", insecure=True)
        try:
            for case in cases:
                assert exporter.export(case.spans) is SpanExportResult.SUCCESS
        finally:
            exporter.shutdown()

        records = await consume_all(
            kafka_bootstrap, f"{topic}.verdicts", expect=len(cases), within=90
        )
        through_kafka = {json.loads(r.value)["trace_id"]: json.loads(r.value) for r in records}
        assert len(records) == len(cases)
        for case in cases:
            assert through_kafka[case.trace_id]["outcome"] == expected_outcome(case), case.kind
        # The Collector keyed each record by the trace id (partition_traces_by_id).
        assert sidecar.metric("sidecar_orphan_traces_total") == 0

        # Verdict spans reached the verdict collector, inside the evaluated traces.
        spans_file = workdir / "verdict-spans.json"
        await wait_for(
            lambda: spans_file.exists() and _count_spans(spans_file) >= len(cases),
            30,
            "verdict spans",
        )
        roots = {
            c.trace_id: next(format(s.context.span_id, "016x") for s in c.spans if s.parent is None)
            for c in cases
        }
        for line in spans_file.read_text().splitlines():
            for span in decode(line.encode()):
                assert span.name.startswith("evaluate ")
                assert span.parent_span_id == roots[span.trace_id]
        assert sidecar.terminate() == 0

    # What the Collector wrote with its file exporter replays to the same outcomes.
    for name in ("agents.json", "agents.pb"):
        path = workdir / name
        assert path.stat().st_size > 0
        outcomes = await asyncio.to_thread(_replay, path, rubrics)
        assert outcomes == {t: v["outcome"] for t, v in through_kafka.items()}, name


def _count_spans(path: Path) -> int:
    return sum(len(decode(line.encode())) for line in path.read_text().splitlines() if line.strip())


def _replay(path: Path, rubrics: Path) -> dict[str, str]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = sidecar_main(["replay", str(path), "--rubrics", str(rubrics), "--exit-zero"])
    assert code == 0
    return {v["trace_id"]: v["outcome"] for v in map(json.loads, out.getvalue().splitlines())}
