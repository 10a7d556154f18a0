"""Turn an assembled trace into a ``Transcript``.

Log records that joined the trace are folded into their spans first
(``sidecar.ingest.events``). Every span is read by the first convention that
recognises it, in the precedence the conventions declare (``sidecar.evaluate.conventions.read_span``); this
module knows no convention by name. It decides, across the whole trace,
which span is the root and which the agent, what the user asked, which tools
ran, what the agent answered, and what it cost. Several conventions may meet
in one trace (an ADK agent calling an OpenInference-instrumented client);
``Transcript.conventions`` lists them in registry order.

Precedence, written out once:

- root: a span without a parent, else one whose parent is missing; among
  those an agent span first, then the earliest.
- agent span: real agent spans (``invoke_agent``, ``agent_run``, OpenInference
  ``AGENT``, Traceloop ``agent``) before wrappers (workflows, chains,
  ``invocation``); then the shallowest, then the earliest.
- user input and answer: the agent span's own text when it is plain text,
  else what the LLM calls saw (the last user message of the first call) and
  said (the last call whose output asks for no tool), else the agent span's
  structured value as JSON text.
- messages on a span that is no model call (a workflow or task span whose
  log records were emitted while it, not the model call, was current):
  given to the first model call under it that carries none, else the span
  is read as the model call itself. Content is attached by what it is, not
  by the kind of span that carried it.
- tool calls: execution spans, completed from the messages (arguments and
  results the model saw) by call id, or by name when ids are missing; calls
  that appear only in messages are kept too.
- tokens: only the innermost spans that report usage, so an agent span that
  sums its LLM calls, or a framework span around a client span, is not
  counted twice.
- times (``start_unix_nano``, ``end_unix_nano``; :func:`trace_times`): the
  root span's start and end, else the earliest start and latest end of the
  spans.

What cannot be read honestly is flagged (``Transcript.flags``) and left
missing, so the checks and the judge that need it say ERROR:

- ``incomplete``: the root never came. The chosen root has a parent that is
  not in the trace and is no entry point (not SERVER/CONSUMER, not an agent
  span, not a declared root span). Latency and the final answer are unknown
  (``None``): a child span's duration is not the run's latency, and the last
  model output seen is not necessarily the answer.
- ``impossible_timing``: a span ends before it starts; when it is the root,
  latency is unknown (``latency_error`` says why), never 0.
- ``duplicate_span_ids``: two different spans share an id; both are read.
  When it is the root's id, latency is unknown.
- ``partial``: the trace's earlier records were decided by an earlier owner;
  it counts as truncated.
- ``unreadable_values``: attribute values nested too deeply to read (from
  decoding, or JSON text in an attribute) are missing.
- ``repaired_text``: text that could not be encoded (bytes that are not UTF-8,
  lone surrogates) was replaced by U+FFFD where it entered; checks read the rest.

What the producer captured is recorded field by field (``Transcript.capture``,
read by :mod:`sidecar.evaluate.capture`), including tool calls the model asked for that
cannot be seen; ``llm_only`` says the trace holds LLM calls and nothing else
(no agent span, no tool span): an instrumented client without an agent span
around the run, which the pipeline flags ``incomplete`` under a rubric that
expects an agent run.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, replace

from sidecar.bounds import MAX_NESTING, json_too_deep, value_depth
from sidecar.evaluate.capture import read_capture
from sidecar.evaluate.conventions import (
    ALL_CONVENTIONS,
    ROOT_SPANS,
    Message,
    MessageMemo,
    Reading,
    Role,
    SpanMessages,
    ToolRequest,
    carries_messages,
    last_assistant_text,
    last_user_text,
    looks_structured,
    parse_json,
    read_span,
    span_messages,
    text_of,
    usage,
)
from sidecar.evaluate.conventions.otel_genai import OTEL_GENAI
from sidecar.fastrecord import record_builder
from sidecar.ingest.events import join_logs
from sidecar.model import (
    Attributes,
    AttrValue,
    ErrorSpan,
    Flag,
    Span,
    SpanEvent,
    SpanKind,
    StatusCode,
    ToolCall,
    Trace,
    Transcript,
    new_tool_call,
)

__all__ = ["build_transcript", "error_message", "trace_times"]

_REFERENCE_KEYS = ("eval.reference", "gen_ai.evaluation.reference")


@dataclass(frozen=True, slots=True)
class _Step:
    span: Span
    reading: Reading | None
    depth: int


_new_step = record_builder(_Step)  # one per span (sidecar.fastrecord)


def build_transcript(trace: Trace, untrusted_tools: Collection[str] = ()) -> Transcript:
    """Read ``trace`` into a transcript; tools named in ``untrusted_tools`` are flagged."""
    readable, unreadable = _readable(join_logs(trace.spans, trace.logs))
    spans = sorted(
        readable, key=lambda s: (s.start_time_unix_nano, s.end_time_unix_nano, s.span_id)
    )
    truncated = trace.truncated or trace.partial
    if not spans:
        return Transcript(
            trace_id=trace.trace_id,
            root_span_id=None,
            truncated=truncated,
            flags=(Flag.PARTIAL,) if trace.partial else (),
        )
    depths = _depths(spans)
    memo = MessageMemo()
    read = [_new_step(span, read_span(span, memo), depths[span.span_id]) for span in spans]
    earlier_user_messages = _earlier_user_messages(read)
    steps = _enclosed_content(read, memo)
    root = _root(steps)
    agents = _agent_steps(steps)
    agent = agents[0] if agents else None
    llm_calls = [s for s in steps if s.reading is not None and s.reading.role is Role.LLM]

    root_attributes: dict[str, AttrValue] = {}
    if agent is not None:
        root_attributes.update(agent.span.attributes)
    root_attributes.update(root.span.attributes)
    resource = root.span.resource

    input_tokens, output_tokens = _tokens(steps)
    root_span = root.span
    incomplete = not _root_arrived(root)
    duplicates = _duplicate_ids(spans)
    latency_ms, latency_error = _latency(root_span, incomplete, root_span.span_id in duplicates)
    start, end = trace_times(spans, None if incomplete else root_span)
    flags = _flags(
        trace,
        incomplete=incomplete,
        duplicates=bool(duplicates),
        impossible_timing=any(_impossible(s) for s in spans),
        unreadable=unreadable,
        repaired=any(span.repaired for span in spans),
    )
    agent_output = _first(a.reading.output_text for a in agents if a.reading is not None)
    answer = _choose(agent_output, lambda: _llm_answer(llm_calls))
    user_input = _choose(
        _first(a.reading.input_text for a in agents if a.reading is not None),
        lambda: _llm_user_input(llm_calls),
    )
    tool_calls = _tool_calls(steps, llm_calls, frozenset(untrusted_tools), agent_output)
    capture = read_capture(
        [(s.span, s.reading) for s in steps],
        user_input=user_input,
        answer=answer,
        answer_unknown=incomplete,
        tool_calls=tool_calls,
    )
    return Transcript(
        trace_id=trace.trace_id,
        root_span_id=root_span.span_id,
        agent_name=_agent_name(root, agents, steps),
        agent_version=_attr_text(root, agents, steps, "gen_ai.agent.version")
        or _resource_text(steps, "service.version", resource),
        user_input=user_input,
        tool_calls=tool_calls,
        answer=None if incomplete else answer,
        models=_models(steps, llm_calls),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        latency_ms=latency_ms,
        error_spans=tuple(
            ErrorSpan(s.span_id, s.name, error_message(s))
            for s in spans
            if s.status_code is StatusCode.ERROR
        ),
        conventions=_conventions(steps),
        resource=resource,
        root_attributes=root_attributes,
        reference=_first(text_of(root_attributes.get(key)) for key in _REFERENCE_KEYS),
        truncated=truncated,
        flags=flags,
        latency_error=latency_error,
        capture=capture,
        llm_only=bool(llm_calls)
        and not agents
        and not any(s.reading is not None and s.reading.role is Role.TOOL for s in steps),
        start_unix_nano=start,
        end_unix_nano=end,
        earlier_user_messages=earlier_user_messages,
    )


def _earlier_user_messages(steps: Sequence[_Step]) -> int:
    """User messages with text before the last one in the first LLM call's own input.

    ADK and chat-completion agents send the session's history there; more than
    zero on the first turn the conversation stage sees means earlier turns
    were never seen. Read from the spans' own readings (before content of an
    enclosing span is given to a model call), in start order.
    """
    for step in steps:
        reading = step.reading
        if reading is None or reading.role is not Role.LLM or not reading.inputs:
            continue
        users = sum(1 for m in reading.inputs if m.role == "user" and m.text)
        return max(0, users - 1)
    return 0


def trace_times(spans: Sequence[Span], root: Span | None) -> tuple[int | None, int | None]:
    """(start, end) of a trace in Unix nanoseconds, from its spans.

    The root span's start and end; without a root (it never arrived), or where
    the root does not say, the earliest start and the latest end of the
    spans. OTLP's 0 means "not set": None when no span says.
    """
    start = root.start_time_unix_nano if root is not None else 0
    end = root.end_time_unix_nano if root is not None else 0
    if not start:
        start = min((s.start_time_unix_nano for s in spans if s.start_time_unix_nano), default=0)
    if not end:
        end = max((s.end_time_unix_nano for s in spans), default=0)
    return start or None, end or None


def error_message(span: Span) -> str:
    """Why a span failed: its status message, else its exception, else ``error.type``."""
    if span.status_message.strip():
        return span.status_message
    for event in span.events:
        if event.name == "exception":
            kind = text_of(event.attributes.get("exception.type"))
            message = text_of(event.attributes.get("exception.message"))
            if kind and message:
                return f"{kind}: {message}"
            if kind or message:
                return kind or message or ""
    return text_of(span.attributes.get("error.type")) or "error"


# --- what can be read ---------------------------------------------------------------------


def _readable(spans: Iterable[Span]) -> tuple[list[Span], int]:
    """The spans with values nested too deeply left out, and how many values that was.

    Decoding bounds structured values already (``Span.unreadable`` counts
    what it left out); spans built otherwise are bounded here, and so is JSON
    text in an attribute: a value too deep to read is missing (``None``),
    before any reader recurses into it.
    """
    readable: list[Span] = []
    unreadable = 0
    # The spans of one record share their resource mapping: measured once.
    resources: dict[int, tuple[Attributes, int]] = {}
    for span in spans:
        attributes, cut = _bounded(span.attributes)
        seen = resources.get(id(span.resource))
        if seen is None:
            seen = resources[id(span.resource)] = _bounded(span.resource)
        resource, resource_cut = seen
        events: list[SpanEvent] = []
        for event in span.events:
            kept, event_cut = _bounded(event.attributes)
            cut += event_cut
            events.append(SpanEvent(event.name, event.time_unix_nano, kept) if event_cut else event)
        unreadable += span.unreadable + cut + resource_cut
        if cut or resource_cut:
            span = replace(span, attributes=attributes, resource=resource, events=tuple(events))
        readable.append(span)
    return readable, unreadable


def _bounded(attributes: Attributes) -> tuple[Attributes, int]:
    deep: list[str] | None = None
    for key, value in attributes.items():
        if isinstance(value, str):
            # Most strings hold too few brackets to nest past the bound: counted in C.
            if len(value) <= MAX_NESTING or value.count("[") + value.count("{") <= MAX_NESTING:
                continue
            if _JSON_START.match(value) is None or not json_too_deep(value):
                continue
        elif not isinstance(value, _STRUCTURED) or value_depth(value) <= MAX_NESTING:
            continue
        if deep is None:
            deep = []
        deep.append(key)
    if deep is None:
        return attributes, 0
    return {**attributes, **dict.fromkeys(deep)}, len(deep)


_JSON_START = re.compile(r"\s*[\[{]")
_STRUCTURED = (dict, list)


def _root_arrived(root: _Step) -> bool:
    span = root.span
    if span.parent_span_id is None:
        return True
    # A parent outside the trace: fine for an entry point of this process (its caller
    # exported the parent elsewhere), not for a child whose parent is still to come.
    return (
        span.kind in (SpanKind.SERVER, SpanKind.CONSUMER)
        or _is_agent(root)
        or ROOT_SPANS.matches(span)
    )


def _impossible(span: Span) -> bool:
    return 0 < span.end_time_unix_nano < span.start_time_unix_nano


def _duplicate_ids(spans: Sequence[Span]) -> set[str]:
    seen: set[str] = set()
    duplicates: set[str] = set()
    for span in spans:
        if span.span_id in seen:
            duplicates.add(span.span_id)
        seen.add(span.span_id)
    return duplicates


def _latency(root: Span, incomplete: bool, duplicated: bool) -> tuple[float | None, str | None]:
    """The root span's duration, or None and why it is unknown."""
    if incomplete:
        return None, "the root span never arrived"
    if duplicated:
        return None, "the root span's id is shared by several spans"
    if not root.end_time_unix_nano:
        return None, None
    if _impossible(root):
        return None, "the root span ends before it starts"
    return root.duration_ms, None


def _flags(
    trace: Trace,
    *,
    incomplete: bool,
    duplicates: bool,
    impossible_timing: bool,
    unreadable: int,
    repaired: bool = False,
) -> tuple[Flag, ...]:
    if not (
        incomplete or trace.partial or duplicates or impossible_timing or unreadable or repaired
    ):
        return ()  # most traces
    raised = {
        Flag.INCOMPLETE: incomplete,
        Flag.PARTIAL: trace.partial,
        Flag.DUPLICATE_SPAN_IDS: duplicates,
        Flag.IMPOSSIBLE_TIMING: impossible_timing,
        Flag.UNREADABLE_VALUES: unreadable > 0,
        Flag.REPAIRED_TEXT: repaired,
    }
    return tuple(flag for flag in _FLAGS if raised.get(flag))


_FLAGS = tuple(Flag)


# --- structure -------------------------------------------------------------------------


def _depths(spans: Sequence[Span]) -> dict[str, int]:
    by_id = {s.span_id: s for s in spans}
    depths: dict[str, int] = {}
    for span in spans:
        path: list[str] = []
        current: str | None = span.span_id
        while current is not None and current not in depths and current not in path:
            path.append(current)
            parent = by_id[current].parent_span_id
            current = parent if parent in by_id else None
        # A parent cycle (bad data) restarts the count rather than looping.
        base = depths[current] if current is not None and current in depths else -1
        for offset, span_id in enumerate(reversed(path), start=1):
            depths[span_id] = base + offset
    return depths


def _enclosed_content(steps: list[_Step], memo: MessageMemo) -> list[_Step]:
    """Messages carried by spans that are no model call, moved to the model call they enclose."""
    carriers = [
        index
        for index, step in enumerate(steps)
        if (step.reading is None or step.reading.role is Role.OTHER) and carries_messages(step.span)
    ]
    if not carriers:
        return steps
    children: dict[str, list[int]] = {}
    for index, step in enumerate(steps):
        if step.span.parent_span_id is not None:
            children.setdefault(step.span.parent_span_id, []).append(index)
    given: set[int] = set()
    for index in carriers:
        step = steps[index]
        messages = span_messages(step.span, memo)
        if messages.inputs is None and messages.outputs is None and not messages.unreadable:
            continue
        calls = [i for i in _descendants(step.span.span_id, steps, children) if _is_llm(steps[i])]
        # The first model call under the span that lacks a side the span carries.
        bare = [i for i in calls if i not in given and _lacks(steps[i].reading, messages)]
        if bare:
            target = steps[bare[0]]
            reading = target.reading
            assert reading is not None
            steps[bare[0]] = _new_step(
                target.span,
                replace(
                    reading,
                    inputs=messages.inputs if reading.inputs is None else reading.inputs,
                    outputs=messages.outputs if reading.outputs is None else reading.outputs,
                    unreadable=reading.unreadable + messages.unreadable,
                ),
                target.depth,
            )
            given.add(bare[0])
        elif not calls:
            convention = step.reading.convention if step.reading is not None else OTEL_GENAI
            reading = Reading(
                convention,
                Role.LLM,
                inputs=messages.inputs,
                outputs=messages.outputs,
                unreadable=messages.unreadable,
            )
            steps[index] = _new_step(step.span, reading, step.depth)
    return steps


def _descendants(span_id: str, steps: Sequence[_Step], children: dict[str, list[int]]) -> list[int]:
    """Indices of the steps under ``span_id``, in start order."""
    found: set[int] = set()
    pending = list(children.get(span_id, ()))
    while pending:
        index = pending.pop()
        if index in found:
            continue  # a parent cycle (bad data)
        found.add(index)
        pending.extend(children.get(steps[index].span.span_id, ()))
    return sorted(found)


def _is_llm(step: _Step) -> bool:
    return step.reading is not None and step.reading.role is Role.LLM


def _lacks(reading: Reading | None, carried: SpanMessages) -> bool:
    return reading is not None and (
        (reading.inputs is None and carried.inputs is not None)
        or (reading.outputs is None and carried.outputs is not None)
    )


def _is_agent(step: _Step) -> bool:
    return step.reading is not None and step.reading.role is Role.AGENT


def _root(steps: Sequence[_Step]) -> _Step:
    ids = {s.span.span_id for s in steps}
    candidates = [s for s in steps if s.span.parent_span_id not in ids] or list(steps)
    return min(
        candidates,
        key=lambda s: (
            s.span.parent_span_id is not None,
            not _is_agent(s),
            s.span.start_time_unix_nano,
            -s.span.end_time_unix_nano,
        ),
    )


def _agent_steps(steps: Sequence[_Step]) -> list[_Step]:
    agents = [s for s in steps if _is_agent(s)]
    return sorted(
        agents,
        key=lambda s: (
            not (s.reading is not None and s.reading.strong),
            s.depth,
            s.span.start_time_unix_nano,
        ),
    )


# --- identity --------------------------------------------------------------------------


def _agent_name(root: _Step, agents: Sequence[_Step], steps: Sequence[_Step]) -> str | None:
    from_root = text_of(root.span.attributes.get("gen_ai.agent.name"))
    from_agents = _first(a.reading.agent_name for a in agents if a.reading is not None)
    return (
        from_root
        or from_agents
        or _attr_text(root, agents, steps, "gen_ai.agent.name")
        or _resource_text(steps, "service.name", root.span.resource)
    )


def _attr_text(
    root: _Step, agents: Sequence[_Step], steps: Sequence[_Step], key: str
) -> str | None:
    by_depth = sorted(steps, key=lambda s: s.depth)
    return _first(text_of(s.span.attributes.get(key)) for s in [root, *agents, *by_depth])


def _resource_text(steps: Sequence[_Step], key: str, resource: Attributes) -> str | None:
    return _first(text_of(r.get(key)) for r in [resource, *(s.span.resource for s in steps)])


# --- content ---------------------------------------------------------------------------


def _choose(from_agent: str | None, from_llm: Callable[[], str | None]) -> str | None:
    # An agent span often records its input/output as a framework object dump;
    # the messages the model saw are the better text then.
    if from_agent is not None and not looks_structured(from_agent):
        return from_agent
    return from_llm() or from_agent


def _llm_user_input(llm_calls: Sequence[_Step]) -> str | None:
    return _first(last_user_text(s.reading.inputs or ()) for s in llm_calls if s.reading)


def _llm_answer(llm_calls: Sequence[_Step]) -> str | None:
    for step in reversed(llm_calls):
        outputs = step.reading.outputs if step.reading is not None else None
        if outputs is None or any(m.tool_requests for m in outputs):
            continue
        text = last_assistant_text(outputs)
        if text is not None:
            return text
    return None


def _conventions(steps: Sequence[_Step]) -> tuple[str, ...]:
    seen = {s.reading.convention for s in steps if s.reading is not None}
    return tuple(c for c in ALL_CONVENTIONS if c in seen)


def _models(steps: Sequence[_Step], llm_calls: Sequence[_Step]) -> tuple[str, ...]:
    source = llm_calls or steps
    names = (m for s in source if s.reading is not None for m in s.reading.models)
    return tuple(dict.fromkeys(names))


def _tokens(steps: Sequence[_Step]) -> tuple[int, int]:
    reported = {s.span.span_id: usage(s.span) for s in steps}
    reported = {k: v for k, v in reported.items() if v != (None, None)}
    by_id = {s.span.span_id: s.span for s in steps}
    outer: set[str] = set()
    for span_id in reported:
        parent = by_id[span_id].parent_span_id
        seen: set[str] = set()
        while parent is not None and parent in by_id and parent not in seen:
            seen.add(parent)
            outer.add(parent)
            parent = by_id[parent].parent_span_id
    inner = [v for k, v in reported.items() if k not in outer]
    return sum(i or 0 for i, _ in inner), sum(o or 0 for _, o in inner)


# --- tool calls ----------------------------------------------------------------------------


def _tool_calls(
    steps: Sequence[_Step],
    llm_calls: Sequence[_Step],
    untrusted: frozenset[str],
    agent_output: str | None = None,
) -> tuple[ToolCall, ...]:
    """The run's tool calls: the tool spans, completed and added to from what the model asked.

    A call the model asked for that no tool span ran, whose arguments are the
    agent run's structured output (``agent_output``), is how the model gave
    that output (pydantic-ai's output tool): the answer, not a tool call.
    """
    output = _structured(agent_output)
    order = itertools.count()
    timed: list[tuple[int, int, ToolCall]] = []
    for step in steps:
        reading = step.reading
        if reading is None or reading.role is not Role.TOOL or reading.tool is None:
            continue
        call = reading.tool
        if step.span.status_code is StatusCode.ERROR and call.error is None:
            call = replace(call, error=error_message(step.span))
        timed.append((step.span.start_time_unix_nano, next(order), call))

    from_spans = len(timed)
    matched: set[int] = set()
    for when, requested in _requested_calls(llm_calls):
        index = _match(timed[:from_spans], matched, requested)
        if index is None:
            if output is None or _structured(requested.arguments) != output:
                timed.append((when, next(order), requested))
            continue
        matched.add(index)
        when_run, seq, found = timed[index]
        call_id = found.call_id or requested.call_id
        arguments = found.arguments or requested.arguments
        result = found.result or requested.result
        if (call_id, arguments, result) != (found.call_id, found.arguments, found.result):
            found = replace(found, call_id=call_id, arguments=arguments, result=result)
            timed[index] = (when_run, seq, found)
    timed.sort(key=lambda t: (t[0], t[1]))
    return tuple(_flagged(call, call.name in untrusted) for _, _, call in timed)


def _structured(text: str | None) -> object:
    """The JSON object or array ``text`` holds (``parse_json``); None for anything else."""
    value = parse_json(text)
    return value if isinstance(value, dict | list) else None


def _flagged(call: ToolCall, untrusted: bool) -> ToolCall:
    return call if call.untrusted == untrusted else replace(call, untrusted=untrusted)


def _match(
    from_spans: Sequence[tuple[int, int, ToolCall]], matched: set[int], call: ToolCall
) -> int | None:
    free = [(i, c) for i, (_, _, c) in enumerate(from_spans) if i not in matched]
    if call.call_id is not None:
        for index, found in free:
            if found.call_id == call.call_id:
                return index
    # Without ids on both sides only the name and the order can pair them.
    for index, found in free:
        if found.name == call.name and (found.call_id is None or call.call_id is None):
            return index
    return None


def _requested_calls(llm_calls: Sequence[_Step]) -> list[tuple[int, ToolCall]]:
    """Tool calls as the model requested them, with the results it was given.

    Each LLM call's input repeats the history, so requests are deduplicated by
    call id, and id-less ones by counting; history from before the current
    user message belongs to earlier turns and is left out.
    """
    found: list[tuple[int, ToolRequest]] = []
    seen_ids: set[str] = set()
    seen_counts: dict[tuple[str, str | None], int] = {}
    results_by_id: dict[str, str | None] = {}
    results_by_name: dict[str, list[str | None]] = {}

    def add(when: int, requests: Iterable[ToolRequest], *, history: bool) -> None:
        counts: dict[tuple[str, str | None], int] = {}
        for request in requests:
            if request.call_id is not None:
                if request.call_id not in seen_ids:
                    seen_ids.add(request.call_id)
                    found.append((when, request))
                continue
            key = (request.name, request.arguments)
            counts[key] = counts.get(key, 0) + 1
            # A history repeats calls already counted; only the extra ones are new.
            if history and counts[key] <= seen_counts.get(key, 0):
                continue
            seen_counts[key] = seen_counts.get(key, 0) + 1
            found.append((when, request))

    for step in llm_calls:
        reading = step.reading
        if reading is None:
            continue
        if reading.inputs is not None:
            turn = _current_turn(reading.inputs)
            add(
                step.span.start_time_unix_nano,
                (r for m in turn for r in m.tool_requests),
                history=True,
            )
            by_name: dict[str, list[str | None]] = {}
            anonymous = False
            for message in reading.inputs:
                for response in message.tool_responses:
                    if response.call_id is not None:
                        results_by_id[response.call_id] = response.result
                    elif response.name is None:
                        anonymous = True
            if anonymous:
                _pair_by_order(reading.inputs, results_by_id)
            for message in turn:
                for response in message.tool_responses:
                    if response.call_id is None and response.name is not None:
                        by_name.setdefault(response.name, []).append(response.result)
            for name, results in by_name.items():
                if len(results) > len(results_by_name.get(name, [])):
                    results_by_name[name] = results
        if reading.outputs is not None:
            add(
                step.span.end_time_unix_nano,
                (r for m in reading.outputs for r in m.tool_requests),
                history=False,
            )

    calls: list[tuple[int, ToolCall]] = []
    used_by_name: dict[str, int] = {}
    for when, request in found:
        if request.call_id is not None:
            result = results_by_id.get(request.call_id)
        else:
            k = used_by_name.get(request.name, 0)
            used_by_name[request.name] = k + 1
            results = results_by_name.get(request.name, [])
            result = results[k] if k < len(results) else None
        calls.append(
            (when, new_tool_call(request.name, request.call_id, request.arguments, result=result))
        )
    return calls


def _pair_by_order(messages: Sequence[Message], results_by_id: dict[str, str | None]) -> None:
    """Results naming neither call id nor tool (OpenLLMetry's tool message events) answer
    the requests still unanswered before them, in order."""
    pending: list[ToolRequest] = []
    for message in messages:
        if message.tool_requests:
            pending = list(message.tool_requests)
        for response in message.tool_responses:
            if response.call_id is not None:
                pending = [r for r in pending if r.call_id != response.call_id]
            elif response.name is None and pending:
                answered = pending.pop(0)
                if answered.call_id is not None:
                    results_by_id.setdefault(answered.call_id, response.result)


def _current_turn(messages: Sequence[Message]) -> Sequence[Message]:
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role == "user" and message.text is not None:
            return messages[index + 1 :]
    return messages[0:]


def _first(values: Iterable[str | None]) -> str | None:
    return next((v for v in values if v is not None), None)
