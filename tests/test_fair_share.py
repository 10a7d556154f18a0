"""A member started with others (``--workers``) reads only once it holds its share of partitions.

The wait is the sources' (``sidecar.adapters.workers.fair_share``); the in-memory source
runs it as the Kafka source does.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from tests.fakes import MemoryTopic
from tests.service_rig import make_rig


async def test_a_member_holding_every_partition_waits_for_the_rebalance() -> None:
    rig = make_rig(MemoryTopic(partitions=4))
    rig.source.members = 2
    start = asyncio.create_task(rig.service.start())
    await rig.clock.until_sleepers(1)
    rig.clock.advance(3.0)  # the group's next heartbeat is still to come
    await rig.clock.until_sleepers(1)
    assert not start.done()
    assert not rig.metric("sidecar_ready")

    await rig.source.revoke({2, 3})  # the other member is let in
    rig.clock.advance(0.05)
    await asyncio.wait_for(start, 1)
    assert rig.source.assigned() == {0, 1}
    assert "source.fetch" not in rig.journal  # nothing was read before
    await rig.service.close()


async def test_a_member_given_its_share_at_once_does_not_wait() -> None:
    rig = make_rig(MemoryTopic(partitions=4), partitions={1, 3})
    rig.source.members = 2
    await asyncio.wait_for(rig.service.start(), 1)
    assert rig.clock.slept == []
    await rig.service.close()


async def test_a_member_waits_for_its_first_assignment() -> None:
    rig = make_rig(MemoryTopic(partitions=4), partitions=set())
    rig.source.members = 3
    start = asyncio.create_task(rig.service.start())
    await rig.clock.until_sleepers(1)
    assert not start.done()  # holding none of 4 is not a share yet: no assignment came
    await rig.source.assign({0, 1})  # ceil(4 / 3) = 2
    rig.clock.advance(0.05)
    await asyncio.wait_for(start, 1)
    await rig.service.close()


async def test_without_a_rebalance_the_member_reads_what_it_holds_after_the_wait(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sidecar.adapters.workers")
    rig = make_rig(MemoryTopic(partitions=4))
    rig.source.members = 2
    start = asyncio.create_task(rig.service.start())
    for _ in range(10):
        await rig.clock.until_sleepers(1)
        rig.clock.advance(1.0)
    await asyncio.wait_for(start, 1)
    assert rig.source.assigned() == {0, 1, 2, 3}
    assert "did not spread its partitions over 2 members within 10s" in caplog.text
    await rig.service.close()


async def test_a_single_member_never_waits() -> None:
    rig = make_rig(MemoryTopic(partitions=4))
    await asyncio.wait_for(rig.service.start(), 1)
    assert rig.clock.slept == []
    await rig.service.close()
