"""``sidecar judge --rubric FILE --trace FILE``: one judgment, shown in full.

Prints the exact request (system instruction and data blocks with their
nonce), the model's raw answer and the parsed verdict: the first thing to look
at when a verdict seems wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from sidecar.commands._wiring import build_judge, judge_credentials_hint
from sidecar.engine.offline import ReplaySummary, collect_traces
from sidecar.errors import ConfigError
from sidecar.evaluate.pipeline import mark_untrusted
from sidecar.evaluate.rubric import Rubric, load_rubric
from sidecar.evaluate.transcript import build_transcript
from sidecar.judge import JudgeResult, Screening, screen
from sidecar.judge.prompt import JudgeRequest, build_request
from sidecar.judge.service import JudgeService
from sidecar.settings import load_settings


def register(sub: Any) -> None:
    parser = sub.add_parser("judge", help="run one judgment and show request, raw answer, verdict")
    parser.add_argument(
        "--rubric", type=Path, required=True, help="rubric YAML file with a judge block"
    )
    parser.add_argument("--trace", type=Path, required=True, help="trace file (any replay format)")
    parser.add_argument("--trace-id", help="which trace in the file (default: the first)")
    parser.add_argument("--config", type=Path, help="YAML settings file (judge backend settings)")
    parser.add_argument("--dry-run", action="store_true", help="print the request only")
    parser.set_defaults(handler=handle, error_prefix=parser.prog)


def handle(args: argparse.Namespace) -> int:
    rubric = load_rubric(args.rubric)
    if rubric.judge is None:
        raise ConfigError(f"{args.rubric}: rubric {rubric.id!r} has no judge: block to run")
    if not args.trace.is_file():
        what = "a folder; give one trace file" if args.trace.is_dir() else "no such trace file"
        raise ConfigError(f"{args.trace}: {what}")
    traces = collect_traces([args.trace], ReplaySummary())
    if args.trace_id:
        traces = [t for t in traces if t.trace_id == args.trace_id.lower()]
    if not traces:
        raise ConfigError(
            f"{args.trace}: no trace {args.trace_id or ''} found in the file".replace("  ", " ")
        )
    settings = load_settings(args.config)
    transcript = mark_untrusted(build_transcript(traces[0]), rubric.untrusted_tools)
    # The same per-block cap as the service, so the request shown is the one it sends.
    request = build_request(
        rubric,
        transcript,
        max_block_chars=settings.judge.max_block_chars,
        max_request_chars=settings.judge.max_request_chars,
    )
    screening = screen(request.blocks)
    out = sys.stdout
    out.write(
        f"# trace {transcript.trace_id}  rubric {rubric.id} v{rubric.version}  "
        f"model {rubric.judge.model}  nonce {request.nonce}\n\n"
    )
    out.write("## system instruction\n\n" + request.system_instruction + "\n\n")
    out.write("## user content\n\n" + request.user_text + "\n\n")
    if args.dry_run:
        return 0
    judge = build_judge(settings.judge, None)
    if judge is None:
        raise ConfigError(judge_credentials_hint())
    result = asyncio.run(_judge(judge, rubric, request, screening))
    out.write("## raw answer\n\n" + (result.raw_output or "(none)") + "\n\n")
    out.write("## parsed verdict\n\n")
    verdict: dict[str, Any] = {
        "judged": result.judged,
        "error_reason": result.error_reason,
        "injection_suspected": screening.suspected or result.judge_flagged,
        "screening_signals": list(screening.signals),
        "judge_flagged": result.judge_flagged,
        "review": result.review,
        "tokens": {"input": result.input_tokens, "output": result.output_tokens},
        "criteria": [
            {
                "name": c.name,
                "outcome": c.outcome.value,
                "gate": c.gate,
                "evidence": c.evidence,
                "reason": c.reason,
            }
            for c in result.criteria
        ],
    }
    out.write(json.dumps(verdict, indent=2, ensure_ascii=False) + "\n")
    return 0


async def _judge(
    judge: JudgeService, rubric: Rubric, request: JudgeRequest, screening: Screening
) -> JudgeResult:
    async with judge:
        return await judge.judge_request(rubric, request, screening)
