"""``sidecar backfill --config FILE --from TIME [--to TIME]``: evaluate history still in Kafka.

The window and how it is read are in :mod:`sidecar.engine.history`. What this
command adds:

- the reader is :class:`~sidecar.adapters.kafka_history.KafkaHistory` in its own
  group, ``--group`` or ``<kafka.group_id>-backfill-<UTC time>``; the live
  group's offsets are never read, committed or moved;
- verdict records go to ``--topic`` or ``kafka.backfill_verdict_topic``
  (default ``eval_verdicts_backfill``), never the live verdict topic, each
  with ``"backfill": true``, through the service's emitter and deliverer;
  sends are pipelined (at most ``MAX_PENDING`` unacknowledged) and a send
  refused retriably is tried ``SEND_ATTEMPTS`` times before the run fails
  (exit 1); a record Kafka can never accept goes to the dead-letter topic;
- no verdict spans: the evaluated traces already carry the live service's
  ``evaluate`` spans, and a second one in an old trace would be counted
  again by anything that reads evaluations from traces. The records are the
  backfill's output;
- metrics in a registry of its own, served with ``--metrics-port`` (else not
  at all), every sample labelled ``mode="backfill"``
  (:mod:`sidecar.adapters.exposition`); the live service's metrics are not
  touched;
- judge spend is bounded as live: the rubric's sampling and the sampling
  budgets (per real minute and day) unless ``--judge-all``, the judge's
  limits, and ``judge.concurrency`` traces at a time;
- a progress bar on stderr (records read of those up to the end offsets,
  traces, verdicts) when stderr is a terminal and without ``--quiet``, and
  always a summary line with counts and throughput.

Exit 0 when done; 1 when Kafka fails or every record read was undecodable;
2 for bad arguments or settings (a bad time names its flag and an example).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sidecar import logs
from sidecar.adapters.exposition import labelled
from sidecar.adapters.http import MetricsServer
from sidecar.adapters.kafka import KafkaSink
from sidecar.adapters.kafka_history import KafkaHistory
from sidecar.adapters.prometheus import Metrics
from sidecar.commands._io import port_number
from sidecar.commands._wiring import build_judge
from sidecar.engine.deliver import Deliverer
from sidecar.engine.emit import Emitter
from sidecar.engine.history import BackfillSummary, Window, backfill, window_times
from sidecar.engine.partitions import EngineStats
from sidecar.errors import DeliveryError, UsageError
from sidecar.evaluate.rubric import load_rubrics
from sidecar.evaluate.sample import build_sampler
from sidecar.evaluate.verdict import Verdict
from sidecar.ingest.assemble import Assembler, AssemblerStats
from sidecar.ports import OutRecord, RecordSink
from sidecar.retry import Backoff
from sidecar.settings import Settings, load_settings
from sidecar.wire.redaction import Redaction

log = logging.getLogger(__name__)

MAX_PENDING = 1_000
SEND_ATTEMPTS = 5


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "backfill",
        help="evaluate history still in Kafka from a time (own group, own verdict topic)",
    )
    parser.add_argument(
        "--config", type=Path, help="YAML settings file of the service (SIDECAR_* env overrides)"
    )
    parser.add_argument(
        "--from",
        dest="since",
        required=True,
        metavar="TIME",
        help="start: ISO-8601 (2026-05-01T12:00:00Z; no zone = UTC) or a time ago (2h, 30m, 1d)",
    )
    parser.add_argument(
        "--to",
        dest="until",
        metavar="TIME",
        help="stop at the first record after this time (default: the end offsets at start)",
    )
    parser.add_argument(
        "--rubrics", type=Path, help="rubric directory (default: config rubrics_dir)"
    )
    parser.add_argument(
        "--judge-all", action="store_true", help="judge every case, ignoring sampling"
    )
    parser.add_argument(
        "--group", help="consumer group of the backfill (default: <group_id>-backfill-<time>)"
    )
    parser.add_argument("--topic", help="verdict topic (default: kafka.backfill_verdict_topic)")
    parser.add_argument(
        "--metrics-port", type=port_number, help="serve the backfill's metrics on this port"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument(
        "--log-format", choices=logs.FORMATS, help="text or json (default: the log.format setting)"
    )
    # ``--from -2h``: argparse (before 3.13) takes "-2h" for an option; a time ago is a value.
    parser._negative_number_matcher = re.compile(r"^-(\d+[smhdw]?|\d*\.\d+)$")
    parser.set_defaults(handler=handle, error_prefix="sidecar backfill")


class KafkaOutput:
    """The backfill's ``Output``: the emitter's records delivered (pipelined) to ``topic``."""

    def __init__(
        self,
        sink: RecordSink,
        metrics: Metrics,
        redaction: Redaction,
        *,
        topic: str = "eval_verdicts_backfill",
        dead_letter_topic: str = "otlp_spans.dlq",
        max_pending: int = MAX_PENDING,
        retry_delay_s: float = 0.5,
    ) -> None:
        self._emitter = Emitter(
            spans=None, telemetry=metrics, redaction=redaction, verdict_topic=topic
        )
        self._deliverer = Deliverer(
            sink,
            dead_letter_topic=dead_letter_topic,
            backoff=Backoff(retry_delay_s, 30.0, 0.2),
            sleep=asyncio.sleep,
            clock=time.monotonic,
            attempts=SEND_ATTEMPTS,
            telemetry=metrics,
        )
        self._max_pending = max_pending
        self._pending: set[asyncio.Task[None]] = set()
        self._failure: DeliveryError | None = None
        self.acknowledged = 0

    async def emit(self, verdict: Verdict) -> None:
        records = self._emitter.verdict(verdict)
        while len(self._pending) >= self._max_pending:
            await asyncio.wait(self._pending, return_when=asyncio.FIRST_COMPLETED)
        self._raise_failure()
        task = asyncio.create_task(self._send(records))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def flush(self) -> None:
        if self._pending:
            await asyncio.wait(self._pending)
        self._raise_failure()

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    async def _send(self, records: list[OutRecord]) -> None:
        try:
            await self._deliverer.deliver(records)
        except DeliveryError as exc:
            self._failure = self._failure or exc
            return
        self.acknowledged += 1


def _check_targets(settings: Settings, group: str, topic: str) -> None:
    kafka = settings.kafka
    if group == kafka.group_id:
        raise UsageError(f"--group {group!r} is the live service's group; a backfill needs its own")
    if topic in (kafka.verdict_topic, kafka.topic, kafka.dead_letter_topic) or not topic:
        raise UsageError(
            f"--topic {topic!r}: backfill verdicts go to a topic of their own "
            f"(not {kafka.verdict_topic!r}, {kafka.topic!r} or {kafka.dead_letter_topic!r}), "
            "e.g. eval_verdicts_backfill"
        )


def handle(args: argparse.Namespace) -> int:
    started = datetime.now(UTC)
    since, until = window_times(args.since, args.until, started)
    settings = load_settings(args.config)
    # Warnings and errors only: the progress bar and the summary say how it goes.
    logs.configure("warning", args.log_format or settings.log.format)
    rubrics = load_rubrics(args.rubrics or settings.rubrics_dir)
    group = args.group or f"{settings.kafka.group_id}-backfill-{started:%Y%m%dT%H%M%SZ}"
    topic = args.topic or settings.kafka.backfill_verdict_topic
    _check_targets(settings, group, topic)
    metrics = Metrics(max_agents=settings.metrics.max_agents)
    judge = build_judge(settings.judge, metrics)
    sampler = build_sampler(
        settings.sampling, judge_enabled=judge is not None, judge_all=args.judge_all
    )
    a = settings.assembler
    assembler = Assembler(
        decision_wait=a.decision_wait_s,
        max_trace_age=a.max_trace_age_s,
        max_open_traces=a.max_open_traces,
        max_spans_per_trace=a.max_spans_per_trace,
        decided_memory=a.decided_memory,
    )
    summary = BackfillSummary()
    err = Console(stderr=True)
    progress = Progress(
        TextColumn("backfill"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("records, {task.fields[traces]} traces, {task.fields[verdicts]} verdicts"),
        TimeElapsedColumn(),
        console=err,
        disable=args.quiet or not err.is_terminal,
    )
    server = (
        MetricsServer.of(
            settings.metrics,
            labelled(metrics.registry, mode="backfill"),
            lambda: (True, f"backfill of {settings.kafka.topic} into {topic}"),
            port=args.metrics_port,
        )
        if args.metrics_port is not None
        else None
    )

    async def run() -> float:
        # Kafka clients bind to the running loop, so they are made here.
        history = KafkaHistory(settings.kafka, group)
        sink = KafkaSink(settings.kafka)
        output = KafkaOutput(
            sink,
            metrics,
            settings.redaction.policy(),
            topic=topic,
            dead_letter_topic=settings.kafka.dead_letter_topic,
        )
        if server is not None:
            await server.start()
        await sink.start()
        bar = progress.add_task("backfill", total=None, traces=0, verdicts=0)
        reading_since = time.monotonic()
        metrics.watch(lambda: backfill_stats(summary))

        def on_window(window: Window) -> None:
            nonlocal reading_since
            reading_since = time.monotonic()
            progress.update(bar, total=window.total)

        def refresh() -> None:
            counts = summary.evaluation
            progress.update(
                bar, completed=summary.read, traces=counts.traces, verdicts=counts.verdicts
            )

        async def refresh_often() -> None:
            while True:
                refresh()
                await asyncio.sleep(0.2)

        refresher = asyncio.create_task(refresh_often())
        try:
            with progress:
                await backfill(
                    history,
                    output,
                    since=since,
                    until=until,
                    rubrics=rubrics,
                    sampler=sampler,
                    judge=judge,
                    assembler=assembler,
                    summary=summary,
                    concurrency=settings.judge.concurrency,
                    clock=time.monotonic,
                    encoding=settings.kafka.encoding,
                    on_window=on_window,
                )
                refresh()
            return time.monotonic() - reading_since
        finally:
            refresher.cancel()
            await sink.stop()
            if judge is not None:
                await judge.aclose()
            if server is not None:
                await server.stop()

    elapsed = asyncio.run(run())
    line = summary_line(summary, elapsed, group=group, topic=topic, judge_on=judge is not None)
    print(line, file=sys.stderr)
    if summary.read and summary.undecodable == summary.read:
        print("sidecar backfill: no record could be decoded; is this OTLP?", file=sys.stderr)
        return 1
    return 0


def backfill_stats(summary: BackfillSummary) -> list[object]:
    """What the backfill's metrics read at scrape time: records read, spans decoded."""
    counts = summary.evaluation
    return [
        AssemblerStats(spans=counts.spans),
        EngineStats(records=summary.read),
    ]


def summary_line(
    summary: BackfillSummary, elapsed: float, *, group: str, topic: str, judge_on: bool
) -> str:
    counts = summary.evaluation
    seconds = max(elapsed, 1e-9)
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(counts.outcomes.items())) or "none"
    flags = ", ".join(f"{k} {v}" for k, v in sorted(counts.flags.items()))
    return (
        f"backfill: {summary.read} of {summary.to_read} records in {summary.partitions} partitions "
        f"({summary.undecodable} undecodable"
        f"{f', {summary.stopped_at_to} partitions stopped at --to' if summary.stopped_at_to else ''}"
        f"), {counts.spans} spans, {counts.traces} traces, {counts.verdicts} verdicts "
        f"({outcomes}) to {topic}; judged {counts.judged}{'' if judge_on else ' (judge off)'}"
        f"{f'; flagged {flags}' if flags else ''}; {elapsed:.1f}s, "
        f"{counts.spans / seconds:.0f} spans/s, {counts.traces / seconds:.0f} traces/s; "
        f"group {group}"
    )
