"""``sidecar demo``: bundled traces and rubrics through the full pipeline, on embedded defaults."""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
from importlib import resources
from pathlib import Path
from typing import IO, Any

from rich import box
from rich.console import Console
from rich.table import Table

from sidecar.adapters.http import MetricsServer
from sidecar.adapters.otel import JsonLinesSpanExporter, VerdictSpans, tracer_provider
from sidecar.adapters.prometheus import Metrics, record_rubrics, record_sampling
from sidecar.commands._io import invocation, make_folder, port_number
from sidecar.commands._wiring import build_judge, judge_credentials_hint
from sidecar.engine.emit import Emitter
from sidecar.engine.offline import ReplaySummary, collect_traces, evaluate_traces
from sidecar.evaluate.rubric import load_rubrics
from sidecar.evaluate.sample import Sampler
from sidecar.evaluate.verdict import Verdict
from sidecar.judge.config import JudgeSettings
from sidecar.model import CaseOutcome, Outcome
from sidecar.wire.redaction import DEFAULT_REDACTION

# Below this the table wraps into tall rows; pipes and CI logs get this width.
_MIN_WIDTH = 120
# Narrower than this, the agent column goes (the rubric mostly implies it).
_AGENT_WIDTH = 100
# "check: detail" fits one row at 120 columns.
_PROBLEM_CHARS = 60

_STYLE = {
    CaseOutcome.ACCEPTABLE: "green",
    CaseOutcome.UNACCEPTABLE: "red",
    CaseOutcome.ERRORED: "yellow",
}


def register(sub: Any) -> None:
    parser = sub.add_parser("demo", help="run bundled example traces through the full pipeline")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("sidecar-demo-out"),
        help="folder for verdict spans (OTLP/JSON lines) and verdict records",
    )
    parser.add_argument(
        "--metrics-port", type=port_number, default=9464, help="0 picks a free port"
    )
    parser.add_argument(
        "--serve", action="store_true", help="keep serving /metrics after the run until Ctrl-C"
    )
    parser.set_defaults(handler=handle)


def demo_data() -> tuple[Path, Path]:
    root = resources.files("sidecar") / "demo_data"
    return Path(str(root / "traces.jsonl")), Path(str(root / "rubrics"))


def handle(args: argparse.Namespace) -> int:
    return asyncio.run(_demo(args))


async def _demo(args: argparse.Namespace) -> int:
    console = _console()
    make_folder(args.out)
    traces_file, rubrics_dir = demo_data()
    rubrics = load_rubrics(rubrics_dir)
    metrics = Metrics()
    record_rubrics(metrics, rubrics)
    server = MetricsServer(metrics.registry, lambda: (True, "demo"), "127.0.0.1", args.metrics_port)
    try:
        await server.start()
    except OSError:
        server = MetricsServer(metrics.registry, lambda: (True, "demo"), "127.0.0.1", 0)
        await server.start()
    spans_path = args.out / "verdict-spans.jsonl"
    spans_path.unlink(missing_ok=True)
    spans = VerdictSpans(tracer_provider(JsonLinesSpanExporter(spans_path), batch=False))

    judge = build_judge(JudgeSettings(), metrics)
    if judge is None:
        console.print(
            f"[bold]judge did not run[/]: {judge_credentials_hint()} Criteria are SKIPPED; "
            "deterministic checks ran on every trace.",
            soft_wrap=True,
        )
    if args.serve:
        console.print(f"metrics: http://127.0.0.1:{server.port}/metrics", soft_wrap=True)
    sampler = Sampler(judge_enabled=judge is not None, judge_all=True)
    summary = ReplaySummary()
    traces = collect_traces([traces_file], summary)
    verdicts = await evaluate_traces(traces, rubrics, sampler, judge=judge, summary=summary)
    records_path = args.out / "verdicts.jsonl"
    emitter = Emitter(
        spans=spans, telemetry=metrics, redaction=DEFAULT_REDACTION, verdict_topic="file"
    )
    with records_path.open("w", encoding="utf-8") as fh:
        for verdict in verdicts:
            record_sampling(
                metrics,
                verdict.rubric_id,
                "judge" if verdict.judged else "skip",
                verdict.sample_reason,
            )
            for record in emitter.verdict(verdict):
                if record.value is not None:
                    fh.write(record.value.decode("utf-8") + "\n")
    spans.shutdown()
    console.print(_table(verdicts, console.width))
    console.print(
        f"{summary.traces} traces, {summary.spans} spans -> {summary.verdicts} verdicts: "
        + ", ".join(f"{k} {v}" for k, v in sorted(summary.outcomes.items())),
        soft_wrap=True,
    )
    _plain(console, f"verdict spans (OTLP/JSON lines): {spans_path}")
    _plain(console, f"verdict records (JSON lines):    {records_path}")
    replay = shlex.join(["replay", str(traces_file), "--rubrics", str(rubrics_dir)])
    _plain(console, f"replay them yourself: {invocation()} {replay}")
    if args.serve:
        console.print(f"serving http://127.0.0.1:{server.port}/metrics; Ctrl-C to stop")
    else:
        _plain(console, "metrics were served during the run only; add --serve to keep /metrics up")
    if args.serve:
        try:
            await asyncio.Event().wait()
        finally:
            await server.stop()
    await server.stop()
    sys.stdout.flush()
    return 0


def _console() -> Console:
    console = Console()
    # Not a terminal (pipe, file, CI log): rich would assume 80 columns. Asked
    # of the file itself, as FORCE_COLOR (set in many CI runners) makes rich
    # treat a pipe as a terminal.
    if not _isatty(console.file):
        console = Console(width=max(console.width, _MIN_WIDTH))
    return console


def _isatty(file: IO[str]) -> bool:
    try:
        return file.isatty()
    except (AttributeError, ValueError):
        return False


def _plain(console: Console, text: str) -> None:
    # Unwrapped and without markup, so paths survive copy and paste.
    console.print(text, soft_wrap=True, markup=False, highlight=False)


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _first_problem(verdict: Verdict) -> str:
    """The first failing (else errored) check, gates before advisory ones, and how many more."""
    bad = [c for c in verdict.checks if c.outcome in (Outcome.FAIL, Outcome.ERROR)]
    if not bad:
        return "-"
    bad.sort(key=lambda c: (not c.gate, c.outcome is not Outcome.FAIL))
    first = bad[0]
    label = first.name if first.gate else f"{first.name} (no gate)"
    if first.outcome is Outcome.ERROR:
        label += " ERROR"
    more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
    detail = _shorten(first.detail, max(_PROBLEM_CHARS - len(label) - 2, 30))
    return f"{label}: {detail}{more}"


def _criteria(verdict: Verdict) -> str:
    counts: dict[str, int] = {}
    for c in verdict.criteria:
        counts[c.outcome.value] = counts.get(c.outcome.value, 0) + 1
    return ", ".join(f"{k} {n}" for k, n in sorted(counts.items())) or "-"


def _table(verdicts: list[Verdict], width: int) -> Table:
    judged = any(v.judged for v in verdicts)
    table = Table(
        title="sidecar demo: verdicts",
        caption=None if judged else "criteria: all SKIPPED (judge did not run)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column("trace", style="dim", no_wrap=True)
    with_agent = width >= _AGENT_WIDTH
    if with_agent:
        table.add_column("agent", no_wrap=True)
    table.add_column("rubric", no_wrap=True)
    table.add_column("outcome", no_wrap=True)
    table.add_column("first failed check", ratio=1)
    if judged:
        table.add_column("criteria", no_wrap=True)
    for v in verdicts:
        row = [v.trace_id[:8]]
        if with_agent:
            row.append(v.agent or "?")
        row += [v.rubric_id, f"[{_STYLE[v.outcome]}]{v.outcome.value}[/]", _first_problem(v)]
        if judged:
            row.append(_criteria(v))
        table.add_row(*row)
    return table
