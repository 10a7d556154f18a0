"""Run the pipeline over files instead of Kafka (``sidecar replay`` and ``sidecar demo``).

Accepted inputs, detected per file:

- OTLP/JSON lines: one ``ExportTraceServiceRequest`` per line (the Collector's
  file exporter with ``format: json``), or one pretty-printed JSON document;
- the file exporter's ``format: proto``: each message prefixed by its length as
  a 4-byte big-endian integer;
- a single binary ``ExportTraceServiceRequest``.

Every trace in the input is decided at end of input (reason ``flush``) unless
it completed earlier; an undecodable line or message is reported and skipped,
never fatal. The traces are then evaluated ``concurrency`` at a time
(``judge.concurrency``; the judge keeps its own limits on top) and each
trace's verdicts are handed on as soon as they are decided
(:func:`stream_verdicts`), so a long replay prints as it goes. An exception
while evaluating one trace gives that trace errored verdicts (see
``sidecar.pipeline``) and is counted; the replay goes on.

Rubrics with ``scope: conversation`` are evaluated after the traces: each
trace that matches one becomes a turn, the turns are grouped by conversation
id and split at idle gaps (:mod:`sidecar.conversation.group`), and each
conversation gets one verdict at end of input. A trace such a rubric applies
to but that has no conversation id is counted (``turns_without_key``) and
skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sidecar.assemble import Assembler
from sidecar.conversation.evaluate import conversation_verdict, plan_conversation
from sidecar.conversation.group import group_conversations
from sidecar.conversation.turns import TurnRecord, turn_records
from sidecar.decode import Encoding, decode
from sidecar.errors import DecodeError
from sidecar.judge import Judge, screen_case
from sidecar.model import DecideReason, Span, Trace
from sidecar.pipeline import Fault, judge_cases, plan
from sidecar.rubric import Rubric
from sidecar.sample import Sampler
from sidecar.verdict import Verdict

log = logging.getLogger(__name__)


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
    # Faults while evaluating, by stage (each gave its trace errored verdicts).
    internal_errors: dict[str, int] = field(default_factory=dict)
    flags: dict[str, int] = field(default_factory=dict)
    conversations: int = 0
    turns_without_key: int = 0

    def fault(self, fault: Fault) -> None:
        self.internal_errors[fault.stage] = self.internal_errors.get(fault.stage, 0) + 1


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


# What json.loads may raise on hostile text: syntax, encoding, nesting, huge ints.
_NOT_JSON = (ValueError, RecursionError)


def _json_document(data: bytes) -> bool:
    try:
        return isinstance(json.loads(data), dict)
    except _NOT_JSON:
        return False


def _json_lines(data: bytes) -> bool:
    """True when some line is a JSON object, so bad lines around it are bad records."""
    for line in data.splitlines():
        if line.lstrip()[:1] != b"{":
            continue
        try:
            if isinstance(json.loads(line), dict):
                return True
        except _NOT_JSON:
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


async def stream_verdicts(
    traces: Sequence[Trace],
    rubrics: Sequence[Rubric],
    sampler: Sampler,
    *,
    judge: Judge | None,
    summary: ReplaySummary,
    now: float = 0.0,
    concurrency: int = 1,
) -> AsyncIterator[tuple[int, list[Verdict]]]:
    """Each trace's verdicts (with the trace's index), as soon as they are decided.

    At most ``concurrency`` traces are evaluated at once, so at most that many
    judge requests are waiting; the order is the order they finish in.
    """
    done: asyncio.Queue[tuple[int, list[Verdict]]] = asyncio.Queue()
    slots = asyncio.Semaphore(max(1, concurrency))
    conversational = [r for r in rubrics if r.conversational is not None]
    turns: list[TurnRecord] = []

    async def evaluate(index: int, trace: Trace) -> None:
        verdicts: list[Verdict] = []
        try:
            transcript, cases = plan(trace, rubrics, sampler, now, on_fault=summary.fault)
            for flag in transcript.flags:
                summary.flags[flag.value] = summary.flags.get(flag.value, 0) + 1
            records, without_key = turn_records(trace, transcript, conversational)
            turns.extend(records)
            summary.turns_without_key += len(without_key)
            if not cases and not records and not without_key:
                summary.unrouted_traces += 1
            verdicts = await judge_cases(cases, judge, on_fault=summary.fault)
        # The pipeline isolates faults per case; this is the last resort, and the replay goes on.
        except Exception as exc:
            log.exception("evaluating trace %s failed; it has no verdict", trace.trace_id)
            summary.fault(Fault("evaluate", type(exc).__name__))
        finally:
            slots.release()
        await done.put((index, verdicts))

    async def feed() -> None:
        # One task per trace, created as slots free up, so a long replay holds few tasks.
        async with asyncio.TaskGroup() as tasks:
            for index, trace in enumerate(traces):
                await slots.acquire()
                tasks.create_task(evaluate(index, trace))

    def count(verdicts: list[Verdict]) -> None:
        for verdict in verdicts:
            summary.verdicts += 1
            summary.judged += int(verdict.judged)
            key = verdict.outcome.value
            summary.outcomes[key] = summary.outcomes.get(key, 0) + 1

    feeder = asyncio.create_task(feed())
    try:
        for _ in range(len(traces)):
            index, verdicts = await done.get()
            count(verdicts)
            yield index, verdicts
        await feeder
    finally:
        feeder.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await feeder
    specs = {r.id: r.conversational for r in conversational if r.conversational is not None}
    by_id = {r.id: r for r in conversational}
    for number, conversation in enumerate(group_conversations(turns, specs)):
        rubric = by_id[conversation.rubric_id]
        case = plan_conversation(
            rubric,
            conversation.transcript(),
            conversation.conversation_id,
            sampler,
            now,
            screen=screen_case,
            on_fault=summary.fault,
        )
        verdict = await conversation_verdict(
            case,
            judge,
            conversation_id=conversation.conversation_id,
            revision=conversation.revision,
            on_fault=summary.fault,
        )
        summary.conversations += 1
        count([verdict])
        yield len(traces) + number, [verdict]


async def evaluate_traces(
    traces: Sequence[Trace],
    rubrics: Sequence[Rubric],
    sampler: Sampler,
    *,
    judge: Judge | None,
    summary: ReplaySummary,
    now: float = 0.0,
    concurrency: int = 1,
) -> list[Verdict]:
    """Every verdict, in the order of ``traces`` (``stream_verdicts`` collected)."""
    by_trace: dict[int, list[Verdict]] = {}
    async for index, verdicts in stream_verdicts(
        traces,
        rubrics,
        sampler,
        judge=judge,
        summary=summary,
        now=now,
        concurrency=concurrency,
    ):
        by_trace[index] = verdicts
    return [v for index in sorted(by_trace) for v in by_trace[index]]
