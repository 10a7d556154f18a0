"""A slow check beside a live consumer: the loop keeps its heartbeat and its probes (class 3).

The service runs in this process against the real broker, with a check runner
that burns CPU in Python for longer than the group's session timeout on one
trace. Planning runs on the service's worker thread (``sidecar.engine.offload``), so
meanwhile ``/healthz`` answers within a second, the group keeps the replica
(no partition is revoked), a trace produced behind the slow one still gets its
verdict, and the slow trace gets its own verdict in the end.

Run on the loop instead (``offload=inline``), the same check freezes
``/healthz`` for the whole burn and the broker expires the session: this test
fails on a service without the worker thread.
"""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider

from sidecar.adapters.otel import VerdictSpans
from sidecar.adapters.prometheus import Metrics
from sidecar.commands.run import kafka_service
from sidecar.evaluate.checks import run_checks
from sidecar.evaluate.rubric import Rubric, parse_rubric
from sidecar.model import CheckResult, Transcript
from sidecar.settings import Settings
from tests.builders import trace_id
from tests.integration.harness import consume_all, free_port, produce, spans_topic, verdicts_from
from tests.otlp_records import span_tree

pytestmark = [pytest.mark.kafka]

SESSION_TIMEOUT_S = 6.0
# Longer than the session timeout: on the loop, the broker would expire the member.
BURN_S = 2.5 * SESSION_TIMEOUT_S
SLOW, BEHIND = 1, 2

RUBRIC = """
id: shop
version: "1"
checks:
  - {name: clean, type: no_error_spans}
"""


def record(n: int) -> tuple[bytes, bytes]:
    spans = span_tree(n, (1, None, "invoke_agent shop"), start_ns=1_000_000, end_ns=900_000_000)
    return trace_id(n).encode(), spans


def slow_checks(
    rubric: Rubric, transcript: Transcript, *, fragment: str | None = None
) -> tuple[CheckResult, ...]:
    """The real checks; on trace SLOW, first a pure-Python CPU burn (it holds the GIL)."""
    if transcript.trace_id == trace_id(SLOW):
        deadline = time.perf_counter() + BURN_S
        spins = 0
        while time.perf_counter() < deadline:
            spins += 1
    return run_checks(rubric, transcript, fragment=fragment)


class Prober(threading.Thread):
    """Polls ``/healthz`` from its own thread and keeps the slowest answer time."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.url = f"http://127.0.0.1:{port}/healthz"
        self.stop = threading.Event()
        self.slowest = 0.0
        self.answers = 0
        self.failures: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            began = time.perf_counter()
            try:
                with urllib.request.urlopen(self.url, timeout=30) as response:
                    response.read()
                self.answers += 1
            except OSError as exc:
                self.failures.append(repr(exc))
            self.slowest = max(self.slowest, time.perf_counter() - began)
            self.stop.wait(0.2)


def revoked(metrics: Metrics) -> float:
    return metrics.rebalances.labels(event="revoked")._value.get()


async def test_a_slow_check_keeps_heartbeat_and_health_probe(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    topic = await spans_topic(kafka_bootstrap, topic_prefix)
    port = free_port()
    settings = Settings(
        kafka={
            "bootstrap_servers": kafka_bootstrap,
            "topic": topic,
            "group_id": f"{topic_prefix}.g",
            "dead_letter_topic": f"{topic}.dlq",
            "verdict_topic": f"{topic}.verdicts",
            "commit_interval_s": 0.5,
            "session_timeout_ms": int(SESSION_TIMEOUT_S * 1000),
            "heartbeat_interval_ms": 1000,
        },
        assembler={"decision_wait_s": 0.3},
        metrics={"host": "127.0.0.1", "port": port},
        otel={"enabled": False},
        review={"enabled": False},
    )
    metrics = Metrics()
    service, server = kafka_service(
        settings,
        [parse_rubric(RUBRIC, tmp_path / "shop.yaml")],
        metrics,
        VerdictSpans(TracerProvider()),
        None,
        checks=slow_checks,
    )
    await server.start()
    stop = asyncio.Event()
    running = asyncio.create_task(service.run(stop))
    prober = Prober(port)
    try:
        # Wait until the replica owns its partitions, then start probing.
        deadline = time.monotonic() + 60
        while not service.traces.stats.assigned:
            assert time.monotonic() < deadline, "the service never got its partitions"
            assert not running.done(), running.exception()
            await asyncio.sleep(0.2)
        revoked_before = revoked(metrics)
        prober.start()
        await produce(kafka_bootstrap, topic, [record(SLOW)])
        # Once the slow trace is being planned, a second trace comes in behind it.
        await asyncio.sleep(1.5)
        await produce(kafka_bootstrap, topic, [record(BEHIND)])
        records = await consume_all(
            kafka_bootstrap, f"{topic}.verdicts", expect=2, within=BURN_S + 60, settle=0.5
        )
    finally:
        prober.stop.set()
        stop.set()
        await asyncio.wait_for(running, timeout=60)
        await server.stop()
        prober.join(timeout=35)

    verdicts = {v["trace_id"]: v for v in verdicts_from(records)}
    assert set(verdicts) == {trace_id(SLOW), trace_id(BEHIND)}
    assert all(v["outcome"] == "acceptable" for v in verdicts.values())
    assert not prober.failures, prober.failures
    assert prober.answers >= BURN_S / 0.5, prober.answers
    assert prober.slowest < 1.0, f"/healthz took {prober.slowest:.1f}s while a check ran"
    assert revoked(metrics) == revoked_before, "the group revoked partitions during the check"
