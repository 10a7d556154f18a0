"""Real services for integration tests: Kafka helpers, an OTLP gRPC receiver, a sidecar process.

Also what runs a real process from the repository root (``run_python``, with an
environment from ``environ_without``), which unit tests that start
``python -m sidecar ...`` use too.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import yaml
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

REPO = Path(__file__).resolve().parents[2]

# A rubric with one check every well-formed trace passes (no error spans).
SHOP_RUBRIC = """
id: shop
version: "1"
checks:
  - {name: clean, type: no_error_spans}
"""


def environ_without(*prefixes: str) -> dict[str, str]:
    """This process's environment without the variables whose names start with ``prefixes``."""
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}


def run_python(
    *args: str, env: Mapping[str, str], timeout: float | None = None, check: bool = False
) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` (this interpreter) from the repository root; its output as text."""
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        env=dict(env),
        cwd=REPO,
        timeout=timeout,
        check=check,
    )


def write_rubric(workdir: Path, name: str, text: str) -> Path:
    """The folder ``workdir/rubrics`` with rubric file ``{name}.yaml`` holding ``text``."""
    folder = workdir / "rubrics"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.yaml").write_text(text)
    return folder


def write_canary_set(
    folder: Path, cases: Iterable[tuple[str, Sequence[bytes], Iterable[tuple[str, str]]]]
) -> None:
    """A canary folder: ``traces.bin`` (length-framed OTLP records) and ``labels.jsonl``.

    ``cases``: (trace id, its OTLP records, its (criterion, PASS|FAIL) human labels).
    """
    folder.mkdir(parents=True)
    framed, labels = b"", []
    for trace_id, parts, human in cases:
        framed += b"".join(len(p).to_bytes(4, "big") + p for p in parts)
        labels += [
            {"case_id": trace_id, "criterion": c, "rater": "ann", "label": v} for c, v in human
        ]
    (folder / "traces.bin").write_bytes(framed)
    (folder / "labels.jsonl").write_text("".join(json.dumps(x) + "\n" for x in labels))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_for(
    predicate: Callable[[], object], within: float = 60.0, what: str = "condition"
) -> None:
    """Poll ``predicate`` until it is truthy; fail after ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.3)
    raise AssertionError(f"timed out after {within}s waiting for {what}")


# -- Kafka ---------------------------------------------------------------------------------


async def create_topics(bootstrap: str, names: Iterable[str], partitions: int = 3) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    finally:
        await admin.close()


async def spans_topic(bootstrap: str, prefix: str, *extra: str) -> str:
    """Create ``{prefix}.spans`` with its verdict and dead-letter topics (3 partitions each)."""
    topic = f"{prefix}.spans"
    await create_topics(bootstrap, [topic, f"{topic}.verdicts", f"{topic}.dlq", *extra])
    return topic


async def produce(
    bootstrap: str,
    topic: str,
    records: Sequence[tuple[bytes | None, bytes]],
    *,
    partition: int | None = None,
) -> None:
    """Send and wait for every record; ``partition`` overrides partitioning by key."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        batch = [
            await producer.send(topic, value, key=key, partition=partition)
            for key, value in records
        ]
        await asyncio.gather(*batch)
    finally:
        await producer.stop()


async def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The offsets ``group`` has committed on ``topic``, per partition."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == topic}


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """The next offset to be written, per partition of ``topic``."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        ends = await consumer.end_offsets(partitions)
    finally:
        await consumer.stop()
    return {tp.partition: offset for tp, offset in ends.items()}


async def consume_all(
    bootstrap: str, topic: str, *, expect: int, within: float = 60.0, settle: float = 2.0
) -> list[Any]:
    """Read a topic from the start until ``expect`` records arrived (then ``settle`` more seconds)."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    records: list[Any] = []
    try:
        deadline = time.monotonic() + within
        settled_at: float | None = None
        while time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=300)
            for messages in batches.values():
                records.extend(messages)
            if len(records) >= expect:
                settled_at = settled_at or time.monotonic()
                if time.monotonic() - settled_at >= settle:
                    break
    finally:
        await consumer.stop()
    return records


def verdicts_from(records: Sequence[Any]) -> list[dict[str, Any]]:
    return [json.loads(r.value) for r in records]


# -- OTLP gRPC receiver ----------------------------------------------------------------------


class OtlpReceiver(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    """A real OTLP/gRPC TraceService endpoint that keeps every request it receives."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self._lock = threading.Lock()
        self.port = free_port()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self._server)
        self._server.add_insecure_port(f"127.0.0.1:{self.port}")

    def Export(self, request: ExportTraceServiceRequest, context: Any) -> Any:
        with self._lock:
            self.requests.append(request)
        return trace_service_pb2.ExportTraceServiceResponse()

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """(resource attributes, span) for every received span."""
        out = []
        with self._lock:
            for req in self.requests:
                for rs in req.resource_spans:
                    resource = {kv.key: kv.value.string_value for kv in rs.resource.attributes}
                    for ss in rs.scope_spans:
                        out.extend((resource, s) for s in ss.spans)
        return out

    def __enter__(self) -> OtlpReceiver:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(grace=None)


# -- the sidecar as a real process ------------------------------------------------------------


class SidecarProcess:
    """``sidecar run --config FILE`` in a subprocess, with its own metrics port."""

    def __init__(
        self,
        workdir: Path,
        *,
        bootstrap: str,
        topic: str,
        group: str,
        rubrics_dir: Path,
        otlp_port: int | None = None,
        extra: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        name: str = "sidecar",
    ) -> None:
        self.metrics_port = free_port()
        self.log_path = workdir / f"{name}.log"
        config: dict[str, Any] = {
            "rubrics_dir": str(rubrics_dir),
            "kafka": {
                "bootstrap_servers": bootstrap,
                "topic": topic,
                "group_id": group,
                "dead_letter_topic": f"{topic}.dlq",
                "verdict_topic": f"{topic}.verdicts",
                # Its own logs topic, made by `sidecar topics create` with the spans' count.
                "logs_topic": f"{topic}.logs",
                "backfill_verdict_topic": f"{topic}.verdicts_backfill",
                "commit_interval_s": 0.5,
                "session_timeout_ms": 6000,
                "heartbeat_interval_ms": 1000,
            },
            "assembler": {"decision_wait_s": 0.5, "max_trace_age_s": 20},
            "metrics": {"host": "127.0.0.1", "port": self.metrics_port},
            "otel": {"enabled": otlp_port is not None},
            # Every topic named after this test's: a default name (eval_labels,
            # eval_conversations) would be shared with other tests on the broker,
            # with whatever partition count the first one gave it.
            "review": {"topic": f"{topic}.review", "labels_topic": f"{topic}.labels"},
            "conversations": {"topic": f"{topic}.turns", "state_topic": f"{topic}.state"},
        }
        for key, value in (extra or {}).items():
            if isinstance(value, dict):
                config.setdefault(key, {}).update(value)
            else:
                config[key] = value
        self.config_path = workdir / f"{name}.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.env = environ_without("SIDECAR_", "OTEL_", "GOOGLE_", "GEMINI_")
        if otlp_port is not None:
            self.env.update(
                OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{otlp_port}",
                OTEL_EXPORTER_OTLP_INSECURE="true",
                OTEL_BSP_SCHEDULE_DELAY="200",
            )
        self.env.update(env or {})
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> SidecarProcess:
        # As a user would: the topics first (the service refuses to start without them).
        made = subprocess.run(
            [
                sys.executable,
                "-m",
                "sidecar",
                "topics",
                "create",
                "--config",
                str(self.config_path),
                "--partitions",
                "3",
                "--replication-factor",
                "1",
            ],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=REPO,
            timeout=60,
        )
        if made.returncode != 0:
            raise RuntimeError(f"sidecar topics create failed:\n{made.stdout}{made.stderr}")
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sidecar", "run", "--config", str(self.config_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=REPO,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sidecar exited {self.proc.returncode}:\n{self.log()}")
            if self.http("/readyz")[0] == 200:
                return self
            time.sleep(0.2)
        raise RuntimeError(f"sidecar not ready in {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def http(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}{path}", timeout=2
            ) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError:
            return 0, ""

    def metric(self, name: str, **labels: str) -> float:
        """Sum of samples of ``name`` whose labels include ``labels``."""
        from prometheus_client.parser import text_string_to_metric_families

        _, text = self.http("/metrics")
        total = 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(k) == v for k, v in labels.items()
                ):
                    total += sample.value
        return total

    def terminate(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=10)

    def __enter__(self) -> SidecarProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def sidecar_on(
    prefix: str, workdir: Path, *, bootstrap: str, rubrics_dir: Path, **options: Any
) -> SidecarProcess:
    """A sidecar reading ``{prefix}.spans`` (see ``spans_topic``) in group ``{prefix}.g``."""
    return SidecarProcess(
        workdir,
        bootstrap=bootstrap,
        topic=f"{prefix}.spans",
        group=f"{prefix}.g",
        rubrics_dir=rubrics_dir,
        **options,
    )
