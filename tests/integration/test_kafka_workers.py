"""``sidecar run --workers 2`` on the real broker: one group, one metrics endpoint, exact counters.

- two worker processes join one consumer group and share the partitions;
- every trace gets its verdict, and the supervisor's ``/metrics`` sums the
  workers' counters exactly (cases counted = verdict records written, also
  across a worker killed and restarted);
- a worker killed with SIGKILL is started again (``sidecar_worker_restarts_total``),
  and traces produced meanwhile still get their verdicts;
- SIGTERM to the supervisor stops every worker and exits 0; so does losing the
  supervisor itself (its workers do not run on as orphans).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from tests.builders import trace_id
from tests.integration.harness import (
    SHOP_RUBRIC,
    consume_all,
    create_topics,
    produce,
    sidecar_on,
    verdicts_from,
    wait_for,
    write_rubric,
)
from tests.otlp_records import span_tree

pytestmark = [pytest.mark.kafka]


def records(numbers: range) -> list[tuple[bytes, bytes]]:
    return [
        (
            trace_id(n).encode(),
            span_tree(n, (1, None, "invoke_agent shop"), start_ns=1_000_000, end_ns=9_000_000),
        )
        for n in numbers
    ]


def children(pid: int) -> list[int]:
    """Child processes of ``pid`` (Linux /proc)."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


async def group_state(bootstrap: str, group: str) -> tuple[str, int, int]:
    """(state, members, members holding partitions) of a consumer group."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [response] = await admin.describe_consumer_groups([group])
        # groups: (error_code, group, state, protocol_type, protocol, members, ...);
        # members: (member_id, client_id, client_host, metadata, assignment)
        [entry] = response.groups
        members = entry[5]
        # An assignment with partitions is longer than an empty one's header.
        holding = sum(1 for member in members if len(member[4]) > 16)
        return entry[2], len(members), holding
    finally:
        await admin.close()


async def until_stable(bootstrap: str, group: str, members: int, within: float = 60) -> None:
    """Wait until the group is Stable with ``members`` members, each holding partitions."""
    deadline = time.monotonic() + within
    while (state := await group_state(bootstrap, group)) != ("Stable", members, members):
        assert time.monotonic() < deadline, f"group {group} not stable: {state}"
        await asyncio.sleep(0.3)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


async def test_two_workers_share_the_group_and_one_endpoint(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    topic = f"{topic_prefix}.spans"
    await create_topics(kafka_bootstrap, [topic], partitions=4)
    await create_topics(kafka_bootstrap, [f"{topic}.verdicts", f"{topic}.dlq"], partitions=2)
    group = f"{topic_prefix}.g"
    sidecar = sidecar_on(
        topic_prefix,
        tmp_path,
        bootstrap=kafka_bootstrap,
        rubrics_dir=write_rubric(tmp_path, "shop", SHOP_RUBRIC),
        extra={"workers": 2, "review": {"enabled": False}},
    )
    with sidecar:
        assert sidecar.proc is not None
        supervisor = sidecar.proc.pid
        workers = children(supervisor)
        assert len(workers) == 2, sidecar.log()
        # Both workers in one group, each with its share of the partitions.
        await until_stable(kafka_bootstrap, group, 2)

        await produce(kafka_bootstrap, topic, records(range(1, 201)))
        first = await consume_all(kafka_bootstrap, f"{topic}.verdicts", expect=200, settle=2.0)
        assert {v["trace_id"] for v in verdicts_from(first)} == {trace_id(n) for n in range(1, 201)}
        # Exact sums over the workers: one case counted per verdict record written (a
        # rebalance may re-read records, at-least-once, and then both counts grow alike).
        written = len(first)
        await wait_for(lambda: sidecar.metric("sidecar_cases_total") >= written, within=20)
        assert sidecar.metric("sidecar_cases_total") == written
        assert (
            sidecar.metric("sidecar_check_results_total", check="clean", outcome="PASS") == written
        )
        assert sidecar.http("/readyz")[0] == 200

        # One worker dies hard: the supervisor starts it again; nothing produced meanwhile is lost.
        os.kill(workers[0], signal.SIGKILL)
        await produce(kafka_bootstrap, topic, records(range(201, 301)))
        await wait_for(lambda: sidecar.metric("sidecar_worker_restarts_total") == 1, within=30)
        await wait_for(lambda: sidecar.http("/readyz")[0] == 200, within=60)
        every = await consume_all(
            kafka_bootstrap, f"{topic}.verdicts", expect=300, within=90, settle=2.0
        )
        assert {v["trace_id"] for v in verdicts_from(every)} == {trace_id(n) for n in range(1, 301)}
        # The killed worker's counts stay in the sum (its file outlives it).
        await wait_for(lambda: sidecar.metric("sidecar_cases_total") >= len(every), within=20)
        assert sidecar.metric("sidecar_cases_total") == len(every)

        replacement = [p for p in children(supervisor) if p not in workers]
        assert len(replacement) == 1
        assert sidecar.terminate(timeout=60) == 0
        assert not any(alive(p) for p in [*workers, *replacement])


async def test_workers_stop_when_the_supervisor_is_killed(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    topic = f"{topic_prefix}.spans"
    await create_topics(kafka_bootstrap, [topic, f"{topic}.verdicts", f"{topic}.dlq"])
    with sidecar_on(
        topic_prefix,
        tmp_path,
        bootstrap=kafka_bootstrap,
        rubrics_dir=write_rubric(tmp_path, "shop", SHOP_RUBRIC),
        extra={"workers": 2},
    ) as sidecar:
        assert sidecar.proc is not None
        workers = children(sidecar.proc.pid)
        assert len(workers) == 2
        sidecar.kill()
        deadline = time.monotonic() + 30
        while any(alive(p) for p in workers):
            assert time.monotonic() < deadline, "workers ran on without their supervisor"
            await asyncio.sleep(0.2)
