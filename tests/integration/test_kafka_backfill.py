"""``sidecar backfill`` against the real Kafka broker.

Traces are produced with record timestamps a minute apart over the last hour;
a live consumer group has committed offsets. The backfill starts in the
middle: exactly the later traces get verdicts on the backfill topic, each with
``backfill: true``; what is produced while it runs is left alone (it stops at
the end offsets it read at start); the live group's offsets do not move, and
the backfill's own group holds where it ended.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from sidecar.adapters.kafka import KafkaSink
from sidecar.adapters.kafka_history import KafkaHistory
from sidecar.adapters.prometheus import Metrics
from sidecar.commands.backfill import KafkaOutput
from sidecar.engine.history import BackfillSummary, backfill
from sidecar.evaluate.rubric import load_rubrics
from sidecar.evaluate.sample import Sampler
from sidecar.evaluate.verdict import Verdict
from sidecar.ingest.assemble import Assembler
from sidecar.settings import KafkaSettings
from sidecar.wire.redaction import DEFAULT_REDACTION
from tests.integration.harness import (
    committed_offsets,
    consume_all,
    create_topics,
    end_offsets,
    environ_without,
    run_python,
    verdicts_from,
)
from tests.integration.scenario import Feed, make_feed, write_rubrics

pytestmark = [pytest.mark.kafka]

TRACES = 40
MIDDLE = 20


def spaced(feed: Feed, first: datetime) -> list[tuple[bytes, bytes, int]]:
    """The feed's records trace by trace, trace i stamped ``first`` + i minutes."""
    by_trace: dict[bytes, list[bytes]] = {}
    for key, value in feed.records:
        by_trace.setdefault(key, []).append(value)
    out = []
    for index, case in enumerate(feed.cases):
        key = case.trace_id.encode()
        stamp = int((first + timedelta(minutes=index)).timestamp() * 1000)
        out.extend((key, value, stamp) for value in by_trace[key])
    return out


async def produce_stamped(
    bootstrap: str, topic: str, records: list[tuple[bytes, bytes, int]]
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        sent = [
            await producer.send(topic, value, key=key, timestamp_ms=stamp)
            for key, value, stamp in records
        ]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


async def commit_live(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = {p: TopicPartition(topic, p) for p in offsets}
        consumer.assign(list(tps.values()))
        await consumer.commit({tps[p]: o for p, o in offsets.items()})
    finally:
        await consumer.stop()


class ProduceOnFirstVerdict:
    """An ``Output`` that, before its first verdict goes out, produces more traces (now)."""

    def __init__(self, inner: KafkaOutput, bootstrap: str, topic: str, extra: Feed) -> None:
        self.inner = inner
        self.bootstrap, self.topic, self.extra = bootstrap, topic, extra
        self.produced = False

    async def emit(self, verdict: Verdict) -> None:
        if not self.produced:
            self.produced = True
            await produce_stamped(self.bootstrap, self.topic, spaced(self.extra, datetime.now(UTC)))
        await self.inner.emit(verdict)

    async def flush(self) -> None:
        await self.inner.flush()


@pytest.fixture
def first() -> datetime:
    return datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=TRACES + 5)


async def test_backfill_reads_from_the_middle_to_the_end_offsets_at_start(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path, first: datetime
) -> None:
    topic, out, live = f"{topic_prefix}.spans", f"{topic_prefix}.backfill", f"{topic_prefix}.g"
    await create_topics(kafka_bootstrap, [topic, out])
    feed = make_feed(TRACES, seed=11)
    await produce_stamped(kafka_bootstrap, topic, spaced(feed, first))
    ends = await end_offsets(kafka_bootstrap, topic)
    live_offsets = {p: end // 2 for p, end in ends.items()}
    await commit_live(kafka_bootstrap, live, topic, live_offsets)

    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap, topic=topic, group_id=live)
    extra = make_feed(10, seed=12)
    sink = KafkaSink(settings)
    await sink.start()
    output = ProduceOnFirstVerdict(
        KafkaOutput(sink, Metrics(), DEFAULT_REDACTION, topic=out), kafka_bootstrap, topic, extra
    )
    summary = BackfillSummary()
    group = f"{live}-backfill-test"
    try:
        window = await backfill(
            KafkaHistory(settings, group),
            output,
            since=first + timedelta(minutes=MIDDLE),
            until=None,
            rubrics=load_rubrics(write_rubrics(tmp_path / "rubrics")),
            sampler=Sampler(judge_enabled=False),
            judge=None,
            assembler=Assembler(decision_wait=5.0, max_trace_age=120.0),
            summary=summary,
            concurrency=4,
        )
    finally:
        await sink.stop()

    expected = {case.trace_id for case in feed.cases[MIDDLE:]}
    verdicts = verdicts_from(await consume_all(kafka_bootstrap, out, expect=len(expected)))
    assert output.produced  # more traces arrived while it ran ...
    assert sum((await end_offsets(kafka_bootstrap, topic)).values()) > sum(ends.values())
    # ... and only the traces from the middle on, up to the end offsets at start, got verdicts.
    assert sorted(v["trace_id"] for v in verdicts) == sorted(expected)
    assert all(v["backfill"] is True for v in verdicts)
    assert all(not v.get("flags") for v in verdicts)  # whole traces
    assert window.next == ends
    assert summary.evaluation.traces == TRACES - MIDDLE
    # The live group did not move; the backfill's own group ends at the end offsets at start.
    assert await committed_offsets(kafka_bootstrap, live, topic) == live_offsets
    assert await committed_offsets(kafka_bootstrap, group, topic) == ends


async def test_the_command_with_from_and_to(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path, first: datetime
) -> None:
    topic, live = f"{topic_prefix}.spans", f"{topic_prefix}.g"
    out = f"{topic_prefix}.backfill"
    await create_topics(kafka_bootstrap, [topic, out])
    feed = make_feed(TRACES, seed=13)
    await produce_stamped(kafka_bootstrap, topic, spaced(feed, first))
    ends = await end_offsets(kafka_bootstrap, topic)
    await commit_live(kafka_bootstrap, live, topic, ends)

    config = tmp_path / "sidecar.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "rubrics_dir": str(write_rubrics(tmp_path / "rubrics")),
                "kafka": {
                    "bootstrap_servers": kafka_bootstrap,
                    "topic": topic,
                    "group_id": live,
                    "backfill_verdict_topic": out,
                },
                "assembler": {"decision_wait_s": 5},
            }
        )
    )
    since = (first + timedelta(minutes=10)).isoformat()
    # Naive: UTC. Trace 29 at minute 29 is in; trace 30 at minute 30 is not.
    until = (first + timedelta(minutes=29, seconds=30)).replace(tzinfo=None).isoformat()
    started = time.monotonic()
    done = await asyncio.to_thread(
        run_python,
        *("-m", "sidecar", "backfill", "--config", str(config)),
        *("--from", since, "--to", until, "--quiet"),
        env=environ_without("SIDECAR_", "GOOGLE_", "GEMINI_"),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 120
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("backfill: "), done.stderr
    assert "20 traces, 20 verdicts" in line
    assert f"to {out}" in line
    assert f"group {live}-backfill-" in line
    assert "spans/s" in line
    assert "traces/s" in line

    expected = {case.trace_id for case in feed.cases[10:30]}
    verdicts = verdicts_from(await consume_all(kafka_bootstrap, out, expect=len(expected)))
    assert sorted(v["trace_id"] for v in verdicts) == sorted(expected)
    assert all(v["backfill"] is True for v in verdicts)
    assert await committed_offsets(kafka_bootstrap, live, topic) == ends
    assert all(v["judged"] is False for v in verdicts)  # no judge configured
