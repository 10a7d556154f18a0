"""Run the pipeline over files instead of Kafka (``sidecar replay`` and ``sidecar demo``).

Accepted inputs, detected per file:

- OTLP/JSON lines: one ``ExportTraceServiceRequest`` or
  ``ExportLogsServiceRequest`` per line (the Collector's file exporter with
  ``format: json``), or one pretty-printed JSON document;
- the file exporter's ``format: proto``: each message prefixed by its length as
  a 4-byte big-endian integer;
- a single binary ``ExportTraceServiceRequest`` or ``ExportLogsServiceRequest``.

Traces and logs are told apart by content, per request, never by file name
(``sidecar.ingest.decode_logs.decode_signal``), so trace and log files, or files that
mix both, go in one call; log records join their traces as on Kafka
(``Assembler.add_logs``), whatever the order of the files.

Every trace in the input is decided at end of input (reason ``flush``,
:func:`end_of_input`, which ``sidecar backfill`` uses at its stop offsets too)
unless it completed earlier; an undecodable line or message is reported and skipped,
never fatal. The traces are then evaluated ``concurrency`` at a time
(``judge.concurrency``; the judge keeps its own limits on top) and each
trace's verdicts are handed on as soon as they are decided
(:func:`stream_verdicts`), so a long replay prints as it goes. An exception
while evaluating one trace gives that trace errored verdicts (see
``sidecar.evaluate.pipeline``) and is counted; the replay goes on.

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
import sys
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sidecar.conversation.evaluate import conversation_verdict, plan_conversation
from sidecar.conversation.group import group_conversations
from sidecar.conversation.turn_builder import turn_records
from sidecar.errors import ConfigError, DecodeError, SidecarError
from sidecar.evaluate.capture import CaptureWarnings
from sidecar.evaluate.decision import Decision, trace_decision
from sidecar.evaluate.pipeline import Fault, case_flags, judge_cases, plan
from sidecar.evaluate.rubric import Rubric
from sidecar.evaluate.sample import Sampler
from sidecar.evaluate.verdict import Verdict, decided_after
from sidecar.ingest.assemble import DECISION_WAIT_S, Assembler
from sidecar.ingest.decode import Encoding, is_json_payload
from sidecar.ingest.decode_logs import Decoded, decode_signal
from sidecar.judge import Judge, screen_case
from sidecar.model import DecideReason, Trace
from sidecar.wire.turn_records import TurnRecord

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ReplaySummary:
    files: int = 0
    records: int = 0
    bad_records: list[str] = field(default_factory=list)
    spans: int = 0
    logs: int = 0
    logs_without_trace: int = 0
    traces: int = 0
    unrouted_traces: int = 0
    verdicts: int = 0
    judged: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    # Faults while evaluating, by stage (each gave its trace errored verdicts).
    internal_errors: dict[str, int] = field(default_factory=dict)
    flags: dict[str, int] = field(default_factory=dict)
    # Traces by content field their producer did not capture (sidecar.evaluate.capture).
    not_captured: dict[str, int] = field(default_factory=dict)
    # ... and by field captured in a shape no reader understands.
    unreadable: dict[str, int] = field(default_factory=dict)
    capture_warnings: CaptureWarnings = field(default_factory=CaptureWarnings, repr=False)
    conversations: int = 0
    turns_without_key: int = 0
    # Traces by the one path each took (sidecar.evaluate.decision): they add up to ``traces``.
    decisions: dict[str, int] = field(default_factory=dict)

    def decided(self, decision: Decision) -> None:
        self.decisions[decision.value] = self.decisions.get(decision.value, 0) + 1

    def fault(self, fault: Fault) -> None:
        self.internal_errors[fault.stage] = self.internal_errors.get(fault.stage, 0) + 1


@dataclass(frozen=True, slots=True)
class _Frames:
    """The file exporter's proto format split: whole messages, and how a cut-short end falls."""

    parts: list[bytes]
    # Bytes after the last whole message (the file ends inside a message), and how many
    # bytes that message announced (None when the file ends inside its 4-byte length).
    tail: int = 0
    announced: int | None = None


def _length_prefixed(data: bytes) -> _Frames | None:
    """Split the file exporter's proto format; None if ``data`` holds no whole message in it.

    A file whose last message is cut short (a Collector stopped while writing)
    keeps the whole messages before it; the rest is its ``tail``.
    """
    parts: list[bytes] = []
    pos = 0
    while pos < len(data):
        if pos + 4 > len(data):
            return _Frames(parts, len(data) - pos) if parts else None
        size = int.from_bytes(data[pos : pos + 4], "big")
        if pos + 4 + size > len(data):
            return _Frames(parts, len(data) - pos, size) if parts else None
        parts.append(data[pos + 4 : pos + 4 + size])
        pos += 4 + size
    return _Frames(parts)


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
        if not is_json_payload(line):
            continue
        try:
            if isinstance(json.loads(line), dict):
                return True
        except _NOT_JSON:
            continue
    return False


def read_payloads(path: Path) -> Iterator[tuple[str, bytes, Encoding | None]]:
    """Yield (where, payload, encoding) for every request in a file (``-``: standard input).

    The encoding is None for a piece known to be no whole request (the cut-short
    end of a proto file): a bad record, not to be decoded.
    """
    data = sys.stdin.buffer.read() if path == STDIN else path.read_bytes()
    frames = _length_prefixed(data)
    if frames is not None and _confirmed(frames):
        # A later corrupt message is then one bad record, and a cut-short end
        # one more, not a lost file.
        for index, part in enumerate(frames.parts, start=1):
            yield f"{path}#{index}", part, "otlp_proto"
        if frames.tail:
            index = len(frames.parts) + 1
            what = (
                f"{frames.tail} bytes of a message of {frames.announced}"
                if frames.announced is not None
                else f"{frames.tail} bytes of a message's 4-byte length"
            )
            yield f"{path}#{index} (the file ends after {what})", b"", None
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


def _confirmed(frames: _Frames) -> bool:
    """Whether the split is the file exporter's format: its first non-empty message decodes.

    Whole frames adding up, or stopping only at a cut-short end, is strong
    evidence; a message that decodes confirms it. Empty messages (empty
    requests) prove nothing, and a file of nothing but them is not taken as
    framed.
    """
    first = next((part for part in frames.parts if part), None)
    if first is None:
        return False
    try:
        decode_signal(first, "otlp_proto")
    except DecodeError:
        return False
    return True


# The path that stands for standard input.
STDIN = Path("-")


def input_files(paths: Sequence[Path]) -> list[Path]:
    """The files to read: ``-`` as given, a directory's visible files sorted by name.

    Raises ConfigError naming a path that is neither, or a directory with no files.
    """
    files: list[Path] = []
    for path in paths:
        if path == STDIN or path.is_file():
            files.append(path)
        elif path.is_dir():
            inside = sorted(
                entry
                for entry in path.iterdir()
                if entry.is_file() and not entry.name.startswith(".")
            )
            if not inside:
                raise ConfigError(f"{path}: a directory with no files to replay")
            files.extend(inside)
        else:
            raise ConfigError(
                f"{path}: no such file; give OTLP/JSON lines or OTLP protobuf files, "
                "a directory of them, or - for standard input"
            )
    return files


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
            if encoding is None:
                summary.bad_records.append(
                    f"{where}: truncated: the message is cut short (was the file still being "
                    "written?); the messages before it were read"
                )
                continue
            try:
                decoded: Decoded = decode_signal(payload, encoding)
            except DecodeError as exc:
                summary.bad_records.append(f"{where}: {exc.reason}: {exc}")
                continue
            summary.spans += len(decoded.spans)
            summary.logs += len(decoded.logs)
            traces.extend(assembler.add(decoded.spans, 0.0))
            traces.extend(assembler.add_logs(decoded.logs, 0.0))
    traces.extend(end_of_input(assembler))
    summary.logs_without_trace = assembler.stats.logs_without_trace
    summary.traces = len(traces)
    return traces


def end_of_input(assembler: Assembler) -> list[Trace]:
    """The input has ended: every open trace is decided now (reason ``flush``).

    A trace whose root never arrived is decided all the same; its transcript
    flags it ``incomplete`` (and what that leaves undecidable is ERROR). Used by
    ``replay`` at the end of its files and by ``backfill`` at its stop offsets.
    """
    return assembler.drain(DecideReason.FLUSH)


async def stream_verdicts(
    traces: Iterable[Trace] | AsyncIterable[Trace],
    rubrics: Sequence[Rubric],
    sampler: Sampler,
    *,
    judge: Judge | None,
    summary: ReplaySummary,
    now: float = 0.0,
    clock: Callable[[], float] | None = None,
    concurrency: int = 1,
    decision_wait_s: float = DECISION_WAIT_S,
) -> AsyncIterator[tuple[int, list[Verdict]]]:
    """Each trace's verdicts (with the trace's index), as soon as they are decided.

    ``traces`` may be a sequence or an async iterator (``sidecar backfill``
    reading Kafka): the next trace is taken only when one of ``concurrency``
    slots is free, and a slot frees once the caller has taken the trace's
    verdicts, so a slow reader or a slow caller bounds the work held here.
    The order is the order they finish in. ``clock``, when given, is the
    sampler's time (budgets per minute and day); else ``now`` for every trace.
    Each verdict is decided (``decided_at``) ``decision_wait_s`` after its
    trace's end, as the service would have decided it, so the same input gives
    the same records on every run.
    A :class:`~sidecar.errors.SidecarError` raised by ``traces`` is raised
    here once the traces already taken are done.
    """
    done: asyncio.Queue[tuple[int, list[Verdict]] | None] = asyncio.Queue()
    slots = asyncio.Semaphore(max(1, concurrency))
    failed: list[SidecarError] = []
    conversational = [r for r in rubrics if r.conversational is not None]
    turns: list[TurnRecord] = []
    fed = 0  # traces taken from ``traces``

    async def verdicts_of(trace: Trace) -> list[Verdict]:
        verdicts: list[Verdict] = []
        try:
            at = clock() if clock is not None else now
            transcript, cases = plan(trace, rubrics, sampler, at, on_fault=summary.fault)
            for flag in case_flags(transcript, cases):
                summary.flags[flag.value] = summary.flags.get(flag.value, 0) + 1
            for content in transcript.capture.missing:
                summary.not_captured[content] = summary.not_captured.get(content, 0) + 1
            for content in transcript.capture.unreadable_fields:
                summary.unreadable[content] = summary.unreadable.get(content, 0) + 1
            summary.capture_warnings.note(transcript)
            records, without_key = turn_records(trace, transcript, conversational)
            turns.extend(records)
            summary.turns_without_key += len(without_key)
            if not cases and not records and not without_key:
                summary.unrouted_traces += 1
            judged = await judge_cases(cases, judge, on_fault=summary.fault)
            verdicts = [decided_after(v, decision_wait_s) for v in judged]
            turn = bool(records or without_key)
            summary.decided(trace_decision(verdicts, trace.reason, turn=turn))
        # The pipeline isolates faults per case; this is the last resort, and the replay goes on.
        except Exception as exc:
            log.exception("evaluating trace %s failed; it has no verdict", trace.trace_id)
            summary.fault(Fault("evaluate", type(exc).__name__))
            summary.decided(Decision.INTERNAL_ERROR)
        return verdicts

    async def evaluate(index: int, trace: Trace) -> None:
        await done.put((index, await verdicts_of(trace)))

    async def feed() -> None:
        # One task per trace, created as slots free up, so a long replay holds few tasks.
        nonlocal fed
        source = _aiter(traces)
        try:
            async with asyncio.TaskGroup() as tasks:
                index = 0
                while True:
                    await slots.acquire()
                    try:
                        trace = await anext(source)
                    except StopAsyncIteration:
                        break
                    except SidecarError as exc:
                        failed.append(exc)
                        break
                    tasks.create_task(evaluate(index, trace))
                    index += 1
                    fed = index
        finally:
            await done.put(None)

    def count(verdicts: list[Verdict]) -> None:
        for verdict in verdicts:
            summary.verdicts += 1
            summary.judged += int(verdict.judged)
            key = verdict.outcome.value
            summary.outcomes[key] = summary.outcomes.get(key, 0) + 1

    async def _conversation_verdicts() -> AsyncIterator[tuple[int, list[Verdict]]]:
        """The conversations of the turns the traces gave, once every trace is done."""
        specs = {r.id: r.conversational for r in conversational if r.conversational is not None}
        by_id = {r.id: r for r in conversational}
        for number, conversation in enumerate(group_conversations(turns, specs)):
            rubric = by_id[conversation.rubric_id]
            case = plan_conversation(
                rubric,
                conversation.transcript(),
                conversation.conversation_id,
                sampler,
                clock() if clock is not None else now,
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
            yield fed + number, [decided_after(verdict, decision_wait_s)]

    if judge is None and not isinstance(traces, AsyncIterable):
        # Nothing to wait for: each trace in turn, without a task and a queue per trace
        # (the same verdicts, in the same order, as the tasks below would give).
        for index, trace in enumerate(traces):
            verdicts = await verdicts_of(trace)
            fed = index + 1
            count(verdicts)
            yield index, verdicts
        async for later in _conversation_verdicts():
            yield later
        return
    feeder = asyncio.create_task(feed())
    try:
        while (item := await done.get()) is not None:
            index, verdicts = item
            count(verdicts)
            yield index, verdicts
            slots.release()
        await feeder
        if failed:
            raise failed[0]
    finally:
        feeder.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await feeder
    async for later in _conversation_verdicts():
        yield later


async def _aiter(traces: Iterable[Trace] | AsyncIterable[Trace]) -> AsyncIterator[Trace]:
    if isinstance(traces, AsyncIterable):
        async for trace in traces:
            yield trace
    else:
        for trace in traces:
            yield trace


async def evaluate_traces(
    traces: Sequence[Trace],
    rubrics: Sequence[Rubric],
    sampler: Sampler,
    *,
    judge: Judge | None,
    summary: ReplaySummary,
    now: float = 0.0,
    concurrency: int = 1,
    decision_wait_s: float = DECISION_WAIT_S,
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
        decision_wait_s=decision_wait_s,
    ):
        by_trace[index] = verdicts
    return [v for index in sorted(by_trace) for v in by_trace[index]]
