"""Replay-path throughput: spans/s through decode -> assemble -> transcript -> checks -> verdict.

Baseline measured in the same run: protobuf decoding alone (``sidecar.decode``)
of the same records, so the printed ratio says how much the rest of the
pipeline costs on top of parsing, independent of how fast this machine is.

    .venv/bin/python bench/bench_replay.py [--traces 2000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sidecar.assemble import Assembler  # noqa: E402
from sidecar.decode import decode  # noqa: E402
from sidecar.model import DecideReason  # noqa: E402
from sidecar.replay import ReplaySummary, evaluate_traces  # noqa: E402
from sidecar.rubric import load_rubrics  # noqa: E402
from sidecar.sample import Sampler  # noqa: E402
from tests.agents.genai_spans import make_cases  # noqa: E402
from tests.agents.otlp import split_requests  # noqa: E402
from tests.integration.scenario import write_rubrics  # noqa: E402


def decode_only(records: list[bytes]) -> int:
    return sum(len(decode(r)) for r in records)


def pipeline(records: list[bytes], rubrics: list) -> int:  # type: ignore[type-arg]
    assembler = Assembler(decision_wait=0.0, max_trace_age=1e9, max_open_traces=10**9)
    traces = []
    spans = 0
    for record in records:
        decoded = decode(record)
        spans += len(decoded)
        traces.extend(assembler.add(decoded, 0.0))
    traces.extend(assembler.drain(DecideReason.FLUSH))
    summary = ReplaySummary()
    verdicts = asyncio.run(
        evaluate_traces(traces, rubrics, Sampler(judge_enabled=False), judge=None, summary=summary)
    )
    assert len(verdicts) == len(traces)
    return spans


def timed(fn, *args) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    spans = fn(*args)
    return time.perf_counter() - start, spans


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    cases = make_cases(args.traces, seed=1)
    records = [part for c in cases for part in split_requests(c.spans, 2)]
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        rubrics = load_rubrics(write_rubrics(Path(tmp)))
    base_rates, full_rates = [], []
    for _ in range(args.repeats):
        seconds, spans = timed(decode_only, records)
        base_rates.append(spans / seconds)
        seconds, spans = timed(pipeline, records, rubrics)
        full_rates.append(spans / seconds)
    base, full = statistics.median(base_rates), statistics.median(full_rates)
    print(f"records {len(records)}, spans {spans}, traces {len(cases)}, repeats {args.repeats}")
    print(f"baseline decode only : median {base:10.0f} spans/s")
    print(f"full replay pipeline : median {full:10.0f} spans/s")
    print(f"ratio pipeline/decode: {full / base:.3f}")


if __name__ == "__main__":
    main()
