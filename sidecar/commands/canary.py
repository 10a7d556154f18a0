"""``sidecar canary --rubric FILE --traces PATH... --labels FILE``: re-judge a labelled set now.

Made for CI before a judge model or rubric change: every given trace is
judged with the rubric now (sampling ignored, verdict cache bypassed, through
the judge service's limits, retries and breaker; a judge that cannot be
reached gives ERROR verdicts here, never a pause), and compared with the
human labels. The rules are in :mod:`sidecar.drift.canary_set`.

Prints per criterion n, agreement, kappa, errors and flips. ``--json OUT``
writes ``{"rubric", "rubric_version", "rubric_hash", "judge_model",
"judge_model_version", "criteria": [{"criterion", "n", "agreement", "kappa",
"errors", "flips"}]}`` (``kappa`` null with a ``note`` when undefined;
``flips`` null without ``--previous``; ``judge_model_version`` lists every
version that answered, comma-separated, null when none did).

``--records OUT`` writes the canary records ``sidecar drift --canary`` reads:
each case's verdict record with ``"canary": true`` and ``"labels"``, its
human reference label per criterion.

``--previous FILE`` gives flips: it is the *verdict records* of an earlier run
(``--verdicts OUT`` of an earlier canary, or ``sidecar replay`` output), not
its ``--json`` summary, which holds no per-case verdicts.

Spans: when the environment asks for span export (``OTEL_TRACES_EXPORTER``
or an OTLP endpoint set, and ``otel.enabled`` in the settings), each case
gets a ``canary {rubric}`` span over its ``chat {model}`` judge spans, as in
the service; without that, nothing is exported.

Exit 0 when the canary passes; 1 when a gated criterion's kappa is undefined
or below its threshold (``--kappa-threshold``, else the rubric's
``calibration.kappa_threshold``, else 0.4) or the error rate is above
``--max-error-rate`` (default 0.03); 2 for bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from sidecar.adapters.otel import VerdictSpans, command_spans
from sidecar.calibrate.inputs import parse_labels, parse_verdicts
from sidecar.calibrate.release_gate import DEFAULT_MAX_ERROR_RATE
from sidecar.calibrate.report import fmt
from sidecar.commands._io import consoles, read_lines, write_output
from sidecar.commands._wiring import build_judge, judge_credentials_hint
from sidecar.drift.canary_set import (
    CanaryReport,
    canary_cases,
    canary_labels,
    canary_record,
    canary_report,
    judge_canary,
    previous_outcomes,
)
from sidecar.engine.offline import ReplaySummary, collect_traces
from sidecar.errors import ConfigError, InputFileError, RecordError, UsageError
from sidecar.evaluate.pipeline import Case
from sidecar.evaluate.rubric import load_rubric
from sidecar.evaluate.verdict import Verdict
from sidecar.judge.config import UnavailablePolicy
from sidecar.judge.service import JudgeService
from sidecar.logs import shown
from sidecar.model import Outcome
from sidecar.settings import Settings, load_settings
from sidecar.telemetry import CANARY
from sidecar.terminal import plain, styled, warning_line, yes_no
from sidecar.wire._base import record_json
from sidecar.wire.verdicts import verdict_dict, verdict_json


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "canary",
        help="re-judge a labelled canary set now and compare with the labels",
        description=(
            "Judge every given trace with the rubric now (no sampling, no cache) and report per "
            "criterion n, agreement and kappa against the human labels, judge ERRORs and flips "
            "since a previous run. Exit 1 when a gated criterion falls below its kappa threshold "
            "or the error rate is above the maximum."
        ),
    )
    parser.add_argument("--rubric", type=Path, required=True, metavar="FILE", help="rubric YAML")
    parser.add_argument(
        "--traces",
        type=Path,
        nargs="+",
        required=True,
        metavar="PATH",
        help="trace files (any format sidecar replay reads)",
    )
    parser.add_argument(
        "--labels",
        type=Path,
        required=True,
        metavar="FILE",
        help="human labels (the sidecar calibrate format; case_id = trace id)",
    )
    parser.add_argument(
        "--previous",
        type=Path,
        metavar="FILE",
        help="verdict records of an earlier run (its --verdicts output), for flips",
    )
    parser.add_argument(
        "--json", dest="json_out", metavar="OUT", help="write the JSON result ('-' for stdout)"
    )
    parser.add_argument(
        "--verdicts", metavar="OUT", help="write this run's verdict records ('-' for stdout)"
    )
    parser.add_argument(
        "--records",
        metavar="OUT",
        help=(
            "write this run's canary records for sidecar drift: each case's verdict record with "
            "\"canary\": true and its human labels ('-' for stdout)"
        ),
    )
    parser.add_argument(
        "--kappa-threshold",
        type=float,
        metavar="K",
        help="minimum kappa of gated criteria (default: the rubric's calibration threshold, or 0.4)",
    )
    parser.add_argument(
        "--max-error-rate",
        type=float,
        default=DEFAULT_MAX_ERROR_RATE,
        metavar="Y",
        help=f"maximum share of ERROR verdicts (default {DEFAULT_MAX_ERROR_RATE})",
    )
    parser.add_argument("--config", type=Path, help="YAML settings file (judge backend settings)")
    parser.set_defaults(handler=run, error_prefix=parser.prog)


def run(args: argparse.Namespace, *, spans: VerdictSpans | None = None) -> int:
    """The command; ``spans`` is a seam for tests (default: as the environment says)."""
    stdout, err = consoles()
    out = err if "-" in (args.json_out, args.verdicts, args.records) else stdout
    rubric = load_rubric(args.rubric)
    if rubric.judge is None:
        raise ConfigError(f"{args.rubric}: rubric {rubric.id!r} has no judge: block to run")
    labels = parse_labels(read_lines(args.labels, err), str(args.labels))
    if not labels:
        raise InputFileError(f"{args.labels}: no labels")
    previous = None
    if args.previous is not None:
        lines = read_lines(args.previous, err)
        _not_a_summary(lines, args.previous)
        previous = previous_outcomes(parse_verdicts(lines, str(args.previous)), rubric.id)
    for path in args.traces:
        if not path.is_file():
            what = "a folder; give trace files" if path.is_dir() else "no such trace file"
            raise InputFileError(f"{path}: {what}")
    summary = ReplaySummary()
    traces = collect_traces(args.traces, summary)
    if not traces:
        raise InputFileError(f"{', '.join(map(str, args.traces))}: no traces")
    settings = load_settings(args.config)
    # A CI run must end: an unreachable judge gives ERROR verdicts, never a pause.
    judge_settings = settings.judge.model_copy(
        update={"on_judge_unavailable": UnavailablePolicy.ERROR}
    )
    judge = build_judge(judge_settings, None)
    if judge is None:
        raise ConfigError(judge_credentials_hint())
    verdicts = asyncio.run(_judge(judge, canary_cases(rubric, traces)))
    decided = time.time_ns()  # the canary's verdicts are decided now, whenever the traces ran
    verdicts = [dataclasses.replace(v, decided_at=decided) for v in verdicts]
    _export(verdicts, spans or command_spans(**_otel(settings)))
    try:
        report = canary_report(
            rubric,
            verdicts,
            labels,
            previous,
            threshold=args.kappa_threshold,
            max_error_rate=args.max_error_rate,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from exc

    print_canary(report, out)
    reasons = Counter(
        c.reason or "unknown" for v in verdicts for c in v.criteria if c.outcome is Outcome.ERROR
    )
    if reasons:
        # An unreachable judge shows here, not as labels that do not match.
        listed = ", ".join(f"{reason} {count}" for reason, count in sorted(reasons.items()))
        err.print(plain(f"judge ERROR reasons: {listed}"))
    for problem in summary.bad_records[:5]:
        err.print(warning_line(f"skipped undecodable record {problem}"))
    for warning in report.warnings:
        err.print(warning_line(warning))
    if args.verdicts:
        redaction = settings.redaction.policy()
        records = "".join(verdict_json(v, redaction) + "\n" for v in verdicts)
        write_output(args.verdicts, records, sys.stdout)
    if args.records:
        redaction = settings.redaction.policy()
        human = canary_labels(labels)
        lines = [
            record_json(canary_record(verdict_dict(v, redaction), human.get(v.trace_id, {})))
            for v in verdicts
        ]
        write_output(args.records, "".join(line + "\n" for line in lines), sys.stdout)
    if args.json_out:
        text = json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n"
        write_output(args.json_out, text, sys.stdout)
    if not report.passed and out is not err:
        for reason in report.reasons:
            print(f"sidecar canary: {shown(reason)}", file=sys.stderr)
    return 0 if report.passed else 1


def _otel(settings: Settings) -> dict[str, Any]:
    otel = settings.otel
    return {
        "enabled": otel.enabled,
        "service_name": otel.service_name,
        "timeout_s": otel.shutdown_timeout_s,
    }


def _export(verdicts: list[Verdict], spans: VerdictSpans) -> None:
    for verdict in verdicts:
        spans.record_canary(verdict)
    spans.shutdown()


async def _judge(judge: JudgeService, cases: list[Case]) -> list[Verdict]:
    async with judge:
        # Canary calls, as in the service's schedule: their spans say so.
        return await judge_canary(cases, judge.for_purpose(CANARY))


def _not_a_summary(lines: list[str], path: Path) -> None:
    # The --json summary is one document; flips need the per-case verdict records.
    try:
        document = json.loads("".join(lines))
    except ValueError:
        return
    if isinstance(document, dict) and "criteria" in document and "trace_id" not in document:
        raise RecordError(
            f"{path}: this is a canary --json summary; flips need the verdict records of that "
            "run (its --verdicts output)"
        )


def print_canary(report: CanaryReport, console: Console) -> None:
    served = report.judge_model_version or "no answer"
    console.print(
        plain(
            f"canary: rubric {report.rubric} v{report.rubric_version} (hash {report.rubric_hash}), "
            f"judge {report.judge_model} served by {served}; {report.cases} traces"
        )
    )
    table = Table(title_justify="left")
    for header in ("criterion", "gate", "n", "agreement", "kappa", "min", "errors", "flips", "ok"):
        table.add_column(header, justify="left" if header == "criterion" else "right")
    for c in report.criteria:
        table.add_row(
            plain(c.criterion),
            "yes" if c.gate else "advisory",
            str(c.n),
            fmt(c.agreement),
            fmt(c.kappa),
            fmt(c.threshold, 2) if c.gate else "",
            str(c.errors),
            "n/a" if c.flips is None else f"{c.flips} of {c.compared}",
            "" if not c.gate else (yes_no(c.fit)),
        )
    console.print(table)
    for c in report.criteria:
        if c.note:
            console.print(plain(f"{c.criterion}: {c.note}"))
    console.print(
        plain(
            f"error rate {fmt(report.error_rate)} ({report.errors} ERROR verdicts; "
            f"max {report.max_error_rate})"
        )
    )
    if report.passed:
        console.print(styled("canary passed", "green"))
    else:
        console.print(styled("canary failed:", "red"))
        for reason in report.reasons:
            console.print(plain(f"  - {reason}"))
