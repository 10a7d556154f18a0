"""Run the pipeline over files instead of Kafka (``sidecar replay`` and ``sidecar demo``).

Accepted inputs, detected per file:

- OTLP/JSON lines: one ``ExportTraceServiceRequest`` per line (the Collector's
  file exporter with ``format: json``), or one pretty-printed JSON document;
- the file exporter's ``format: proto``: each message prefixed by its length as
  a 4-byte big-endian integer;
- a single binary ``ExportTraceServiceRequest``.

Every trace in the input is decided at end of input (reason ``flush``) unless
it completed earlier; an undecodable line or message is reported and skipped,
never fatal.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sidecar.assemble import Assembler
from sidecar.decode import Encoding, decode
from sidecar.errors import DecodeError
from sidecar.judge import Judge
from sidecar.model import DecideReason, Span, Trace
from sidecar.pipeline import judge_cases, plan
from sidecar.rubric import Rubric
from sidecar.sample import Sampler
from sidecar.verdict import Verdict


@dataclass(slots=True)
class ReplaySummary:
    files: int = 0
    records: int = 0
    bad_records: list[str] = field(default_factory=list)
    spans: int = 0
    traces: int = 0
    unrouted_traces: int = 0
    verdicts: int = 0
    judged: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)


def _length_prefixed(data: bytes) -> list[bytes] | None:
    """Split the file exporter's proto format; None if ``data`` is not in it."""
    parts: list[bytes] = []
    pos = 0
    while pos < len(data):
        if pos + 4 > len(data):
            return None
        size = int.from_bytes(data[pos : pos + 4], "big")
        pos += 4
        if size == 0 or pos + size > len(data):
            return None
        parts.append(data[pos : pos + size])
        pos += size
    return parts or None


def _json_document(data: bytes) -> bool:
    try:
        return isinstance(json.loads(data), dict)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False


def _json_lines(data: bytes) -> bool:
    """True when some line is a JSON object, so bad lines around it are bad records."""
    for line in data.splitlines():
        if line.lstrip()[:1] != b"{":
            continue
        try:
            if isinstance(json.loads(line), dict):
                return True
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
    return False


def read_payloads(path: Path) -> Iterator[tuple[str, bytes, Encoding]]:
    """Yield (where, payload, encoding) for every request in a file."""
    data = path.read_bytes()
    parts = _length_prefixed(data)
    if parts is not None:
        # The framing adding up is strong evidence; the first message confirms
        # it. A later corrupt message is then one bad record, not a lost file.
        try:
            decode(parts[0], "otlp_proto")
        except DecodeError:
            parts = None
    if parts is not None:
        for index, part in enumerate(parts, start=1):
            yield f"{path}#{index}", part, "otlp_proto"
        return
    # Checked before JSON lines: a pretty-printed document's lines are not JSON
    # objects, and a one-line file is the same either way.
    if not _json_document(data) and _json_lines(data):
        # A corrupt line (even the first) is one bad record, not a lost file.
        for number, line in enumerate(data.splitlines(), start=1):
            if line.strip():
                yield f"{path}:{number}", line, "otlp_json"
        return
    yield f"{path}", data, "auto"


def collect_traces(paths: Sequence[Path], summary: ReplaySummary) -> list[Trace]:
    assembler = Assembler(
        decision_wait=0.0,
        max_trace_age=float("inf"),
        max_open_traces=10**9,
        max_spans_per_trace=10**9,
    )
    traces: list[Trace] = []
    for path in paths:
        summary.files += 1
        for where, payload, encoding in read_payloads(path):
            summary.records += 1
            try:
                spans: list[Span] = decode(payload, encoding)
            except DecodeError as exc:
                summary.bad_records.append(f"{where}: {exc.reason}: {exc}")
                continue
            summary.spans += len(spans)
            traces.extend(assembler.add(spans, 0.0))
    traces.extend(assembler.drain(DecideReason.FLUSH))
    summary.traces = len(traces)
    return traces


async def evaluate_traces(
    traces: Sequence[Trace],
    rubrics: Sequence[Rubric],
    sampler: Sampler,
    *,
    judge: Judge | None,
    summary: ReplaySummary,
    now: float = 0.0,
) -> list[Verdict]:
    verdicts: list[Verdict] = []
    for trace in traces:
        _, cases = plan(trace, rubrics, sampler, now)
        if not cases:
            summary.unrouted_traces += 1
        verdicts.extend(await judge_cases(cases, judge))
    for verdict in verdicts:
        summary.verdicts += 1
        summary.judged += int(verdict.judged)
        summary.outcomes[verdict.outcome.value] = summary.outcomes.get(verdict.outcome.value, 0) + 1
    return verdicts
