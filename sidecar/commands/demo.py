"""``sidecar demo``: bundled traces and rubrics through the full pipeline, on embedded defaults."""

from __future__ import annotations

import argparse
import asyncio
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from sidecar.adapters.http import MetricsServer
from sidecar.adapters.metrics import Metrics, record_rubrics, record_sampling, record_verdict
from sidecar.adapters.otel import JsonLinesSpanExporter, VerdictSpans, tracer_provider
from sidecar.judge.config import JudgeSettings
from sidecar.model import CaseOutcome, Outcome
from sidecar.replay import ReplaySummary, collect_traces, evaluate_traces
from sidecar.rubric import load_rubrics
from sidecar.sample import Sampler
from sidecar.verdict import Verdict
from sidecar.wiring import build_judge, build_screener, judge_credentials_hint

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
    parser.add_argument("--metrics-port", type=int, default=9464, help="0 picks a free port")
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
    console = Console(stderr=False)
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
    args.out.mkdir(parents=True, exist_ok=True)
    spans_path = args.out / "verdict-spans.jsonl"
    spans_path.unlink(missing_ok=True)
    spans = VerdictSpans(tracer_provider(JsonLinesSpanExporter(spans_path), batch=False))

    judge = build_judge(JudgeSettings(), metrics)
    if judge is None:
        console.print(
            f"[bold]judge did not run[/]: {judge_credentials_hint()} Criteria are SKIPPED; "
            "deterministic checks ran on every trace."
        )
    console.print(f"metrics: http://127.0.0.1:{server.port}/metrics")
    sampler = Sampler(judge_enabled=judge is not None, judge_all=True)
    summary = ReplaySummary()
    traces = collect_traces([traces_file], summary)
    verdicts = await evaluate_traces(
        traces, rubrics, sampler, judge=judge, screener=build_screener(), summary=summary
    )
    records_path = args.out / "verdicts.jsonl"
    with records_path.open("w", encoding="utf-8") as fh:
        for verdict in verdicts:
            spans.emit(verdict)
            record_verdict(metrics, verdict)
            record_sampling(
                metrics,
                verdict.rubric_id,
                "judge" if verdict.judged else "skip",
                verdict.sample_reason,
            )
            fh.write(verdict.to_json() + "\n")
    spans.shutdown()
    console.print(_table(verdicts))
    console.print(
        f"{summary.traces} traces, {summary.spans} spans -> {summary.verdicts} verdicts: "
        + ", ".join(f"{k} {v}" for k, v in sorted(summary.outcomes.items()))
    )
    console.print(f"verdict spans (OTLP/JSON lines): {spans_path}")
    console.print(f"verdict records (JSON lines):    {records_path}")
    console.print(f"replay them yourself: sidecar replay {traces_file} --rubrics {rubrics_dir}")
    if args.serve:
        console.print("serving /metrics; Ctrl-C to stop")
        try:
            await asyncio.Event().wait()
        finally:
            await server.stop()
    await server.stop()
    sys.stdout.flush()
    return 0


def _table(verdicts: list[Verdict]) -> Table:
    table = Table(title="sidecar demo: verdicts", show_lines=False)
    table.add_column("trace", style="dim")
    table.add_column("agent")
    table.add_column("rubric")
    table.add_column("outcome")
    table.add_column("failed / errored checks")
    table.add_column("criteria")
    for v in verdicts:
        bad = [
            f"{c.name}: {c.detail}" for c in v.checks if c.outcome in (Outcome.FAIL, Outcome.ERROR)
        ]
        counts: dict[str, int] = {}
        for c in v.criteria:
            counts[c.outcome.value] = counts.get(c.outcome.value, 0) + 1
        table.add_row(
            v.trace_id[:12],
            f"{v.agent or '?'} {v.agent_version or ''}".strip(),
            f"{v.rubric_id} v{v.rubric_version}",
            f"[{_STYLE[v.outcome]}]{v.outcome.value}[/]",
            "\n".join(bad) or "-",
            ", ".join(f"{k} {n}" for k, n in sorted(counts.items())) or "-",
        )
    return table
