"""``sidecar replay PATH...``: the pipeline over files; verdict records on stdout.

Each trace's verdict records are written (and flushed) as soon as they are
decided, traces ``judge.concurrency`` at a time; the summary follows on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from sidecar.commands._wiring import build_judge, command_rubrics
from sidecar.engine.emit import Emitter
from sidecar.engine.offline import ReplaySummary, collect_traces, input_files, stream_verdicts
from sidecar.evaluate.sample import build_sampler
from sidecar.logs import shown
from sidecar.ports import RecordKind
from sidecar.settings import load_settings


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "replay",
        help="evaluate traces from files (OTLP/JSON lines, OTLP protobuf, file-exporter proto)",
    )
    parser.add_argument(
        "paths",
        nargs="+",
        type=Path,
        metavar="PATH",
        help="a file, a directory of files, or - for standard input",
    )
    parser.add_argument(
        "--rubrics", type=Path, help="rubric directory (default: config rubrics_dir)"
    )
    parser.add_argument("--config", type=Path, help="YAML settings file (for judge settings)")
    parser.add_argument(
        "--judge-all", action="store_true", help="judge every case, ignoring sampling"
    )
    parser.add_argument(
        "--exit-zero", action="store_true", help="exit 0 even when a case is unacceptable"
    )
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    _, rubrics = command_rubrics(args.rubrics, settings.rubrics_dir)
    paths = input_files(args.paths)
    judge = build_judge(settings.judge, None)
    sampler = build_sampler(
        settings.sampling, judge_enabled=judge is not None, judge_all=args.judge_all
    )
    summary = ReplaySummary()
    traces = collect_traces(paths, summary)
    out = sys.stdout
    # Records only: replay leaves spans and metrics to the service.
    emitter = Emitter(spans=None, redaction=settings.redaction.policy(), verdict_topic="stdout")

    async def evaluate() -> None:
        try:
            async for _, verdicts in stream_verdicts(
                traces,
                rubrics,
                sampler,
                judge=judge,
                summary=summary,
                concurrency=settings.judge.concurrency,
                decision_wait_s=settings.assembler.decision_wait_s,
            ):
                for verdict in verdicts:
                    for record in emitter.verdict(verdict):
                        if record.kind is RecordKind.VERDICT and record.value is not None:
                            out.write(record.value.decode("utf-8") + "\n")
                out.flush()
        finally:
            if judge is not None:
                await judge.aclose()

    asyncio.run(evaluate())
    _print_summary(summary, judge_on=judge is not None)
    if summary.records and len(summary.bad_records) == summary.records:
        print("replay: no record could be decoded; is this OTLP?", file=sys.stderr)
        return 1
    if summary.outcomes.get("unacceptable") and not args.exit_zero:
        return 1
    return 0


def _print_summary(summary: ReplaySummary, *, judge_on: bool) -> None:
    err = sys.stderr
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(summary.outcomes.items())) or "none"
    print(
        f"replay: {summary.files} files, {summary.records} records, {summary.spans} spans, "
        f"{summary.traces} traces, {summary.verdicts} verdicts ({outcomes}); "
        f"judged {summary.judged}{'' if judge_on else ' (judge off: no credentials)'}; "
        f"{summary.unrouted_traces} traces matched no rubric",
        file=err,
    )
    if summary.decisions:
        decisions = ", ".join(f"{k} {v}" for k, v in sorted(summary.decisions.items()))
        print(f"replay: trace decisions ({decisions})", file=err)
    if summary.logs:
        print(
            f"replay: {summary.logs} log records; "
            f"{summary.logs_without_trace} without a trace id (ignored)",
            file=err,
        )
    if summary.conversations or summary.turns_without_key:
        print(
            f"replay: {summary.conversations} conversations; {summary.turns_without_key} traces "
            "matched a conversation rubric without a conversation id (skipped)",
            file=err,
        )
    if summary.internal_errors:
        stages = ", ".join(f"{k} {v}" for k, v in sorted(summary.internal_errors.items()))
        print(
            f"replay: internal errors ({stages}); those cases are errored, reason internal_error",
            file=err,
        )
    if summary.flags:
        flags = ", ".join(f"{k} {v}" for k, v in sorted(summary.flags.items()))
        print(f"replay: traces flagged ({flags})", file=err)
    if summary.not_captured:
        fields = ", ".join(f"{k} {v}" for k, v in sorted(summary.not_captured.items()))
        print(f"replay: content not captured by the producer ({fields})", file=err)
    if summary.unreadable:
        fields = ", ".join(f"{k} {v}" for k, v in sorted(summary.unreadable.items()))
        print(f"replay: content captured in a shape sidecar does not read ({fields})", file=err)
    for problem in summary.bad_records[:20]:
        print(f"replay: skipped undecodable record {shown(str(problem))}", file=err)
    if len(summary.bad_records) > 20:
        print(f"replay: ... and {len(summary.bad_records) - 20} more undecodable records", file=err)
