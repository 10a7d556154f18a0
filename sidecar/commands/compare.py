"""``sidecar compare``: is the candidate's answer better than the baseline's?

    sidecar compare --pairs FILE --model MODEL [--instructions TEXT | --instructions-file F]
                    [--config FILE] [--json OUT] [--concurrency N] [--confidence Z]

The pairs file holds JSON lines ``{"id", "prompt", "candidate", "baseline"}``
(other keys are ignored). Each pair is judged twice by the configured judge
(``judge:`` settings, as for ``sidecar run``): the candidate first as answer A,
then as answer B. Only a win named in both orders counts; a pair where the
judge followed the position, or changed its mind, is reported as
position-biased (:mod:`sidecar.judge.pairwise`). The win rate is candidate
wins over consistent decisive pairs, with its Wilson interval
(:mod:`sidecar.calibrate.pairwise_report`).

Each request is built by :mod:`sidecar.judge.pairwise` (fresh nonce, fenced
and neutralised data, strict answer parsing) and sent through
:class:`~sidecar.judge.service.JudgeService`, like a graded case: at most
``--concurrency`` calls at once, the requests/min and tokens/min limits, the
circuit breaker. Timeouts, transport errors, 408, 429 and 5xx are retried with
exponential backoff up to ``judge.max_attempts`` attempts; any other failure,
an open breaker, a blocked or truncated answer and a malformed answer make
that order ERROR, and the pair an error. Pairs whose text trips the injection
screener are listed, not changed.

Spans: when the environment asks for span export (``OTEL_TRACES_EXPORTER``
or an OTLP endpoint set, and ``otel.enabled`` in the settings), each pair
gets a ``compare {pair id}`` span over the ``chat {model}`` spans of both
orders' judge calls; without that, nothing is exported.

Prints a summary (to stderr when the JSON goes to stdout with ``--json -``)
and writes the JSON report. Exit 0 when the comparison ran, 2 on a usage
error or when no judge credentials are configured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from sidecar.adapters.otel import VerdictSpans, command_spans
from sidecar.adapters.prometheus import Metrics
from sidecar.calibrate.pairwise_report import CompareReport
from sidecar.calibrate.report import fmt
from sidecar.commands._io import consoles, read_lines, write_output
from sidecar.commands._wiring import judge_configured, judge_credentials_hint
from sidecar.errors import ConfigError, InputFileError, UsageError
from sidecar.judge.pairwise import (
    DEFAULT_INSTRUCTIONS,
    Pair,
    PairOutcome,
    PairResult,
    compare_pairs,
    screen_pair,
    with_judge_reports,
)
from sidecar.judge.service import JudgeService
from sidecar.settings import load_settings
from sidecar.wire.pairs import parse_pairs

Sleep = Callable[[float], Awaitable[None]]

# Position-biased case ids printed in the summary; the JSON lists them all.
SUMMARY_CASES = 10


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="judge candidate vs baseline answers pairwise, in both orders",
        description=(
            "Judge each candidate/baseline pair twice with the order swapped; only wins named in "
            "both orders count, the rest is reported as ties, position-biased or errors."
        ),
    )
    parser.add_argument(
        "--pairs",
        type=Path,
        required=True,
        metavar="FILE",
        help='pairs as JSON lines {"id", "prompt", "candidate", "baseline"}',
    )
    parser.add_argument("--model", required=True, help="judge model, e.g. gemini-2.5-flash")
    given = parser.add_mutually_exclusive_group()
    given.add_argument("--instructions", metavar="TEXT", help="the comparison criterion")
    given.add_argument(
        "--instructions-file", type=Path, metavar="F", help="read the comparison criterion here"
    )
    parser.add_argument("--config", type=Path, help="YAML settings file (judge backend settings)")
    parser.add_argument(
        "--json", dest="json_out", metavar="OUT", help="write the JSON report ('-' for stdout)"
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        metavar="N",
        help="pairs judged at once (default: judge.concurrency from the settings)",
    )
    parser.add_argument(
        "--confidence",
        type=float,
        default=0.95,
        metavar="Z",
        help="confidence of the Wilson interval on the win rate (default 0.95)",
    )
    parser.set_defaults(handler=run, error_prefix=parser.prog)


def _instructions(args: argparse.Namespace) -> str:
    if args.instructions_file is not None:
        try:
            text: str = args.instructions_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise InputFileError(
                f"{args.instructions_file}: cannot read: {exc.strerror or exc}"
            ) from exc
        except UnicodeDecodeError as exc:
            raise InputFileError(f"{args.instructions_file}: not UTF-8 text") from exc
    elif args.instructions is not None:
        text = args.instructions
    else:
        return DEFAULT_INSTRUCTIONS
    if not text.strip():
        raise InputFileError("the comparison instructions are empty")
    return text.strip()


def summary_lines(
    report: CompareReport,
    model: str,
    errors: Mapping[str, int],
    suspected: Mapping[str, tuple[str, ...]],
) -> list[str]:
    data = report.to_json()
    counts = data["outcomes"]
    share = f"{report.confidence:.0%}"
    decisive = data["candidate_wins"] + data["baseline_wins"]
    if report.win_rate is None:
        rate = "n/a (no consistent decisive pair)"
    else:
        rate = (
            f"{fmt(report.win_rate)}  ({share} Wilson {fmt(data['win_rate_lower_bound'])} to "
            f"{fmt(data['win_rate_upper_bound'])}, over {decisive} consistent decisive pairs)"
        )
    lines = [
        f"Pairwise comparison: {data['pairs']} pairs judged in both orders by {model}",
        f"  candidate wins    {data['candidate_wins']}",
        f"  baseline wins     {data['baseline_wins']}",
        f"  ties              {data['ties']}",
        f"  position-biased   {data['position_biased']}  "
        f"(A both times {counts[PairOutcome.POSITION_FIRST.value]}, "
        f"B both times {counts[PairOutcome.POSITION_SECOND.value]}, "
        f"inconsistent {counts[PairOutcome.INCONSISTENT.value]})",
        f"  errors            {data['errors']}",
        f"  win rate          {rate}",
    ]
    biased = data["position_biased_cases"]
    if biased:
        shown = ", ".join(
            f"{c['case_id']} ({c['first']}, {c['second']})" for c in biased[:SUMMARY_CASES]
        )
        more = f" and {len(biased) - SUMMARY_CASES} more" if len(biased) > SUMMARY_CASES else ""
        lines.append(f"position-biased: {shown}{more}")
    if errors:
        lines.append("error reasons: " + ", ".join(f"{k} {v}" for k, v in sorted(errors.items())))
    if suspected:
        lines.append(
            "injection suspected (verdicts kept): "
            + "; ".join(f"{case} ({', '.join(signals)})" for case, signals in suspected.items())
        )
    return lines


def json_document(
    report: CompareReport,
    args: argparse.Namespace,
    instructions: str,
    errors: Mapping[str, int],
    suspected: Mapping[str, tuple[str, ...]],
) -> dict[str, Any]:
    return {
        "model": args.model,
        "pairs_file": str(args.pairs),
        "instructions": instructions,
        **report.to_json(),
        "error_reasons": dict(sorted(errors.items())),
        "injection_suspected_cases": [
            {"case_id": case, "signals": list(signals)} for case, signals in suspected.items()
        ],
        "results": [
            {
                "case_id": r.case_id,
                "first": r.first.winner.value,
                "second": r.second.winner.value,
                "outcome": r.outcome.value,
            }
            for r in report.results
        ],
    }


async def _judge_all(
    judge: JudgeService, pairs: list[Pair], model: str, instructions: str, concurrency: int
) -> tuple[PairResult, ...]:
    async with judge:
        return await compare_pairs(
            pairs, judge, model=model, instructions=instructions, concurrency=concurrency
        )


def run(
    args: argparse.Namespace,
    *,
    environ: Mapping[str, str] = os.environ,
    sleep: Sleep = asyncio.sleep,
    rand: Callable[[], float] = random.random,
    metrics: Metrics | None = None,
    spans: VerdictSpans | None = None,
) -> int:
    """The command; ``environ``, ``sleep``, ``rand``, ``metrics``, ``spans``: seams for tests."""
    _, err = consoles()
    try:
        if args.concurrency is not None and args.concurrency < 1:
            raise ValueError(f"--concurrency must be at least 1, got {args.concurrency}")
        if not 0.0 < args.confidence < 1.0:
            raise ValueError(f"--confidence must be between 0 and 1, got {args.confidence}")
        if not args.model.strip():
            raise ValueError("--model is empty; name the judge model, e.g. gemini-2.5-flash")
        instructions = _instructions(args)
        records = parse_pairs(read_lines(args.pairs, err), str(args.pairs))
        pairs = [Pair(r.id, r.prompt, r.candidate, r.baseline) for r in records]
        loaded = load_settings(args.config)
        settings = loaded.judge
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if not judge_configured(settings, environ):
        raise ConfigError(judge_credentials_hint())
    screenings = {p.case_id: screen_pair(p.prompt, p.candidate, p.baseline) for p in pairs}
    if args.concurrency is not None:
        # --concurrency bounds the calls as well as the pairs in flight.
        settings = settings.model_copy(update={"concurrency": args.concurrency})
    # Imported here: google-genai is heavy (~40 MB, seconds of start-up).
    from sidecar.adapters.judge_backends import make_backend

    try:
        backend = make_backend(settings, environ)
    except ValueError as exc:  # google-genai refuses to start without its credentials
        raise ConfigError(f"{judge_credentials_hint()} ({exc})") from exc
    judge = JudgeService(backend, settings, metrics or Metrics(), sleep=sleep, rand=rand)
    results = asyncio.run(_judge_all(judge, pairs, args.model, instructions, settings.concurrency))
    if spans is None:
        spans = command_spans(
            enabled=loaded.otel.enabled,
            service_name=loaded.otel.service_name,
            timeout_s=loaded.otel.shutdown_timeout_s,
            environ=environ,
        )
    for result in results:
        spans.record_compare(result, args.model)
    spans.shutdown()
    report = CompareReport(results, args.confidence)
    errors = report.error_reasons()
    # The screening's hits, and the judge's own report (either order) as one more signal.
    suspected = {
        result.case_id: screening.signals
        for result in results
        if (screening := with_judge_reports(screenings[result.case_id], result)).suspected
    }

    # With the JSON on stdout the summary goes to stderr so the JSON stays parseable.
    out = sys.stderr if args.json_out == "-" else sys.stdout
    for line in summary_lines(report, args.model, errors, suspected):
        print(line, file=out)
    if args.json_out:
        document = json_document(report, args, instructions, errors, suspected)
        text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
        write_output(args.json_out, text, sys.stdout)
    return 0
