"""Where one trace's CPU goes, stage by stage, in one process: the per-trace budget.

``bench_kafka.py`` measures the whole service against the Collector; this
benchmark times each stage of the service's work alone, over the same load
(``tests.agents.genai_spans`` traces of six spans, one OTLP record each, the
four-check refund rubric of ``refund_policies.py``, judge off), in CPU
microseconds per trace, the best of ``--repeats``:

- ``read``: every field and attribute of the record read through the upb
  accessors and dropped (``bench_replay.attribute_read``), the floor of any
  reader that looks at every span;
- ``decode``: the record decoded into the service's spans
  (``sidecar.ingest.decode``);
- ``assemble``: records fed to the trace buffer and every trace decided
  (the decode included);
- ``transcript``: the transcript built from each decided trace;
- ``checks``: the rubric's four checks on each transcript;
- ``plan``: the transcript, the checks, routing and sampling together
  (``sidecar.evaluate.pipeline.plan``, as the service calls it);
- ``conclude``: each case concluded into its verdict (judge off);
- ``metrics``: the verdict counted in the outcome families (with exemplars);
- ``drift``: the verdict through the drift detectors and their gauges, once
  every stream holds its full set of bettors (a service's steady state);
- ``record``: the verdict record's JSON.

With ``--peer SPANS_PER_CPU_S`` (the Collector tail_sampling figure of
``bench_kafka.py`` on the same machine) it also prints what a trace may cost
for the service to reach half of that per core, beside the stages every trace
pays whatever its rubric reads (decode, drift, metrics, record).

    .venv/bin/python bench/bench_stages.py [--traces 3000] [--repeats 5] [--peer 96774]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_replay import attribute_read, decode_only  # noqa: E402
from refund_policies import RUBRIC  # noqa: E402

from sidecar.adapters.prometheus import Metrics, record_verdict  # noqa: E402
from sidecar.drift.attribute import verdict_observation  # noqa: E402
from sidecar.drift.detect import DEFAULT_BASELINE, DEFAULT_EVERY, MAX_GAMBLERS  # noqa: E402
from sidecar.evaluate.pipeline import Case, conclude, plan  # noqa: E402
from sidecar.evaluate.plan import compile_plan  # noqa: E402
from sidecar.evaluate.rubric import load_rubrics  # noqa: E402
from sidecar.evaluate.sample import Sampler  # noqa: E402
from sidecar.evaluate.transcript import build_transcript  # noqa: E402
from sidecar.evaluate.verdict import Verdict, decided  # noqa: E402
from sidecar.ingest.assemble import Assembler  # noqa: E402
from sidecar.model import DecideReason, Trace  # noqa: E402
from sidecar.wire.verdicts import verdict_json  # noqa: E402
from tests.agents.genai_spans import make_cases  # noqa: E402
from tests.agents.otlp import encode_request  # noqa: E402

SPANS_PER_TRACE = 6
# Nanoseconds between two verdicts' decision times (the drift detectors' clock).
_STEP_NS = 10_000_000


def _assemble(records: list[bytes]) -> list[Trace]:
    buffer = Assembler(decision_wait=0.0, max_trace_age=1e9, max_open_traces=10**9)
    traces: list[Trace] = []
    for record in records:
        traces.extend(buffer.add_record(record, "otlp_proto", 0.0, None))
    traces.extend(buffer.drain(DecideReason.FLUSH))
    return traces


def _plan(traces: list[Trace], rubrics: list) -> list[Case]:  # type: ignore[type-arg]
    sampler = Sampler(judge_enabled=False)
    return [case for trace in traces for case in plan(trace, rubrics, sampler, 0.0)[1]]


def _conclude(cases: list[Case]) -> list[Verdict]:
    return [decided(conclude(case, None), _STEP_NS) for case in cases]


def _best(run: Callable[[], object], count: int, repeats: int) -> float:
    """Best CPU µs per item of ``repeats`` runs over ``count`` items."""
    figures = []
    for _ in range(repeats):
        start = time.process_time()
        run()
        figures.append((time.process_time() - start) / count * 1e6)
    return min(figures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--peer", type=float, help="Collector tail_sampling spans per CPU second (bench_kafka.py)"
    )
    args = parser.parse_args()
    records = [encode_request(case.spans) for case in make_cases(args.traces, seed=1)]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "bench.yaml").write_text(RUBRIC)
        rubrics = load_rubrics(Path(tmp))
    rubric_plan = compile_plan(rubrics).rubrics[0]
    traces = _assemble(records)
    transcripts = [build_transcript(trace) for trace in traces]
    cases = _plan(traces, rubrics)
    verdicts = _conclude(cases)
    n, repeats = len(traces), args.repeats
    if n != args.traces or len(verdicts) != n:
        sys.exit(f"expected {args.traces} traces and verdicts, got {n} and {len(verdicts)}")

    # The drift detectors at steady state: every stream fed until it holds all its bettors.
    metrics = Metrics()
    rounds = -(-(DEFAULT_BASELINE + DEFAULT_EVERY * MAX_GAMBLERS) // n) + 1
    clock = [0]

    def observations() -> list:  # type: ignore[type-arg]
        found = []
        for verdict in verdicts:
            clock[0] += _STEP_NS
            found.append(verdict_observation(dataclasses.replace(verdict, decided_at=clock[0])))
        return found

    for _ in range(rounds):
        for observation in observations():
            metrics._drift(observation)
    drift_rounds = [observations() for _ in range(repeats)]

    def drift() -> None:
        for observation in drift_rounds.pop():
            metrics._drift(observation)

    stages = {
        "read": _best(lambda: attribute_read(records), n, repeats),
        "decode": _best(lambda: decode_only(records), n, repeats),
        "assemble": _best(lambda: _assemble(records), n, repeats),
        "transcript": _best(lambda: [build_transcript(t) for t in traces], n, repeats),
        "checks": _best(lambda: [rubric_plan.run_checks(t) for t in transcripts], n, repeats),
        "plan": _best(lambda: _plan(traces, rubrics), n, repeats),
        "conclude": _best(lambda: _conclude(cases), n, repeats),
        "metrics": _best(lambda: [record_verdict(metrics, v) for v in verdicts], n, repeats),
        "drift": _best(drift, n, repeats),
        "record": _best(lambda: [verdict_json(v).encode() for v in verdicts], n, repeats),
    }
    streams = list(metrics.drift.streams.values())
    bettors = max((len(s.passes._gamblers) for s in streams), default=0)
    print(f"{n} traces of {SPANS_PER_TRACE} spans, best of {repeats}, CPU µs per trace")
    print(f"(drift: {len(streams)} streams, up to {bettors} bettors each)")
    for name, micros in stages.items():
        print(f"  {name:<11} {micros:8.1f}")
    # "plan" is the transcript, the checks, routing and sampling together.
    evaluate = stages["assemble"] + stages["plan"] + stages["conclude"]
    outputs = stages["metrics"] + stages["drift"] + stages["record"]
    print(f"  {'total':<11} {evaluate + outputs:8.1f}  (assemble, plan, conclude and the outputs)")
    if args.peer:
        budget = SPANS_PER_TRACE / (0.5 * args.peer) * 1e6
        every = stages["decode"] + outputs
        print(
            f"0.5x of {args.peer:.0f} spans/CPU-s: {budget:.1f} µs per trace; "
            f"paid by every trace whatever its rubric reads (decode, metrics, drift, record): "
            f"{every:.1f} µs ({every / budget:.2f}x the budget)"
        )
    summary = " ".join(f"{name}={micros:.1f}" for name, micros in stages.items())
    print(f"bench_stages: traces={n} {summary}")


if __name__ == "__main__":
    main()
