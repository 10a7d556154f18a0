"""``sidecar backfill``: time arguments, the stop rule, and the run over the in-memory broker.

The run reads a :class:`MemoryTopic` through :class:`MemoryHistory` (records
with timestamps); the live group's committed offsets sit on the topic and
must not move. The real broker is in tests/integration/test_kafka_backfill.py.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from sidecar import cli
from sidecar.adapters.exposition import labelled
from sidecar.adapters.prometheus import Metrics
from sidecar.commands.backfill import KafkaOutput, summary_line
from sidecar.engine.history import (
    BackfillSummary,
    Window,
    backfill,
    parse_time,
    window_times,
)
from sidecar.errors import DeliveryError, SourceError, UsageError
from sidecar.evaluate.sample import Sampler
from sidecar.evaluate.verdict import Verdict
from sidecar.ingest.assemble import Assembler
from sidecar.ports import Record
from sidecar.wire.redaction import DEFAULT_REDACTION
from sidecar.wire.verdicts import verdict_json
from tests.builders import rubric, trace_id
from tests.fakes import MemoryHistory, MemorySink, MemoryTopic
from tests.otlp_records import span_tree

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
T0 = datetime(2026, 5, 1, 10, 0, tzinfo=UTC)


# -- time arguments ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("2026-05-01T08:30:00Z", datetime(2026, 5, 1, 8, 30, tzinfo=UTC), id="zulu"),
        pytest.param(
            "2026-05-01T10:30:00+02:00", datetime(2026, 5, 1, 8, 30, tzinfo=UTC), id="offset"
        ),
        pytest.param(
            "2026-05-01T08:30:00", datetime(2026, 5, 1, 8, 30, tzinfo=UTC), id="naive-utc"
        ),
        pytest.param("2026-05-01", datetime(2026, 5, 1, tzinfo=UTC), id="date"),
        pytest.param("-2h", NOW - timedelta(hours=2), id="hours"),
        pytest.param("-30m", NOW - timedelta(minutes=30), id="minutes"),
        pytest.param("-1d", NOW - timedelta(days=1), id="days"),
        pytest.param("-90s", NOW - timedelta(seconds=90), id="seconds"),
        pytest.param("-1.5h", NOW - timedelta(minutes=90), id="fraction"),
        pytest.param("2h", NOW - timedelta(hours=2), id="ago-without-minus"),
        pytest.param("1w", NOW - timedelta(days=7), id="weeks"),
        pytest.param(" now ", NOW, id="now"),
    ],
)
def test_parse_time(text: str, expected: datetime) -> None:
    assert parse_time(text, "--from", NOW) == expected


@pytest.mark.parametrize(
    "text", ["yesterday", "2 hours", "-2x", "-h", "2026-13-01", "", "--2h"], ids=repr
)
def test_a_bad_time_names_the_flag_and_an_example(text: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_time(text, "--to", NOW)
    message = str(caught.value)
    assert message.startswith(f"--to {text!r} is not a time")
    assert "2h" in message
    assert "2026-05-01T12:00:00Z" in message


@pytest.mark.parametrize(
    ("since", "until", "problem"),
    [
        pytest.param("-1h", "-2h", "--to '-2h'", id="to-before-from"),
        pytest.param(
            "2026-05-02T00:00:00Z",
            None,
            "--from '2026-05-02T00:00:00Z' is in the future",
            id="future",
        ),
    ],
)
def test_window_times_are_checked(since: str, until: str | None, problem: str) -> None:
    with pytest.raises(UsageError, match=problem):
        window_times(since, until, NOW)


def test_window_times_default_to_no_end() -> None:
    assert window_times("-2h", None, NOW) == (NOW - timedelta(hours=2), None)


# -- the stop rule ------------------------------------------------------------------------

Step = tuple[int, int, int | None, bool]  # (partition, offset, timestamp, admitted)


@pytest.mark.parametrize(
    ("starts", "ends", "to_ms", "steps", "done"),
    [
        pytest.param(
            {0: 2},
            {0: 4},
            None,
            [(0, 2, 10, True), (0, 3, 11, True), (0, 4, 12, False)],
            {0},
            id="ends-at-end-offset",
        ),
        pytest.param(
            {0: 0},
            {0: 5},
            20,
            [(0, 0, 10, True), (0, 1, 21, False), (0, 2, 15, False)],
            {0},
            id="first-record-after-to-ends-the-partition",
        ),
        pytest.param(
            {0: 0},
            {0: 5},
            20,
            [(0, 0, None, True), (0, 1, 20, True)],
            set(),
            id="no-timestamp-or-equal-to-is-inside",
        ),
        pytest.param(
            {0: 3, 1: 0},
            {0: 3, 1: 2},
            None,
            [(1, 0, 1, True)],
            {0},
            id="empty-partition-is-done-at-once",
        ),
        pytest.param(
            {0: 1},
            {0: 3},
            None,
            [(0, 0, 1, False), (0, 1, 1, True), (0, 1, 1, False)],
            set(),
            id="before-start-and-repeats-are-not-admitted",
        ),
        pytest.param(
            {0: 0},
            {0: 3},
            None,
            [(5, 0, 1, False)],
            set(),
            id="unknown-partition",
        ),
    ],
)
def test_window_admits(
    starts: dict[int, int],
    ends: dict[int, int],
    to_ms: int | None,
    steps: list[Step],
    done: set[int],
) -> None:
    window = Window(starts, ends, to_ms)
    for partition, offset, timestamp, admitted in steps:
        assert window.admit(partition, offset, timestamp) is admitted, (partition, offset)
    assert window.done == done


def test_a_position_past_the_end_ends_a_partition_with_a_gap() -> None:
    # Compaction or a transaction marker: the last offsets before the end never arrive.
    window = Window({0: 0}, {0: 10})
    assert window.admit(0, 7, 1)
    window.reached(0, 9)
    assert not window.finished
    window.reached(0, 10)
    assert window.finished
    assert window.next == {0: 10}


def test_the_start_never_passes_the_end() -> None:
    window = Window({0: 9}, {0: 4})  # produced between reading the ends and the times
    assert window.starts == {0: 4}
    assert window.total == 0
    assert window.finished


# -- a run over the in-memory broker ---------------------------------------------------------


def millis(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


ROOT = (1, None, "invoke_agent shop")
CHILD = (2, 1, "execute_tool lookup")


@dataclass
class Broker:
    topic: MemoryTopic = field(default_factory=lambda: MemoryTopic(partitions=2))
    timestamps: dict[int, list[int]] = field(default_factory=lambda: {0: [], 1: []})

    def trace(self, n: int, at: datetime, *, root: bool = True) -> None:
        """Trace ``n`` on partition n % 2: its child span, then (a second later) its root."""
        partition = n % 2
        key = trace_id(n).encode()
        self.topic.append(partition, span_tree(n, CHILD), key)
        self.timestamps[partition].append(millis(at))
        if root:
            self.topic.append(partition, span_tree(n, ROOT), key)
            self.timestamps[partition].append(millis(at + timedelta(seconds=1)))


@dataclass
class Collected:
    """An ``Output`` that keeps what it is given; ``during`` runs on each emit (produce meanwhile)."""

    verdicts: list[Verdict] = field(default_factory=list)
    flushed: int = 0
    during: list[object] = field(default_factory=list)
    broker: Broker | None = None
    produce_from: int = 1000

    async def emit(self, verdict: Verdict) -> None:
        self.verdicts.append(verdict)
        if self.broker is not None:
            # Traffic arriving while the backfill runs: after the end offsets it read.
            n = self.produce_from + len(self.verdicts)
            self.broker.trace(n, T0 + timedelta(minutes=30))

    async def flush(self) -> None:
        self.flushed += 1


RUBRIC = rubric(
    applies_to={"service.name": "shop"},
    checks=[{"name": "no_error_spans", "type": "no_error_spans"}],
)


async def run(
    broker: Broker,
    output: Collected,
    since: datetime,
    until: datetime | None = None,
    *,
    max_records: int = 3,
    history: MemoryHistory | None = None,
) -> tuple[BackfillSummary, MemoryHistory, Window]:
    reader = history or MemoryHistory(broker.topic, broker.timestamps, max_records=max_records)
    summary = BackfillSummary()
    window = await backfill(
        reader,
        output,
        since=since,
        until=until,
        rubrics=[RUBRIC],
        sampler=Sampler(judge_enabled=False),
        judge=None,
        assembler=Assembler(decision_wait=5.0, max_trace_age=120.0),
        summary=summary,
        concurrency=2,
    )
    return summary, reader, window


def minute(n: int) -> datetime:
    return T0 + timedelta(minutes=n)


async def test_only_traces_from_the_start_time_get_verdicts_marked_backfill() -> None:
    broker = Broker()
    for n in range(1, 11):
        broker.trace(n, minute(n))
    live = {0: 3, 1: 7}
    broker.topic.committed.update(live)
    output = Collected()

    summary, history, window = await run(broker, output, since=minute(6))

    assert sorted(v.trace_id for v in output.verdicts) == [trace_id(n) for n in range(6, 11)]
    assert all(v.backfill for v in output.verdicts)
    assert all(v.flags == () for v in output.verdicts)  # whole traces, decided complete
    record = json.loads(verdict_json(output.verdicts[0]))
    assert record["backfill"] is True
    # Decided the assembler's decision wait (5 s) after the trace ended, as live.
    for v in output.verdicts:
        assert v.trace_end is not None
        assert v.decided_at == v.trace_end + 5 * 10**9
    # The live group's offsets did not move; the backfill committed its own end positions.
    assert broker.topic.committed == live
    assert history.commits == [{0: 10, 1: 10}]
    assert window.next == {0: 10, 1: 10}
    assert output.flushed == 1
    assert history.stopped
    assert (summary.read, summary.to_read, summary.partitions) == (10, 10, 2)
    assert (summary.evaluation.traces, summary.evaluation.verdicts) == (5, 5)


async def test_live_verdict_records_say_nothing_about_backfill() -> None:
    broker = Broker()
    broker.trace(1, minute(1))
    output = Collected()
    await run(broker, output, since=minute(0))
    live = dataclasses.replace(output.verdicts[0], backfill=False)
    assert "backfill" not in json.loads(verdict_json(live))


async def test_it_stops_at_the_end_offsets_read_at_start_while_more_is_produced() -> None:
    broker = Broker()
    for n in range(1, 9):
        broker.trace(n, minute(n))
    output = Collected(broker=broker)  # each emit produces one more trace

    summary, _history, window = await run(broker, output, since=minute(0), max_records=2)

    produced_meanwhile = {trace_id(1000 + k) for k in range(1, len(output.verdicts) + 1)}
    assert len(output.verdicts) == 8
    assert {v.trace_id for v in output.verdicts} == {trace_id(n) for n in range(1, 9)}
    assert not produced_meanwhile & {v.trace_id for v in output.verdicts}
    assert broker.topic.highwater(0) + broker.topic.highwater(1) > 16  # more was there to read
    assert window.next == {0: 8, 1: 8}
    assert summary.read == 16


async def test_to_stops_each_partition_at_its_first_record_after_it() -> None:
    broker = Broker()
    for n in range(1, 11):
        broker.trace(n, minute(n))
    output = Collected()

    summary, _, window = await run(broker, output, since=minute(3), until=minute(7))

    # Trace 7's root is a second after minute 7: the child is read, the root is not.
    by_trace = {v.trace_id: v for v in output.verdicts}
    assert sorted(by_trace) == [trace_id(n) for n in range(3, 8)]
    assert by_trace[trace_id(7)].flags == ("incomplete",)
    assert all(by_trace[trace_id(n)].flags == () for n in range(3, 7))
    assert summary.stopped_at_to == 2
    assert window.finished


async def test_traces_open_at_the_stop_are_decided_at_end_of_input_flagged() -> None:
    broker = Broker()
    broker.trace(1, minute(1))
    broker.trace(2, minute(2), root=False)  # its root comes only after the backfill started
    output = Collected()

    summary, _, _ = await run(broker, output, since=minute(0))

    by_trace = {v.trace_id: v for v in output.verdicts}
    assert by_trace[trace_id(1)].flags == ()
    assert by_trace[trace_id(2)].flags == ("incomplete",)
    assert summary.evaluation.flags == {"incomplete": 1}


async def test_nothing_after_the_start_time_reads_nothing() -> None:
    broker = Broker()
    broker.trace(1, minute(1))
    output = Collected()
    summary, history, window = await run(broker, output, since=minute(5))
    assert output.verdicts == []
    assert summary.to_read == 0
    assert history.fetches == 0
    assert window.next == {0: 0, 1: 2}


async def test_an_undecodable_record_is_counted_and_skipped() -> None:
    broker = Broker()
    broker.topic.append(1, b"not otlp")
    broker.timestamps[1].append(millis(minute(1)))
    broker.trace(2, minute(2))
    output = Collected()
    summary, _, _ = await run(broker, output, since=minute(0))
    assert summary.undecodable == 1
    assert [v.trace_id for v in output.verdicts] == [trace_id(2)]


class FailingHistory(MemoryHistory):
    async def fetch(self) -> list[Record]:
        raise SourceError("the broker went away")


async def test_a_broker_failure_while_reading_is_raised_as_itself_and_the_reader_stops() -> None:
    broker = Broker()
    broker.trace(1, minute(1))
    history = FailingHistory(broker.topic, broker.timestamps)
    with pytest.raises(SourceError, match="went away"):
        await run(broker, Collected(), since=minute(0), history=history)
    assert history.stopped
    assert history.commits == []


# -- output, metrics and the summary -------------------------------------------------------------


async def verdicts_of(n: int) -> list[Verdict]:
    broker = Broker()
    for k in range(1, n + 1):
        broker.trace(k, minute(k))
    output = Collected()
    await run(broker, output, since=minute(0))
    return output.verdicts


async def test_kafka_output_retries_a_refused_send_and_counts_mode_backfill() -> None:
    sink = MemorySink()
    metrics = Metrics()
    output = KafkaOutput(sink, metrics, DEFAULT_REDACTION, max_pending=2, retry_delay_s=0)
    sink.fail(2)
    for verdict in await verdicts_of(3):
        await output.emit(verdict)
    await output.flush()
    assert output.acknowledged == 3
    assert sink.refused == 2
    assert all(json.loads(payload)["backfill"] is True for _, payload in sink.verdicts)
    exposed = generate_latest(labelled(metrics.registry, mode="backfill")).decode()
    cases = [line for line in exposed.splitlines() if line.startswith("sidecar_cases_total{")]
    assert cases
    assert all('mode="backfill"' in line for line in cases)
    # The process's own registry (what a live service would serve) has no mode label.
    assert 'mode="' not in generate_latest(metrics.registry).decode()


async def test_kafka_output_fails_the_run_after_its_attempts() -> None:
    sink = MemorySink()
    output = KafkaOutput(sink, Metrics(), DEFAULT_REDACTION, retry_delay_s=0)
    sink.fail(100)
    (verdict,) = await verdicts_of(1)
    await output.emit(verdict)
    with pytest.raises(DeliveryError, match="not acknowledged after 5 attempts"):
        await output.flush()


def test_summary_line_has_counts_and_throughput() -> None:
    summary = BackfillSummary(partitions=3, to_read=120, read=100, undecodable=1)
    summary.evaluation.spans, summary.evaluation.traces = 400, 50
    summary.evaluation.verdicts, summary.evaluation.outcomes = 50, {"acceptable": 50}
    line = summary_line(
        summary, 2.0, group="g-backfill", topic="eval_verdicts_backfill", judge_on=False
    )
    assert line.startswith("backfill: 100 of 120 records in 3 partitions (1 undecodable)")
    assert "50 verdicts (acceptable 50) to eval_verdicts_backfill" in line
    assert "200 spans/s, 25 traces/s" in line
    assert line.endswith("group g-backfill")


# -- the command line ---------------------------------------------------------------------------


@pytest.fixture
def rubrics_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "rubrics"
    directory.mkdir()
    (directory / "r.yaml").write_text("id: r\nversion: '1'\n")
    return directory


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        pytest.param(
            ["--from", "yesterday"],
            "--from 'yesterday' is not a time; give ISO-8601",
            id="bad-from",
        ),
        pytest.param(["--from=-1h", "--to", "soon"], "--to 'soon' is not a time", id="bad-to"),
        pytest.param(["--from=-1h", "--to=-2h"], "is before --from", id="to-before-from"),
        pytest.param(["--from=-1h", "--group", "sidecar"], "live service's group", id="live-group"),
        pytest.param(
            ["--from=-1h", "--topic", "eval_verdicts"], "a topic of their own", id="live-topic"
        ),
    ],
)
def test_bad_arguments_exit_2_with_one_line(
    extra: list[str],
    problem: str,
    rubrics_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = cli.main(["backfill", "--rubrics", str(rubrics_dir), *extra])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("sidecar backfill: ")
    assert problem in err
    assert err.count("\n") == 1


def test_from_takes_a_time_ago_as_its_own_argument() -> None:
    from sidecar.cli import build_parser

    args = build_parser().parse_args(["backfill", "--from", "-2h", "--to", "-30m"])
    assert (args.since, args.until) == ("-2h", "-30m")
