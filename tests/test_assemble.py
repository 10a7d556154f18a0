from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.evaluate.conventions import ROOT_SPANS, RootSpans
from sidecar.ingest import assemble
from sidecar.ingest.assemble import Assembler
from sidecar.model import DecideReason, LogRecord, RecordRef, Span, SpanKind, Trace
from tests.builders import numbered_span, trace_id

COMPLETE, MAX_AGE = DecideReason.COMPLETE, DecideReason.MAX_AGE


ROOT = numbered_span(1, name="invoke_agent refund-agent", kind=SpanKind.SERVER)
CHILD = numbered_span(2, parent=1, name="chat")
ORPHAN = numbered_span(3, parent=99, name="execute_tool lookup_order")

Steps = Sequence[tuple[float, Sequence[Span]]]


def feed(assembler: Assembler, steps: Steps) -> list[Trace]:
    early: list[Trace] = []
    for now, spans in steps:
        early += assembler.add(spans, now)
    return early


COMPLETION_CASES = [
    pytest.param([(0, [ROOT])], 4.9, [], id="root-not-quiet-yet"),
    pytest.param([(0, [ROOT])], 5.0, [COMPLETE], id="root-quiet-for-decision-wait"),
    pytest.param([(0, [ROOT, CHILD])], 5.0, [COMPLETE], id="root-and-child"),
    pytest.param([(0, [CHILD]), (2, [ROOT])], 6.9, [], id="root-last-restarts-wait"),
    pytest.param([(0, [ROOT]), (3, [CHILD])], 5.0, [], id="new-span-restarts-wait"),
    pytest.param([(0, [ROOT]), (3, [CHILD])], 8.0, [COMPLETE], id="complete-after-late-child"),
    pytest.param([(0, [CHILD])], 5.0, [], id="no-root-keeps-waiting"),
    pytest.param([(0, [CHILD])], 119.9, [], id="no-root-before-max-age"),
    pytest.param([(0, [CHILD])], 120.0, [MAX_AGE], id="no-root-decided-at-max-age"),
    pytest.param(
        [(t, [numbered_span(10 + int(t), parent=1)]) for t in range(0, 121, 4)] + [(0, [ROOT])],
        120.0,
        [MAX_AGE],
        id="busy-trace-decided-at-max-age",
    ),
    pytest.param(
        [(0, [numbered_span(1, parent=99, name="invoke_agent refund-agent")])],
        5.0,
        [COMPLETE],
        id="remote-parent-invoke-agent-name-is-root",
    ),
    pytest.param(
        [
            (
                0,
                [
                    numbered_span(
                        1,
                        parent=99,
                        name="agent run",
                        kind=SpanKind.SERVER,
                        attrs={"gen_ai.operation.name": "invoke_agent"},
                    )
                ],
            )
        ],
        5.0,
        [COMPLETE],
        id="remote-parent-invoke-agent-operation-is-root",
    ),
    pytest.param(
        [(0, [numbered_span(1, parent=99, name="invoke_workflow checkout")])],
        5.0,
        [COMPLETE],
        id="remote-parent-adk-workflow-is-root",
    ),
    pytest.param(
        [(0, [numbered_span(1, parent=99, name="invocation")])],
        5.0,
        [COMPLETE],
        id="remote-parent-adk-v1-invocation-is-root",
    ),
    pytest.param(
        [(0, [numbered_span(1, parent=99, name="invoke_agent x", kind=SpanKind.CLIENT)])],
        5.0,
        [],
        id="remote-parent-client-span-is-not-root",
    ),
    pytest.param([(0, [ORPHAN])], 5.0, [], id="remote-parent-tool-span-is-not-root"),
    pytest.param(
        [
            (
                0,
                [
                    numbered_span(2, parent=1, name="invoke_agent sub"),
                    numbered_span(1, parent=99, name="invoke_agent top"),
                ],
            )
        ],
        5.0,
        [COMPLETE],
        id="nested-agent-parent-present-still-complete",
    ),
]


@pytest.mark.parametrize(("steps", "at", "expected"), COMPLETION_CASES)
def test_when_a_trace_is_decided(steps: Steps, at: float, expected: list[DecideReason]) -> None:
    assembler = Assembler(decision_wait=5.0, max_trace_age=120.0)
    assert feed(assembler, steps) == []
    assert [t.reason for t in assembler.due(at)] == expected
    assert assembler.open_traces == (0 if expected else 1)


ROOT_SPANS_CASES = [
    pytest.param(RootSpans(name_prefixes=("handle",)), "handle order", {}, True, id="by-name"),
    pytest.param(
        RootSpans(attributes=(("agent.kind", "root"),)),
        "anything",
        {"agent.kind": "root"},
        True,
        id="by-attribute",
    ),
    pytest.param(RootSpans(name_prefixes=("handle",)), "invoke_agent a", {}, False, id="other"),
    pytest.param(RootSpans(), "invoke_agent a", {}, False, id="none-declared"),
]


@pytest.mark.parametrize(("root_spans", "name", "attrs", "is_root"), ROOT_SPANS_CASES)
def test_root_spans_under_a_remote_parent_are_taken_as_data(
    root_spans: RootSpans, name: str, attrs: dict[str, Any], is_root: bool
) -> None:
    assembler = Assembler(decision_wait=5.0, root_spans=root_spans)
    assembler.add([numbered_span(1, parent=99, name=name, attrs=attrs)], 0.0)
    assert [t.has_root for t in assembler.due(5.0)] == ([True] if is_root else [])


def test_the_default_root_spans_are_the_conventions() -> None:
    assert Assembler().root_spans == ROOT_SPANS


def test_complete_trace_has_all_spans_sorted_and_flags() -> None:
    assembler = Assembler(decision_wait=5.0)
    assembler.add([CHILD], 0)
    assembler.add([ROOT], 1)
    (trace,) = assembler.due(6)
    assert trace == Trace(
        trace_id=trace_id(1),
        spans=(ROOT, CHILD),
        reason=COMPLETE,
        truncated=False,
        has_root=True,
        first_offsets={},
    )
    assert assembler.stats.orphan_traces == 0


def test_trace_without_root_is_decided_at_max_age_as_orphan() -> None:
    assembler = Assembler(decision_wait=5.0, max_trace_age=120.0)
    assembler.add([ORPHAN], 10)
    assert assembler.due(129.9) == []
    (trace,) = assembler.due(130)
    assert (trace.reason, trace.has_root, trace.truncated) == (MAX_AGE, False, False)
    assert assembler.stats.orphan_traces == 1


def test_due_decides_several_traces_in_one_tick() -> None:
    assembler = Assembler(decision_wait=5.0, max_trace_age=120.0)
    assembler.add([numbered_span(1, trace=2, parent=9)], 1)  # orphan, aged at 121
    assembler.add([numbered_span(1, trace=1)], 2)  # root, quiet since 7
    assembler.add([numbered_span(1, trace=3)], 118)  # root, quiet at 123
    decided = {t.trace_id: t.reason for t in assembler.due(121)}
    assert decided == {trace_id(1): COMPLETE, trace_id(2): MAX_AGE}
    assert [t.trace_id for t in assembler.due(123)] == [trace_id(3)]


def test_a_quiet_trace_without_root_waits_for_its_root_or_its_age() -> None:
    assembler = Assembler(decision_wait=5.0, max_trace_age=120.0)
    assembler.add([numbered_span(2, trace=1, parent=1)], 0)  # its root comes later
    assembler.add([numbered_span(2, trace=2, parent=1)], 0)  # its root never comes
    assembler.add([numbered_span(1, trace=3)], 1)
    assert [t.trace_id for t in assembler.due(6)] == [trace_id(3)]
    assert assembler.due(7) == []
    assembler.add([numbered_span(1, trace=1)], 8)
    assert assembler.due(12.9) == []
    (rooted,) = assembler.due(13)
    assert (rooted.trace_id, rooted.reason, len(rooted.spans)) == (trace_id(1), COMPLETE, 2)
    (aged,) = assembler.due(120)
    assert (aged.trace_id, aged.reason) == (trace_id(2), MAX_AGE)
    assert assembler.open_traces == 0


def test_late_spans_after_decision_are_counted_and_ignored() -> None:
    assembler = Assembler(decision_wait=5.0)
    assembler.add([ROOT], 0)
    assert len(assembler.due(5)) == 1
    assert assembler.add([CHILD, numbered_span(4, parent=1)], 6) == []
    assert assembler.stats.late_spans == 2
    assert assembler.open_traces == 0
    assert assembler.due(1000) == []


def test_decided_ids_are_remembered_in_a_bounded_lru() -> None:
    assembler = Assembler(decision_wait=0.0, decided_memory=1)
    assembler.add([numbered_span(1, trace=1)], 0)
    assembler.add([numbered_span(1, trace=2)], 0)
    assert len(assembler.due(0)) == 2
    # Trace 1 fell out of the decided memory: its late span opens a new trace.
    assembler.add([numbered_span(5, trace=1, parent=1)], 1)
    assembler.add([numbered_span(5, trace=2, parent=1)], 1)
    assert assembler.open_traces == 1
    assert assembler.stats.late_spans == 1


def test_max_open_traces_decides_the_oldest_early() -> None:
    assembler = Assembler(max_open_traces=2)
    assert assembler.add([numbered_span(1, trace=1, parent=9)], 0) == []
    assert assembler.add([numbered_span(1, trace=2)], 1) == []
    assert assembler.add([numbered_span(2, trace=1, parent=9)], 2) == []  # known trace: no eviction
    (evicted,) = assembler.add([numbered_span(1, trace=3)], 3)
    assert (evicted.trace_id, evicted.reason, evicted.truncated) == (
        trace_id(1),
        DecideReason.EVICTED,
        True,
    )
    assert len(evicted.spans) == 2
    assert evicted.has_root is False
    assert assembler.stats.evicted_open_traces == 1
    assert assembler.stats.orphan_traces == 1
    assert assembler.open_traces == 2
    assembler.add([numbered_span(3, trace=1, parent=9)], 4)
    assert assembler.stats.late_spans == 1


def test_max_spans_per_trace_decides_at_the_bound() -> None:
    assembler = Assembler(max_spans_per_trace=3)
    assert assembler.add([ROOT, CHILD], 0) == []
    (trace,) = assembler.add([numbered_span(3, parent=1), numbered_span(4, parent=1)], 1)
    assert (trace.reason, trace.truncated, len(trace.spans)) == (
        DecideReason.SPAN_LIMIT,
        True,
        3,
    )
    assert assembler.stats.span_limit_hits == 1
    assert assembler.stats.late_spans == 1  # span 4 came after the decision
    assert assembler.open_traces == 0


def test_duplicate_span_ids_are_ignored_and_do_not_restart_the_wait() -> None:
    assembler = Assembler(decision_wait=5.0)
    assembler.add([ROOT, CHILD], 0)
    assembler.add([ROOT, CHILD], 4)  # redelivered record
    (trace,) = assembler.due(5)
    assert trace.spans == (ROOT, CHILD)
    assert assembler.stats.spans == 4


def test_drain_decides_everything() -> None:
    assembler = Assembler()
    assembler.add([numbered_span(1, trace=1)], 0, RecordRef(0, 10))
    assembler.add([numbered_span(1, trace=2, parent=9)], 0, RecordRef(0, 11))
    decided = assembler.drain(DecideReason.FLUSH)
    assert {(t.trace_id, t.reason, t.has_root) for t in decided} == {
        (trace_id(1), DecideReason.FLUSH, True),
        (trace_id(2), DecideReason.FLUSH, False),
    }
    assert assembler.open_traces == 0
    assert assembler.held_offsets() == {}


def test_drain_with_require_root_keeps_rootless_traces_holding_their_offsets() -> None:
    assembler = Assembler()
    assembler.add([numbered_span(1, trace=1)], 0, RecordRef(0, 10))
    assembler.add([numbered_span(1, trace=2, parent=9)], 0, RecordRef(0, 11))
    assembler.add([numbered_span(1, trace=3, parent=9)], 0, RecordRef(1, 4))

    decided = assembler.drain(DecideReason.SHUTDOWN, require_root=True)

    assert [(t.trace_id, t.reason) for t in decided] == [(trace_id(1), DecideReason.SHUTDOWN)]
    # The rootless traces were not decided: their records must not be committed.
    assert assembler.held_offsets() == {0: 11, 1: 4}
    assert assembler.stats.orphan_traces == 0


HELD_CASES = [
    pytest.param([], {}, id="nothing-open"),
    pytest.param([(1, 0, 5)], {0: 5}, id="one-trace"),
    pytest.param([(1, 0, 5), (1, 0, 9)], {0: 5}, id="later-record-same-trace"),
    pytest.param([(1, 0, 9), (1, 0, 5)], {0: 5}, id="lower-offset-arrives-second"),
    pytest.param([(1, 0, 7), (2, 0, 3), (3, 0, 8)], {0: 3}, id="lowest-across-traces"),
    pytest.param([(1, 0, 7), (1, 1, 2), (2, 1, 1)], {0: 7, 1: 1}, id="per-partition"),
]


@pytest.mark.parametrize(("adds", "expected"), HELD_CASES)
def test_held_offsets_is_lowest_offset_per_partition(
    adds: list[tuple[int, int, int]], expected: dict[int, int]
) -> None:
    assembler = Assembler()
    for n, (trace, partition, offset) in enumerate(adds):
        assembler.add(
            [numbered_span(n + 1, trace=trace, parent=99)], 0, RecordRef(partition, offset)
        )
    assert assembler.held_offsets() == expected


# One step of a buffer's life: spans or a log of a trace read at (partition, offset),
# time passing (traces decided), a partition revoked.
_STEPS = st.one_of(
    st.tuples(st.just("span"), st.integers(1, 12), st.integers(0, 2), st.integers(0, 40)),
    st.tuples(st.just("log"), st.integers(1, 12), st.integers(0, 2), st.integers(0, 40)),
    st.tuples(st.just("wait"), st.integers(1, 12), st.integers(0, 2), st.integers(0, 40)),
    st.tuples(st.just("revoke"), st.integers(1, 12), st.integers(0, 2), st.integers(0, 40)),
)


def _scanned(entries: Iterable[dict[int, int] | None]) -> dict[int, int]:
    held: dict[int, int] = {}
    for offsets in entries:
        for partition, offset in (offsets or {}).items():
            held[partition] = min(offset, held.get(partition, offset))
    return held


@settings(max_examples=150, deadline=None)
@given(st.lists(_STEPS, max_size=80), st.booleans())
def test_the_held_offsets_kept_as_traces_come_and_go_are_a_scan_of_the_open_traces(
    steps: list[tuple[str, int, int, int]], remade_often: bool
) -> None:
    # remade_often: the heaps are made again from the open traces at almost every read.
    with mock.patch.object(assemble, "_REMAKE_FLOOR", 0 if remade_often else 1024):
        _held_offsets_follow_the_open_traces(steps)


def _held_offsets_follow_the_open_traces(steps: list[tuple[str, int, int, int]]) -> None:
    assembler = Assembler(decision_wait=5.0, max_trace_age=30.0, max_open_traces=6)
    now = 0.0
    for kind, trace, partition, offset in steps:
        ref = RecordRef(partition, offset)
        if kind == "span":
            root = trace % 3 == 0  # some traces have their root and are decided when quiet
            span = numbered_span(1 if root else 2, trace=trace, parent=None if root else 1)
            assembler.add([span], now, ref)
        elif kind == "log":
            assembler.add_logs([LogRecord(trace_id=trace_id(trace), span_id=None)], now, ref)
        elif kind == "wait":
            now += offset / 4
            assembler.due(now)
        else:
            assembler.drop_partitions({partition})
        open_entries = list(assembler._open.values())
        assert assembler.held_offsets() == _scanned(e.first_offsets for e in open_entries)
        assert assembler.held_log_offsets() == _scanned(e.first_log_offsets for e in open_entries)


def test_the_held_offsets_stay_bounded_when_nobody_reads_them() -> None:
    # A reader that never commits (backfill) still gets its traces decided: the heaps
    # are made again on a push once stale entries outnumber the open traces.
    assembler = Assembler(decision_wait=0.0, max_trace_age=1e9)
    for n in range(1, 20_001):
        assembler.add([numbered_span(1, trace=n)], float(n), RecordRef(n % 3, n))
        assembler.due(float(n))
    held = assembler._held_spans._heaps
    assert sum(map(len, held.values())) <= 4 * assemble._REMAKE_FLOOR + 1
    assert assembler.held_offsets() == {}


def test_decided_traces_release_their_offsets_and_carry_them() -> None:
    assembler = Assembler(decision_wait=5.0)
    assembler.add([numbered_span(1, trace=1)], 0, RecordRef(0, 3))
    assembler.add([numbered_span(2, trace=1, parent=1)], 0, RecordRef(1, 8))
    assembler.add([numbered_span(1, trace=2, parent=9)], 0, RecordRef(0, 4))
    (trace,) = assembler.due(5)
    assert trace.first_offsets == {0: 3, 1: 8}
    assert assembler.held_offsets() == {0: 4}


def test_drop_partitions_forgets_traces_fed_by_them() -> None:
    assembler = Assembler()
    assembler.add([numbered_span(1, trace=1, parent=9)], 0, RecordRef(0, 1))
    assembler.add([numbered_span(1, trace=2, parent=9)], 0, RecordRef(1, 1))
    assembler.add([numbered_span(1, trace=3, parent=9)], 0, RecordRef(2, 1))

    dropped = assembler.drop_partitions([1, 2])

    assert sorted(dropped) == [trace_id(2), trace_id(3)]
    assert assembler.held_offsets() == {0: 1}
    assert assembler.stats.dropped_revoked == 2
    # Dropped traces were never decided: if their spans come back, they are new, not late.
    assembler.add([numbered_span(1, trace=2, parent=9)], 1, RecordRef(1, 1))
    assert assembler.stats.late_spans == 0
    assert assembler.open_traces == 2


@pytest.mark.parametrize(
    "bounds",
    [
        pytest.param({"max_open_traces": 0}, id="max-open-traces"),
        pytest.param({"max_spans_per_trace": 0}, id="max-spans-per-trace"),
        pytest.param({"decided_memory": 0}, id="decided-memory"),
    ],
)
def test_bounds_must_be_positive(bounds: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Assembler(**bounds)
