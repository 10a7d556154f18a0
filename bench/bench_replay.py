"""Replay-path throughput: spans/s through decode -> assemble -> transcript -> checks -> verdict.

Two baselines measured in the same run on the same records, so the printed
ratios say what each layer costs, independent of how fast this machine is:

- ``attribute read``: parse each record with protobuf (upb) and read every
  field and attribute of every span in a plain loop: the floor of any decoder;
- ``decode only``: ``sidecar.ingest.decode`` of the records.

``--grounding`` times the ``grounded_numbers`` check alone instead (median µs per
trace over the transcripts of the same generated traces), with its scans as
they are and as they were before their digit anchors and the skipped second
pass, in alternation in one process.

``--verdicts FILE`` writes the verdict records of the replay, one per line in
a stable order, and prints their sha256: run it before and after a change to
show the verdicts are identical (``--traces 10000`` for the issue's check).

    .venv/bin/python bench/bench_replay.py [--traces 2000] [--repeats 5] [--verdicts FILE]
        [--clock wall|cpu]
    .venv/bin/python bench/bench_replay.py --grounding [--traces 2000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue  # noqa: E402

from sidecar.engine.offline import ReplaySummary, evaluate_traces  # noqa: E402
from sidecar.evaluate.rubric import load_rubrics  # noqa: E402
from sidecar.evaluate.sample import Sampler  # noqa: E402
from sidecar.ingest.assemble import Assembler  # noqa: E402
from sidecar.ingest.decode import decode  # noqa: E402
from sidecar.model import DecideReason  # noqa: E402
from sidecar.wire.verdicts import verdict_json  # noqa: E402
from tests.agents.genai_spans import make_cases  # noqa: E402
from tests.agents.otlp import split_requests  # noqa: E402
from tests.integration.scenario import write_rubrics  # noqa: E402


def decode_only(records: list[bytes]) -> int:
    return sum(len(decode(r)) for r in records)


def _value(value: AnyValue) -> object:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind is not None else None


def attribute_read(records: list[bytes]) -> int:
    """Parse with upb and touch every span field and attribute value: no model, no checks."""
    spans = 0
    for record in records:
        request = ExportTraceServiceRequest.FromString(record)
        for resource_spans in request.resource_spans:
            for kv in resource_spans.resource.attributes:
                _value(kv.value)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans += 1
                    fields: list[object] = [span.trace_id.hex(), span.span_id.hex()]
                    fields.append(span.parent_span_id.hex())
                    fields += [span.name, span.kind, span.start_time_unix_nano]
                    fields += [span.end_time_unix_nano, span.status.code, span.status.message]
                    for kv in span.attributes:
                        fields.append(_value(kv.value))
                    for event in span.events:
                        fields += [event.name, event.time_unix_nano]
                        fields += [_value(kv.value) for kv in event.attributes]
                    for link in span.links:
                        fields += [link.trace_id.hex(), link.span_id.hex()]
    return spans


def verdict_lines(records: list[bytes], rubrics: list) -> list[str]:  # type: ignore[type-arg]
    """The replay's verdict records as JSON lines, sorted by (trace, rubric)."""
    verdicts = replay_verdicts(records, rubrics)
    ordered = sorted(verdicts, key=lambda v: (v.trace_id, v.rubric_id))
    return [verdict_json(v) for v in ordered]


def replay_verdicts(records: list[bytes], rubrics: list) -> list:  # type: ignore[type-arg]
    """The verdicts ``sidecar replay`` gives for ``records`` (judge off), in trace order."""
    assembler = Assembler(decision_wait=0.0, max_trace_age=1e9, max_open_traces=10**9)
    traces = []
    for record in records:
        traces.extend(assembler.add(decode(record), 0.0))
    traces.extend(assembler.drain(DecideReason.FLUSH))
    return asyncio.run(
        evaluate_traces(
            traces, rubrics, Sampler(judge_enabled=False), judge=None, summary=ReplaySummary()
        )
    )


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


def grounding_micro(records: list[bytes], repeats: int) -> tuple[int, float, float]:
    """(traces, median µs per trace unanchored, anchored) of ``grounded_numbers`` alone.

    "Unanchored" is the check with its scans as they were: the claim, evidence-form
    and unreadable-form patterns without their leading digit lookahead, and the
    second evidence pass run on every text. Both are timed in alternation in this
    process, on the transcripts of the replay's traces, so load affects both alike.
    """
    import re

    from sidecar.evaluate.checks import grounding
    from sidecar.evaluate.transcript import build_transcript

    assembler = Assembler(decision_wait=0.0, max_trace_age=1e9, max_open_traces=10**9)
    traces = []
    for record in records:
        traces.extend(assembler.add(decode(record), 0.0))
    traces.extend(assembler.drain(DecideReason.FLUSH))
    transcripts = [build_transcript(t) for t in traces]
    spec = grounding.GroundedNumbers(name="grounded", type="grounded_numbers")
    names = ("_CLAIM", "_EVIDENCE_FORM", "_UNREADABLE", "_MULTI_PART")
    anchored = {name: getattr(grounding, name) for name in names}
    unanchored = {
        name: re.compile(anchored[name].pattern.removeprefix("(?=[0-9])")) for name in names[:3]
    }
    unanchored["_MULTI_PART"] = re.compile("")  # always found: the second pass always runs

    def run(patterns: dict[str, re.Pattern[str]]) -> float:
        for name, pattern in patterns.items():
            setattr(grounding, name, pattern)
        findings: list[object] = []
        start = CLOCK()
        for transcript in transcripts:
            findings.append(grounding.grounded_numbers(spec, transcript))
        elapsed = CLOCK() - start
        outcomes.append(findings)
        return elapsed / len(transcripts) * 1e6

    outcomes: list[list[object]] = []
    before: list[float] = []
    after: list[float] = []
    try:
        for _ in range(repeats):
            before.append(run(unanchored))
            after.append(run(anchored))
    finally:
        run(anchored)
    assert all(o == outcomes[0] for o in outcomes), "the scans disagree"
    return len(transcripts), statistics.median(before), statistics.median(after)


# The clock of ``timed``: wall time, or with ``--clock cpu`` this process's CPU time (the
# replay runs in one thread), which other jobs on a shared machine disturb far less.
CLOCK = time.perf_counter


def timed(fn, *args) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    start = CLOCK()
    spans = fn(*args)
    return CLOCK() - start, spans


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--verdicts", type=Path, help="write the verdict records here, sorted")
    parser.add_argument("--grounding", action="store_true", help="time grounded_numbers alone")
    parser.add_argument(
        "--clock", choices=("wall", "cpu"), default="wall", help="cpu: this process's CPU time"
    )
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    cases = make_cases(args.traces, seed=1)
    records = [part for c in cases for part in split_requests(c.spans, 2)]
    if args.grounding:
        count, before, after = grounding_micro(records, args.repeats)
        print(
            f"grounded_numbers alone, {count} traces, median µs per trace: "
            f"unanchored scans {before:.1f}, anchored {after:.1f}, ratio {before / after:.2f}"
        )
        return
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        rubrics = load_rubrics(write_rubrics(Path(tmp)))
    if args.verdicts is not None:
        lines = verdict_lines(records, rubrics)
        text = "".join(line + "\n" for line in lines)
        args.verdicts.write_text(text)
        digest = hashlib.sha256(text.encode()).hexdigest()
        print(f"verdicts: {len(lines)} records to {args.verdicts}, sha256 {digest}")
    read_rates, base_rates, full_rates = [], [], []
    for _ in range(args.repeats):
        seconds, spans = timed(attribute_read, records)
        read_rates.append(spans / seconds)
        seconds, spans = timed(decode_only, records)
        base_rates.append(spans / seconds)
        seconds, spans = timed(pipeline, records, rubrics)
        full_rates.append(spans / seconds)
    read = statistics.median(read_rates)
    base, full = statistics.median(base_rates), statistics.median(full_rates)
    print(f"records {len(records)}, spans {spans}, traces {len(cases)}, repeats {args.repeats}")
    print(f"baseline attribute read: median {read:10.0f} spans/s")
    print(f"baseline decode only   : median {base:10.0f} spans/s")
    print(f"full replay pipeline   : median {full:10.0f} spans/s")
    print(f"ratio decode/read      : {base / read:.3f}")
    print(f"ratio pipeline/decode  : {full / base:.3f}")
    print(
        f"bench_replay: spans={spans} read={read:.0f} decode={base:.0f} replay={full:.0f} "
        f"decode/read={base / read:.3f} replay/decode={full / base:.3f}"
    )


if __name__ == "__main__":
    main()
