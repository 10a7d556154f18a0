"""Whether the service's per-item work stays flat as its long-lived state grows.

A service runs for months: the trace buffer fills up to ``max_open_traces``,
drift streams accumulate over rubrics, checks and agent versions,
conversations stay open for their idle timeout. Work done per trace, per
verdict or per commit must not grow with that state. For each operation
below this benchmark times the same work with a small state and with a
production-sized one, in one process, and prints the ratio large / small:
about 1 means the operation does not scan the state.

- ``assembler_evict``: a new trace arriving at a full trace buffer (the
  oldest is decided to make room), then ``due`` (every engine step calls
  it); small 1,000 open traces, large 50,000;
- ``assembler_commit``: what a commit reads of the trace buffer (the lowest
  offset per partition its open traces still need, spans and logs), after
  a new trace took the place of the oldest; small 1,000 open traces over 12
  partitions, large 50,000;
- ``drift_verdict``: one verdict of four gated checks through the drift
  monitor (observe and settle), with 8 streams in all, and with 400 (100
  rubrics of 4 checks); the large state also holds an alarm waiting for its
  guard window;
- ``conversation_commit``: what a commit reads of the conversation store
  (held offsets), with 1,000 open conversations of 3 turns each, and with
  100,000; per conversation, so flat means linear in conversations and not
  in their turns (its turns are 3 in both).

    .venv/bin/python bench/bench_state.py [--repeats 5]

Medians of ``--repeats`` timings, each over many operations.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sidecar.conversation.store import ConversationStore  # noqa: E402
from sidecar.drift.attribute import DriftMonitor, DriftSettings, Observation  # noqa: E402
from sidecar.evaluate.rubric import ConversationSpec  # noqa: E402
from sidecar.ingest.assemble import Assembler  # noqa: E402
from sidecar.model import Outcome, RecordRef  # noqa: E402
from tests.builders import numbered_span  # noqa: E402
from tests.conversation_builders import turn_record  # noqa: E402


def _timed(setup: Callable[[], Callable[[], int]], repeats: int) -> float:
    """Median µs per operation: ``setup()`` builds the state and returns a run of operations."""
    figures = []
    for _ in range(repeats):
        run = setup()
        start = time.perf_counter()
        count = run()
        figures.append((time.perf_counter() - start) / count * 1e6)
    return statistics.median(figures)


def assembler_evict(open_traces: int) -> Callable[[], int]:
    assembler = Assembler(decision_wait=5.0, max_trace_age=1e9, max_open_traces=open_traces)
    for n in range(open_traces):
        assembler.add([numbered_span(2, trace=n + 1, parent=1)], 0.0)  # rootless: stays open
    arriving = [[numbered_span(2, trace=open_traces + n + 1, parent=1)] for n in range(20_000)]

    def run() -> int:
        for spans in arriving:
            assembler.add(spans, 1.0)
            assembler.due(1.0)
        return len(arriving)

    return run


def assembler_commit(open_traces: int) -> Callable[[], int]:
    assembler = Assembler(decision_wait=5.0, max_trace_age=1e9, max_open_traces=open_traces)
    for n in range(open_traces):
        span = numbered_span(2, trace=n + 1, parent=1)
        assembler.add([span], 0.0, RecordRef(n % 12, n))
    arriving = [
        (numbered_span(2, trace=open_traces + n + 1, parent=1), open_traces + n)
        for n in range(2_000)
    ]

    def run() -> int:
        for span, offset in arriving:
            assembler.add([span], 1.0, RecordRef(offset % 12, offset))  # evicts the oldest
            assembler.held_offsets()
            assembler.held_log_offsets()
        return len(arriving)

    return run


def drift_verdict(rubrics: int) -> Callable[[], int]:
    settings = DriftSettings(baseline=100, every=50, max_streams=1000)
    monitor = DriftMonitor(settings)
    for r in range(rubrics):
        checks = tuple(("check", f"c{k}", Outcome.PASS) for k in range(4))
        monitor.observe(Observation(0.0, f"r{r}", "trace", checks, agent_version="v1"))
    if rubrics > 2:
        # An alarm waiting for its guard window on another rubric's criterion.
        for i in range(2000):
            outcome = Outcome.PASS if i < 100 or i % 2 == 0 else Outcome.FAIL
            monitor.observe(
                Observation(float(i), "waiting", "trace", (("criterion", "c", outcome),))
            )
            if any(s.pending for s in monitor.streams.values()):
                break
    verdicts = [
        Observation(
            3000.0 + i,
            "r0",
            "trace",
            tuple(
                ("check", f"c{k}", Outcome.PASS if (i + k) % 3 else Outcome.FAIL) for k in range(4)
            ),
            agent_version="v1",
        )
        for i in range(20_000)
    ]

    def run() -> int:
        for o in verdicts:
            monitor.observe(o)
            monitor.settle(o.time)
        return len(verdicts)

    return run


def conversation_commit(conversations: int) -> Callable[[], int]:
    rubric = "support"
    spec = ConversationSpec(idle_timeout_s=1e9, max_turns=999, max_age_s=1e9)
    store = ConversationStore({rubric: spec}, max_open=conversations + 1)
    offset = 0
    for c in range(conversations):
        for n in range(3):
            offset += 1
            store.add(rubric, turn_record(n + 1, f"c{c}"), 0.0, RecordRef(c % 12, offset))

    def run() -> int:
        for _ in range(5):
            store.held_offsets()
        return 5 * conversations

    return run


OPERATIONS: dict[str, tuple[Callable[[int], Callable[[], int]], int, int]] = {
    "assembler_evict": (assembler_evict, 1_000, 50_000),
    "assembler_commit": (assembler_commit, 1_000, 50_000),
    "drift_verdict": (drift_verdict, 2, 100),
    "conversation_commit": (conversation_commit, 1_000, 100_000),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"{'operation':22s} {'small':>10s} {'large':>10s}  large/small")
    summary = []
    for name, (build, small, large) in OPERATIONS.items():
        few = _timed(lambda b=build, n=small: b(n), args.repeats)
        many = _timed(lambda b=build, n=large: b(n), args.repeats)
        print(f"{name:22s} {few:8.2f}us {many:8.2f}us  {many / few:6.2f}  ({small:,} / {large:,})")
        summary.append(f"{name}={many / few:.2f}")
    print("bench_state: " + " ".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
