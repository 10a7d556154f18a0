"""The service's commit rule, rebalance, back-pressure and shutdown order, in memory.

``Service`` runs on the in-memory broker (``tests.fakes``) and a
manual clock: time moves only when a test says so, and ``sleep`` (verdict send
retries, the bounded shutdown wait) waits for it. Tests step the loop with
``Service.step`` or run the real ``Service.run`` until the source is idle. The
same behaviour on a real broker is in ``tests/integration/test_kafka_*.py``.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta

import pytest

from tests.builders import trace_id
from tests.fakes import MemoryTopic
from tests.service_rig import (
    INTERVAL,
    WAIT,
    make_rig,
    run_until_idle_then_stop,
    spans,
    started,
)

# -- the commit rule ---------------------------------------------------------------------


async def test_commit_moves_to_the_next_offset_once_nothing_is_held() -> None:
    rig = make_rig()
    rig.topic.append(0, spans(1))
    rig.topic.append(0, spans(2))
    rig.topic.append(1, spans(3))
    async with started(rig):
        await rig.round()
        assert rig.source.commits == []  # the commit interval has not passed

        await rig.round(WAIT)
        # Decided and dispatched in this step: in flight until acknowledged, so still held.
        assert rig.source.commits == [{0: 0, 1: 0}]
        assert rig.sent() == [trace_id(1), trace_id(2), trace_id(3)]

        await rig.round(INTERVAL)
        assert rig.source.commits == [{0: 0, 1: 0}, {0: 2, 1: 1}]
        assert rig.topic.committed == {0: 2, 1: 1}

        await rig.round(INTERVAL)
        assert len(rig.source.commits) == 2  # unchanged offsets are not committed again


async def test_a_trace_over_several_records_holds_its_lowest_offset_per_partition() -> None:
    rig = make_rig()
    rig.topic.append(0, spans(1, root=False))  # trace 1 starts here, without its root
    rig.topic.append(0, spans(2))
    rig.topic.append(0, spans(3))
    rig.topic.append(1, spans(4))
    async with started(rig):
        await rig.round()
        await rig.round(WAIT)
        await rig.round(INTERVAL)
        assert rig.sent() == [trace_id(2), trace_id(3), trace_id(4)]
        assert rig.topic.committed == {0: 0, 1: 1}  # trace 1 is still assembling

        rig.topic.append(1, spans(1))  # its root, on another partition
        await rig.round()
        await rig.round(INTERVAL)
        assert rig.topic.committed == {0: 0, 1: 1}  # held on both partitions now

        await rig.round(WAIT)
        await rig.round(INTERVAL)
        assert rig.sent() == [trace_id(2), trace_id(3), trace_id(4), trace_id(1)]
        assert rig.topic.committed == {0: 3, 1: 2}
        assert rig.metric("sidecar_spans_total") == 5


async def test_a_refused_verdict_keeps_its_offsets_held_until_a_retry_is_acknowledged() -> None:
    rig = make_rig()
    rig.topic.append(0, spans(1))
    rig.topic.append(0, spans(2))
    rig.sink.fail(2)
    async with started(rig):
        await rig.round()
        await rig.round(WAIT)
        # Trace 1's record was refused, trace 2's too (one batch); both retry after 0.5 s.
        assert rig.sink.refused == 2
        assert rig.service.in_flight == 2
        await rig.round(INTERVAL)
        assert rig.topic.committed == {0: 0}

        rig.sink.fail(1)
        await rig.round(0.5 - INTERVAL)  # the first retries: trace 1 refused again, 2 goes
        assert rig.sent() == [trace_id(2)]
        assert rig.service.in_flight == 1
        assert rig.topic.committed == {0: 0}  # trace 2 is done, but trace 1 holds offset 0

        await rig.round(1.0)  # trace 1's second retry, after a doubled delay
        assert rig.sent() == [trace_id(2), trace_id(1)]
        assert rig.clock.slept == [0.5, 1.0]  # the batch backs off once per attempt
        await rig.round(INTERVAL)
        assert rig.topic.committed == {0: 2}
        assert rig.metric("sidecar_internal_errors_total", stage="emit") == 3
        assert rig.metric("sidecar_cases_total", outcome="acceptable") == 2


# -- rebalance ---------------------------------------------------------------------------


async def test_revoke_commits_then_leaves_open_traces_to_the_new_owner() -> None:
    topic = MemoryTopic(partitions=2)
    topic.append(0, spans(1))
    topic.append(0, spans(2, root=False))  # trace 2 is open when partition 0 goes
    topic.append(1, spans(3, root=False))  # trace 3 stays with the first owner
    first, second = make_rig(topic), make_rig(topic, partitions=set())
    async with started(first), started(second):
        await first.round()
        await first.round(WAIT)
        assert first.sent() == [trace_id(1)]
        assert first.service.assembler.open_traces == 2
        assert first.metric("sidecar_consumer_lag", partition="0") == 0

        await first.source.revoke({0})
        assert first.journal[-2:] == ["source.revoked [0]", "source.commit {0: 1}"]
        assert topic.committed == {0: 1, 1: 0}
        assert first.service.assembler.open_traces == 1  # trace 2 dropped, trace 3 kept
        assert first.metric("sidecar_consumer_lag", partition="0") is None
        assert first.source.assigned() == {1}

        topic.append(0, spans(2))  # trace 2's root arrives after the rebalance
        await second.source.assign({0})
        assert second.source.positions == {0: 1}  # from the committed offset
        await second.round()
        await second.round(WAIT)
        await first.round(WAIT)
        assert second.sent() == [trace_id(2)]  # both its records re-read, trace 1 not
        assert second.metric("sidecar_kafka_records_total", result="ok") == 2
        assert first.sent() == [trace_id(1)]
        assert first.metric("sidecar_kafka_records_total", result="ok") == 3

        await second.round(INTERVAL)
        assert topic.committed == {0: 3, 1: 0}


# -- back-pressure -----------------------------------------------------------------------


async def test_in_flight_bound_pauses_partitions_and_resumes_at_half() -> None:
    rig = make_rig(max_inflight_traces=4)
    for n in (1, 2, 3, 4, 5):
        rig.topic.append(0, spans(n))
    rig.sink.fail(4)
    async with started(rig):
        await rig.round()
        await rig.round(WAIT)
        # Five traces are due, four may be in flight: the fifth waits in the assembler.
        assert rig.service.in_flight == 4
        assert rig.service.assembler.open_traces == 1
        assert not rig.source.paused

        await rig.round()
        assert rig.source.paused
        assert rig.metric("sidecar_judge_queue_depth") == 4
        rig.topic.append(0, spans(6))
        await rig.round()
        assert rig.source.positions == {0: 5, 1: 0}  # trace 6 stays unread
        assert rig.metric("sidecar_kafka_records_total", result="ok") == 5

        rig.sink.fail(3)
        # One of four retries goes through; that room goes to trace 5, which is sent at
        # once: 3 left in flight, above 4 // 2.
        await rig.round(0.5)
        assert rig.service.in_flight == 3
        assert rig.service.assembler.open_traces == 0
        assert rig.source.paused

        rig.sink.fail(0)
        await rig.round(1.0)  # the rest go through; the same step resumes and reads
        assert rig.service.in_flight == 0
        assert not rig.source.paused
        assert rig.metric("sidecar_kafka_records_total", result="ok") == 6
        await rig.round(WAIT)
        assert sorted(rig.sent()) == [trace_id(n) for n in (1, 2, 3, 4, 5, 6)]


# -- dead letters ------------------------------------------------------------------------


async def test_undecodable_records_are_dead_lettered_and_their_offsets_committed() -> None:
    rig = make_rig()
    rig.topic.append(0, b"{not json", key=b"k")
    rig.topic.append(0, None)
    rig.topic.append(0, spans(1))
    rig.topic.append(1, b"\x0a\xff\xff")  # truncated protobuf
    async with started(rig):
        await rig.round()
        dead = [(r.partition, r.offset, reason) for r, reason, _ in rig.sink.dead_letters]
        assert dead == [(0, 0, "bad_json"), (0, 1, "empty"), (1, 0, "bad_protobuf")]
        assert rig.metric("sidecar_kafka_records_total", result="dead_letter") == 3
        assert rig.metric("sidecar_dead_letters_total", reason="bad_json") == 1

        await rig.round(INTERVAL)
        assert rig.topic.committed == {0: 2, 1: 1}  # past the dead letters, up to trace 1
        await rig.round(WAIT)
        await rig.round(INTERVAL)
        assert rig.topic.committed == {0: 3, 1: 1}


# -- shutdown ----------------------------------------------------------------------------


async def test_shutdown_order_stop_fetching_decide_wait_commit_then_close() -> None:
    rig = make_rig()
    rig.topic.append(0, spans(1))  # root ended, decision_wait not over: decided at shutdown
    rig.topic.append(0, spans(2, root=False))  # no root: not decided, its offset stays held
    rig.labels.push(b"{not a label")

    await run_until_idle_then_stop(rig)

    after_stop = rig.journal[rig.journal.index("stop") :]
    assert after_stop == [
        "stop",
        "sink.verdict " + trace_id(1),
        "source.commit {0: 1}",
        "labels.stop",
        "source.stop",
        "sink.stop",
        "spans.flush",
    ]
    assert rig.metric("sidecar_traces_decided_total", reason="shutdown") == 1
    assert rig.topic.committed == {0: 1}
    assert rig.labels.commits == 1
    assert rig.metric("sidecar_human_labels_unmatched_total", reason="malformed") == 1


async def test_shutdown_waits_for_in_flight_traces_only_until_the_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig = make_rig(shutdown_timeout_s=20.0)
    rig.topic.append(0, spans(1))
    rig.sink.fail(1_000)  # never acknowledged

    with caplog.at_level(logging.WARNING, logger="sidecar.engine.replica"):
        await run_until_idle_then_stop(rig, advance=20.0)

    after_stop = rig.journal[rig.journal.index("stop") :]
    assert after_stop == [
        "stop",
        "source.commit {0: 0}",
        "labels.stop",
        "source.stop",
        "sink.stop",
        "spans.flush",
    ]
    assert rig.sent() == []
    assert rig.topic.committed == {0: 0}  # the next owner reads trace 1 again
    assert "1 traces still in flight were not committed" in caplog.text


# -- what the verdict record says of time --------------------------------------------------


async def test_a_verdict_record_says_when_the_trace_ran_and_when_it_was_decided() -> None:
    rig = make_rig()
    rig.topic.append(0, spans(1))
    before = datetime.now(UTC)
    async with started(rig):
        await rig.round()
        await rig.round(WAIT)
    after = datetime.now(UTC)
    ((_, payload),) = rig.sink.verdicts
    record = json.loads(payload)
    # The root span ran from 1000 to 2000 ns after the epoch; microseconds are cut.
    assert (record["trace_start"], record["trace_end"]) == (
        "1970-01-01T00:00:00.000001Z",
        "1970-01-01T00:00:00.000002Z",
    )
    # Decided by the service's wall clock when it emitted the verdict.
    decided = datetime.fromisoformat(record["decided_at"])
    assert before - timedelta(microseconds=1) <= decided <= after
