"""Memory of the trace buffer: RSS with N open (undecided) six-span traces.

Each variant runs in a fresh subprocess, which generates the records one
at a time (six-span GenAI traces from the project's test agents, each with
its own trace id, one record per trace as a batching exporter sends them),
feeds them and then measures its resident set size (``VmRSS``) with every
trace still open. Per trace is (RSS after - RSS before feeding) / N.

- ``raw``: the record bytes kept in a list: the floor of any buffer that
  keeps what it read;
- ``decoded``: each record decoded (``sidecar.ingest.decode``) and the span
  lists kept: the decoded representation;
- ``buffer``: the service's trace buffer (``TraceBuffer`` over an
  ``Assembler`` with ``max_open_traces`` = N and a decision wait that does
  not pass), fed ``Record`` objects as the Kafka source gives them;
- ``buffer-json``: the same buffer fed the same traces as OTLP/JSON records
  (the Collector's ``otlp_json`` encoding), which it holds packed.

Runs are repeated (``--repeats``, each in its own process); medians are
printed, with the buffer's ratio to the raw bytes.

    .venv/bin/python bench/bench_memory.py [--traces 50000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

VARIANTS = ("raw", "decoded", "buffer", "buffer-json")
TEMPLATES = 200


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def templates(as_json: bool) -> list[tuple[bytes, bytes]]:
    """(record, its trace id) of six-span traces, each trace id replaced per generated trace."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from sidecar.ingest.otlpjson import request_to_json_line
    from tests.agents.genai_spans import make_cases
    from tests.agents.otlp import encode_request

    cases = [c for c in make_cases(TEMPLATES * 2, seed=7) if len(c.spans) == 6][:TEMPLATES]
    shapes = [(encode_request(c.spans), bytes.fromhex(c.trace_id)) for c in cases]
    if not as_json:
        return shapes
    return [
        (request_to_json_line(ExportTraceServiceRequest.FromString(r)).encode(), t.hex().encode())
        for r, t in shapes
    ]


def records(n: int, shapes: list[tuple[bytes, bytes]], as_json: bool) -> Iterator[bytes]:
    """``n`` records, each a fresh bytes object with its own trace id."""
    for index in range(n):
        record, trace_id = shapes[index % len(shapes)]
        prefix = (index + 1).to_bytes(8, "big")
        new_id = prefix.hex().encode() + trace_id[16:] if as_json else prefix + trace_id[8:]
        yield record.replace(trace_id, new_id)


def measure(variant: str, n: int) -> dict[str, float]:
    from sidecar.engine.traces import TraceBuffer
    from sidecar.ingest.assemble import Assembler
    from sidecar.ingest.decode import decode
    from sidecar.ingest.decode_logs import decode_logs
    from sidecar.ingest.handover import Handover
    from sidecar.ports import Record

    as_json = variant == "buffer-json"
    shapes = templates(as_json)
    kept: list[object] = []
    buffer = TraceBuffer(
        Assembler(decision_wait=1e9, max_trace_age=1e9, max_open_traces=n),
        Handover(keep_s=60.0),
        spans_topic="spans",
        logs_topic=None,
        encoding="otlp_json" if as_json else "otlp_proto",
        decoder=decode,
        log_decoder=decode_logs,
        clock=lambda: 0.0,
    )
    gc.collect()
    before = rss_mb()
    payload = 0
    loop = asyncio.new_event_loop()
    for offset, record in enumerate(records(n, shapes, as_json)):
        payload += len(record)
        if variant == "raw":
            kept.append(record)
        elif variant == "decoded":
            kept.append(decode(record, "otlp_proto"))
        else:
            decided = loop.run_until_complete(
                buffer.add(Record(offset % 8, offset, None, record, "spans"), 0.0)
            )
            assert not decided, "the buffer decided a trace early"
    loop.close()
    gc.collect()
    after = rss_mb()
    if variant.startswith("buffer"):
        assert buffer.assembler.open_traces == n, buffer.assembler.open_traces
    return {"rss_mb": after, "delta_mb": after - before, "payload_mb": payload / 2**20}


def run_variant(variant: str, n: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", variant, "--traces", str(n)],
        check=True,
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.traces)))
        return
    variants = [v for v in args.variants.split(",") if v]
    runs: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    for _ in range(args.repeats):
        for variant in variants:
            runs[variant].append(run_variant(variant, args.traces))
    n = args.traces
    medians: dict[str, tuple[float, float]] = {}
    payload = runs[variants[0]][0]["payload_mb"]
    print(f"traces {n} (six spans each), records {payload:.1f} MB, repeats {args.repeats}")
    for variant in variants:
        total = statistics.median(r["rss_mb"] for r in runs[variant])
        delta = statistics.median(r["delta_mb"] for r in runs[variant])
        spread = max(r["rss_mb"] for r in runs[variant]) - min(r["rss_mb"] for r in runs[variant])
        medians[variant] = (total, delta)
        print(
            f"{variant:11s}: RSS median {total:7.1f} MB (spread {spread:.1f}), "
            f"{delta * 1024 / n:6.2f} KB per trace"
        )
    line = " ".join(
        f"{v}_rss={t:.1f}MB {v}_per_trace={d * 1024 / n:.2f}KB" for v, (t, d) in medians.items()
    )
    if "raw" in medians and "buffer" in medians:
        line += f" buffer/raw={medians['buffer'][1] / medians['raw'][1]:.2f}"
    print(f"bench_memory: traces={n} {line}")


if __name__ == "__main__":
    main()
