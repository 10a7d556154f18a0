"""``sidecar run`` as a process on the SASL_SSL cluster, as the ``sidecar`` user with only
the ACLs granted here:

- a READ ACL removed from the spans topic while traces flow: ``/readyz`` is 503 naming the
  topic and the operation, ``sidecar_kafka_refused`` says the same, nothing is read; once
  granted again the service recovers by itself and every trace gets its verdict;
- ``--workers 2``: two processes in one group, every trace a verdict;
- ``sidecar backfill`` into its own topic, in its own group;
- a rolling restart of every broker while traces flow: every trace gets a verdict, the
  committed offsets reach the end, duplicates (at-least-once) carry the same key.

The topics are made by the admin (the service's user may not create topics) with a fresh
prefix per test; the sidecar user gets WRITE and DESCRIBE on the prefix, READ on its groups,
and READ on each input topic by name, so a test can take one away.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.builders import trace_id
from tests.integration.cluster import (
    admin_client,
    cluster,
    create_topics,
    grant,
    restart_broker,
    revoke,
)
from tests.integration.harness import (
    SHOP_RUBRIC,
    SidecarProcess,
    environ_without,
    run_python,
    wait_for,
    write_rubric,
)
from tests.otlp_records import span_tree

pytestmark = [pytest.mark.kafka]

PARTITIONS = 3


def records(numbers: range) -> list[tuple[bytes, bytes]]:
    return [
        (
            trace_id(n).encode(),
            span_tree(n, (1, None, "invoke_agent shop"), start_ns=1_000_000, end_ns=9_000_000),
        )
        for n in numbers
    ]


async def produce(topic: str, batch: list[tuple[bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(
        acks="all", enable_idempotence=True, linger_ms=5, **cluster().client_kwargs("admin")
    )
    await producer.start()
    try:
        await asyncio.gather(*[await producer.send(topic, v, key=k) for k, v in batch])
    finally:
        await producer.stop()


async def read_all(topic: str, *, expect: int, within: float = 120.0) -> list[Any]:
    """Every record of ``topic`` from the start, until at least ``expect`` came (admin)."""
    consumer = AIOKafkaConsumer(enable_auto_commit=False, **cluster().client_kwargs("admin"))
    await consumer.start()
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(partitions)
    await consumer.seek_to_beginning(*partitions)
    found: list[Any] = []
    try:
        deadline = time.monotonic() + within
        while len(found) < expect and time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                found.extend(batch)
        # A moment more: duplicates may still come.
        for batch in (await consumer.getmany(timeout_ms=1500)).values():
            found.extend(batch)
    finally:
        await consumer.stop()
    return found


async def ends_and_committed(topic: str, group: str) -> tuple[dict[int, int], dict[int, int]]:
    consumer = AIOKafkaConsumer(enable_auto_commit=False, **cluster().client_kwargs("admin"))
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        ends = {tp.partition: o for tp, o in (await consumer.end_offsets(partitions)).items()}
    finally:
        await consumer.stop()
    async with admin_client() as admin:
        offsets = await admin.list_consumer_group_offsets(group)
    committed = {tp.partition: m.offset for tp, m in offsets.items() if tp.topic == topic}
    return ends, committed


def trace_ids(found: list[Any]) -> list[str]:
    return [json.loads(r.value)["trace_id"] for r in found]


async def cluster_sidecar(
    prefix: str, tmp_path: Path, *, extra: dict[str, Any] | None = None
) -> SidecarProcess:
    """Topics (by the admin) and ACLs for ``prefix``, and a sidecar as the ``sidecar`` user."""
    kc = cluster()
    spans = f"{prefix}.spans"
    names = [spans, f"{spans}.logs", f"{spans}.dlq", f"{spans}.verdicts", f"{prefix}.backfill"]
    await create_topics(names, partitions=PARTITIONS)
    for operation in ("WRITE", "DESCRIBE"):
        await grant("sidecar", operation, "TOPIC", prefix, pattern="PREFIXED")
    await grant("sidecar", "READ", "GROUP", prefix, pattern="PREFIXED")
    for topic in (spans, f"{spans}.logs"):
        await grant("sidecar", "READ", "TOPIC", topic)
    secret = tmp_path / "sidecar.password"
    secret.write_text(kc.password("sidecar"))
    settings: dict[str, Any] = {
        "kafka": {
            "security_protocol": "SASL_SSL",
            "ssl": {"ca_file": kc.ca_file},
            "sasl_mechanism": kc.info["mechanism"],
            "sasl_username": kc.info["users"]["sidecar"]["username"],
            "sasl_password_file": str(secret),
            "backfill_verdict_topic": f"{prefix}.backfill",
            "client_id": prefix,
        },
        "review": {"enabled": False},
        "conversations": {"enabled": False},
    }
    for key, value in (extra or {}).items():
        if isinstance(value, dict):
            settings.setdefault(key, {}).update(value)
        else:
            settings[key] = value
    return SidecarProcess(
        tmp_path,
        bootstrap=kc.bootstrap,
        topic=spans,
        group=f"{prefix}.g",
        rubrics_dir=write_rubric(tmp_path, "shop", SHOP_RUBRIC),
        extra=settings,
    )


async def test_a_refused_read_is_named_in_readyz_and_recovers_when_granted(
    tmp_path: Path,
) -> None:
    prefix = f"cs-{uuid.uuid4().hex[:8]}"
    spans = f"{prefix}.spans"
    sidecar = await cluster_sidecar(prefix, tmp_path)
    with sidecar:
        await produce(spans, records(range(1, 51)))
        found = await read_all(f"{spans}.verdicts", expect=50)
        assert set(trace_ids(found)) == {trace_id(n) for n in range(1, 51)}

        await revoke("sidecar", "READ", "TOPIC", spans)
        # A fetch the broker authorised before the revoke may still wait for data (long
        # poll): produce only once the sidecar has been refused, so what follows must wait.
        await wait_for(lambda: sidecar.http("/readyz")[0] == 503, within=60)
        await produce(spans, records(range(51, 101)))
        status, body = sidecar.http("/readyz")
        assert status == 503
        user = cluster().info["users"]["sidecar"]["username"]
        assert f"not authorised to READ topic '{spans}' (kafka.topic) as User:{user}" in body
        labels = {"topic": spans, "group": "", "operation": "READ"}
        assert sidecar.metric("sidecar_kafka_refused", **labels) == 1
        # Nothing was read meanwhile: no verdict for the waiting traces.
        assert len(await read_all(f"{spans}.verdicts", expect=51, within=3)) == len(found)

        await grant("sidecar", "READ", "TOPIC", spans)
        await wait_for(lambda: sidecar.http("/readyz")[0] == 200, within=60)
        every = await read_all(f"{spans}.verdicts", expect=100)
        assert set(trace_ids(every)) == {trace_id(n) for n in range(1, 101)}
        assert sidecar.metric("sidecar_kafka_refused", **labels) == 0
        assert sidecar.terminate(timeout=60) == 0
    ends, committed = await ends_and_committed(spans, f"{prefix}.g")
    assert committed == ends
    assert "Traceback" not in sidecar.log()


async def test_two_workers_and_a_backfill_over_sasl_ssl(tmp_path: Path) -> None:
    prefix = f"cs-{uuid.uuid4().hex[:8]}"
    spans = f"{prefix}.spans"
    started = datetime.now(UTC) - timedelta(seconds=5)
    sidecar = await cluster_sidecar(prefix, tmp_path, extra={"workers": 2})
    with sidecar:
        await produce(spans, records(range(1, 201)))
        found = await read_all(f"{spans}.verdicts", expect=200)
        assert set(trace_ids(found)) == {trace_id(n) for n in range(1, 201)}
        await wait_for(lambda: sidecar.metric("sidecar_cases_total") >= len(found), within=30)
        assert sidecar.metric("sidecar_cases_total") == len(found)
        assert sidecar.terminate(timeout=60) == 0

    done = await asyncio.to_thread(
        run_python,
        *("-m", "sidecar", "backfill", "--config", str(sidecar.config_path)),
        *("--from", started.isoformat(), "--quiet"),
        env=environ_without("SIDECAR_", "GOOGLE_", "GEMINI_"),
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert "200 traces, 200 verdicts" in line, done.stderr
    assert f"to {prefix}.backfill" in line
    backfilled = await read_all(f"{prefix}.backfill", expect=200)
    assert sorted(set(trace_ids(backfilled))) == sorted(trace_id(n) for n in range(1, 201))


async def test_a_rolling_restart_of_every_broker_loses_no_trace(tmp_path: Path) -> None:
    prefix = f"cs-{uuid.uuid4().hex[:8]}"
    spans = f"{prefix}.spans"
    total = 2000
    sidecar = await cluster_sidecar(
        prefix, tmp_path, extra={"kafka": {"delivery": {"operator_wait_s": 600}}}
    )
    with sidecar:
        restarting = True
        during = 0

        async def feed() -> None:
            # A steady trickle while brokers restart (10 s to 30 s each, by the
            # machine's load), then the rest at once.
            nonlocal during
            for start in range(1, total + 1, 10):
                await produce(spans, records(range(start, min(start + 10, total + 1))))
                if restarting:
                    during = min(start + 9, total)
                    await asyncio.sleep(0.5)

        feeding = asyncio.create_task(feed())
        for broker in cluster().broker_ids:
            await restart_broker(broker)
        restarting = False
        await feeding
        found = await read_all(f"{spans}.verdicts", expect=total, within=240)
        ids = trace_ids(found)
        expected = {trace_id(n) for n in range(1, total + 1)}
        lost = expected - set(ids)
        duplicates = len(ids) - len(set(ids))
        # A duplicate is the same verdict again: the same key as the first.
        keys: dict[str, set[bytes]] = {}
        for record, tid in zip(found, ids, strict=True):
            keys.setdefault(tid, set()).add(bytes(record.key or b""))
        print(
            f"rolling restart: {total} traces ({during} produced during the restarts), "
            f"{len(ids)} verdicts, {len(set(ids))} distinct, "
            f"{duplicates} duplicates, {len(lost)} lost; "
            f"dead letters {sidecar.metric('sidecar_dead_letters_total')}; "
            f"duplicate counter {sidecar.metric('sidecar_duplicate_verdicts_total')}; "
            f"most copies {max(Counter(ids).values())}"
        )
        assert not lost, sorted(lost)[:5]
        assert during >= 200, f"only {during} traces were produced during the restarts"
        assert all(len(k) == 1 for k in keys.values())
        await wait_for(lambda: sidecar.http("/readyz")[0] == 200, within=60)
        assert sidecar.terminate(timeout=60) == 0
    ends, committed = await ends_and_committed(spans, f"{prefix}.g")
    assert committed == ends
    assert sum(ends.values()) == total
