from __future__ import annotations

import pytest

from sidecar.ingest.offsets import OffsetTracker

COMMITTABLE_CASES = [
    pytest.param([], {}, [], {}, id="nothing-consumed"),
    pytest.param([(0, 5)], {}, [], {0: 6}, id="next-offset-when-nothing-held"),
    pytest.param([(0, 5), (0, 3)], {}, [], {0: 6}, id="next-offset-never-goes-back"),
    pytest.param([(0, 5)], {0: 3}, [], {0: 3}, id="assembling-trace-holds"),
    pytest.param([(0, 5)], {}, [{0: 2}], {0: 2}, id="in-flight-trace-holds"),
    pytest.param([(0, 9)], {0: 4}, [{0: 2}, {0: 6}], {0: 2}, id="lowest-of-all-holds"),
    pytest.param([(0, 9)], {0: 4}, [{0: 6}], {0: 4}, id="assembling-lower-than-in-flight"),
    pytest.param(
        [(0, 9), (1, 3), (2, 7)],
        {1: 1},
        [{2: 5, 0: 8}],
        {0: 8, 1: 1, 2: 5},
        id="partitions-independent",
    ),
    pytest.param([(0, 9)], {7: 1}, [{8: 1}], {0: 10}, id="holds-on-unconsumed-partitions-ignored"),
]


@pytest.mark.parametrize(("consumed", "assembling", "holds", "expected"), COMMITTABLE_CASES)
def test_committable_is_min_of_next_and_holds(
    consumed: list[tuple[int, int]],
    assembling: dict[int, int],
    holds: list[dict[int, int]],
    expected: dict[int, int],
) -> None:
    tracker = OffsetTracker()
    for partition, offset in consumed:
        tracker.consumed(partition, offset)
    for first_offsets in holds:
        tracker.hold(first_offsets)
    assert tracker.committable(assembling) == expected


def test_release_lets_the_offset_advance() -> None:
    tracker = OffsetTracker()
    tracker.consumed(0, 9)
    low = tracker.hold({0: 2})
    high = tracker.hold({0: 5, 1: 0})
    tracker.consumed(1, 0)
    assert tracker.in_flight() == 2
    assert tracker.committable({}) == {0: 2, 1: 0}

    tracker.release(low)
    assert tracker.committable({}) == {0: 5, 1: 0}

    tracker.release(high)
    assert tracker.committable({}) == {0: 10, 1: 1}
    assert tracker.in_flight() == 0


def test_release_is_idempotent() -> None:
    tracker = OffsetTracker()
    tracker.consumed(0, 4)
    token = tracker.hold({0: 1})
    tracker.release(token)
    tracker.release(token)
    assert tracker.committable({}) == {0: 5}


def test_tokens_are_distinct_for_equal_holds() -> None:
    tracker = OffsetTracker()
    tracker.consumed(0, 4)
    first, second = tracker.hold({0: 1}), tracker.hold({0: 1})
    assert first != second
    tracker.release(first)
    assert tracker.committable({}) == {0: 1}


def test_drop_partitions_forgets_their_progress_and_holds() -> None:
    tracker = OffsetTracker()
    for partition in (0, 1, 2):
        tracker.consumed(partition, 10)
    token = tracker.hold({0: 3, 1: 4})
    tracker.hold({2: 5})

    tracker.drop_partitions([1, 2])

    assert tracker.committable({}) == {0: 3}
    assert tracker.next_offsets() == {0: 11}
    tracker.release(token)  # a trace that finishes after the revoke is harmless
    assert tracker.committable({}) == {0: 11}
    assert tracker.in_flight() == 0
