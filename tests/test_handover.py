"""The handover list (``sidecar.ingest.handover``) against its rule written plainly."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.ingest.handover import Handover, _key, _parse
from sidecar.model import DecideReason, Trace
from tests.builders import trace_id


class _Plain:
    """The rule as the module docstring states it: every entry read on every commit."""

    def __init__(self, keep_s: float, max_ids: int) -> None:
        self.keep_s, self.max_ids = keep_s, max_ids
        self.ours: dict[int, dict[bytes, tuple[int, float]]] = {}
        self.inherited: dict[int, dict[bytes, float]] = {}

    def decided(self, trace: Trace, now: float) -> None:
        if trace.reason is DecideReason.COMPLETE:
            return
        for partition, offset in trace.first_offsets.items():
            self.ours.setdefault(partition, {})[_key(trace.trace_id)] = (offset, now + self.keep_s)

    def received(self, partition: int, metadata: str, now: float) -> None:
        for key in _parse(metadata):
            self.inherited.setdefault(partition, {})[key] = now + self.keep_s

    def metadata(self, partition: int, offset: int, now: float) -> tuple[int, list[bytes]]:
        ours = {k: v for k, v in self.ours.get(partition, {}).items() if v[1] > now}
        alive = {k: t for k, t in self.inherited.get(partition, {}).items() if t > now}
        self.ours[partition], self.inherited[partition] = ours, alive
        inherited = list(alive)
        below = sorted((first, key) for key, (first, _) in ours.items() if first < offset)
        room = max(0, self.max_ids - len(inherited))
        if len(below) > room:
            offset = below[room][0]
            below = [(first, key) for first, key in below[:room] if first < offset]
        keys = dict.fromkeys([*inherited[: self.max_ids], *(key for _, key in below)])
        return offset, list(keys)


_STEP = st.tuples(
    st.sampled_from(["decided", "complete", "commit", "received", "wait"]),
    st.integers(1, 30),  # trace
    st.integers(0, 1),  # partition
    st.integers(0, 60),  # offset
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_STEP, max_size=60), st.integers(1, 6))
def test_the_handover_list_follows_its_rule(
    steps: list[tuple[str, int, int, int]], max_ids: int
) -> None:
    handover, plain = Handover(keep_s=10.0, max_ids=max_ids), _Plain(10.0, max_ids)
    previous = Handover(keep_s=10.0, max_ids=8)  # a previous owner, to be read from
    now = 0.0
    for kind, trace, partition, offset in steps:
        if kind in ("decided", "complete"):
            reason = DecideReason.MAX_AGE if kind == "decided" else DecideReason.COMPLETE
            early = Trace(trace_id(trace), (), reason, first_offsets={partition: offset})
            handover.decided(early, now)
            plain.decided(early, now)
            previous.decided(
                Trace(
                    trace_id(trace + 100),
                    (),
                    DecideReason.EVICTED,
                    first_offsets={partition: offset},
                ),
                now,
            )
        elif kind == "received":
            _, metadata = previous.metadata(partition, 61, now)
            handover.received(partition, metadata, now)
            plain.received(partition, metadata, now)
        elif kind == "wait":
            now += offset / 10
        else:
            committed, metadata = handover.metadata(partition, offset, now)
            expected_offset, expected_keys = plain.metadata(partition, offset, now)
            assert (committed, _parse(metadata)) == (expected_offset, expected_keys)
