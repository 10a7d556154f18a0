"""The fast paths of the evaluation path give what the general paths give (issue 14).

Each optimisation keeps one meaning: the protobuf decoder reads a request as
the OTLP/JSON decoder reads the same request; ``value_depth`` counts as the
recursive definition of depth does; the transcript's bounds leave out exactly
the values too deep to read; a GenAI text part reads as the general part
reader reads it; without a judge, replay's one-trace-at-a-time loop gives the
verdicts (in the same order) that its tasks and queue give with an async source.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import MessageToJson
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from sidecar.bounds import MAX_NESTING, value_depth
from sidecar.engine import offline
from sidecar.errors import DecodeError
from sidecar.evaluate.checks.grounding import GroundedNumbers, grounded_numbers
from sidecar.evaluate.conventions.messages import parse_message
from sidecar.evaluate.rubric import load_rubrics
from sidecar.evaluate.sample import Sampler
from sidecar.evaluate.transcript import _readable, build_transcript
from sidecar.ingest.assemble import Assembler
from sidecar.ingest.decode import decode
from sidecar.model import DecideReason, Flag, Outcome
from sidecar.wire.verdicts import verdict_json
from tests.agents.genai_spans import make_cases
from tests.agents.otlp import split_requests
from tests.builders import span, trace, transcript
from tests.integration.scenario import write_rubrics
from tests.otlp_records import fill_any_value

TRACE = bytes.fromhex("5b8efff798038103d269b633813fc60c")
SPAN = bytes.fromhex("eee19b7ec3c1b174")


def _any(value: object) -> AnyValue:
    return fill_any_value(AnyValue(), value)


def _nested(depth: int) -> object:
    value: object = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def _request(parent: bytes, **attributes: object) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.add(key="service.name", value=_any("agent"))
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name = "tests"
    pb = PbSpan(
        trace_id=TRACE,
        span_id=SPAN,
        parent_span_id=parent,
        name="chat m",
        kind=PbSpan.SPAN_KIND_CLIENT,
        start_time_unix_nano=10,
        end_time_unix_nano=20,
        status=Status(code=Status.STATUS_CODE_ERROR, message="failed"),
    )
    pb.attributes.extend(KeyValue(key=k, value=_any(v)) for k, v in attributes.items())
    event = pb.events.add(name="exception", time_unix_nano=15)
    event.attributes.add(key="exception.type", value=_any("ValueError"))
    scope_spans.spans.append(pb)
    return request


ATTRIBUTES: dict[str, Any] = {
    "text": "hello",
    "flag": True,
    "count": -(2**63),
    "ratio": 0.25,
    "raw": b"\x00\xff",
    "list": ["a", 1, [2.5, {"k": False}]],
    "map": {"a": {"b": ["c"]}, "empty": {}},
    # Protobuf itself refuses AnyValues nested past about 45 levels (test_hostile_nesting).
    "nested": _nested(40),
}


@pytest.mark.parametrize(
    "parent",
    [b"", bytes.fromhex("00" * 8), bytes.fromhex("abcd"), bytes.fromhex("0102030405060708")],
    ids=["root", "zero-parent", "short-parent", "parent"],
)
def test_protobuf_decodes_as_the_same_request_in_json(parent: bytes) -> None:
    request = _request(parent, **ATTRIBUTES)
    from_proto = decode(request.SerializeToString())
    from_json = decode(MessageToJson(request).encode())
    assert from_proto == from_json
    (decoded,) = from_proto
    assert decoded.attributes["list"] == ["a", 1, [2.5, {"k": False}]]
    assert value_depth(decoded.attributes["nested"]) == 40


@pytest.mark.parametrize(
    ("trace_id", "span_id", "reason"),
    [
        (bytes(16), SPAN, "trace_id is all zeros"),
        (TRACE[:8], SPAN, "trace_id has 8 bytes, expected 16"),
        (TRACE, bytes(8), "span_id is all zeros"),
        (TRACE, SPAN + b"\x01", "span_id has 9 bytes, expected 8"),
    ],
    ids=["zero-trace", "short-trace", "zero-span", "long-span"],
)
def test_bad_ids_are_rejected_with_their_reason(
    trace_id: bytes, span_id: bytes, reason: str
) -> None:
    request = _request(b"")
    pb = request.resource_spans[0].scope_spans[0].spans[0]
    pb.trace_id, pb.span_id = trace_id, span_id
    with pytest.raises(DecodeError) as caught:
        decode(request.SerializeToString())
    assert caught.value.reason == "bad_id"
    assert reason in str(caught.value)


def _depth(value: object) -> int:
    """Depth by its recursive definition (a scalar is 0)."""
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list | tuple):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _random_value(rng: random.Random, depth: int = 0) -> object:
    roll = rng.random()
    if depth > 12 or roll < 0.3:
        return rng.choice([1, "x", None, 2.5, True])
    if roll < 0.6:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if roll < 0.75:
        return tuple(_random_value(rng, depth + 1) for _ in range(rng.randint(0, 2)))
    return {str(i): _random_value(rng, depth + 1) for i in range(rng.randint(0, 3))}


@pytest.mark.parametrize(
    "value",
    [1, "[[[[", [], {}, [[], [[]]], {"a": [{"b": 1}], "c": 2}, _nested(200), ([{}],)],
    ids=["scalar", "text", "empty-list", "empty-map", "ragged", "mixed", "deep", "tuple"],
)
@pytest.mark.parametrize("limit", [0, 1, 2, MAX_NESTING])
def test_value_depth_counts_as_the_recursive_definition(value: object, limit: int) -> None:
    assert value_depth(value, limit) == min(_depth(value), limit + 1)


def test_value_depth_on_random_values() -> None:
    rng = random.Random(14)
    for _ in range(2000):
        value = _random_value(rng)
        for limit in (0, 1, 3, MAX_NESTING):
            assert value_depth(value, limit) == min(_depth(value), limit + 1)


DEEP_JSON = "[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1)


@pytest.mark.parametrize(
    ("value", "unreadable"),
    [
        ("x" * 10_000, False),
        ("[" * (MAX_NESTING + 1), True),
        ("  " + DEEP_JSON, True),
        ("text " + DEEP_JSON, False),  # not JSON text: brackets in prose are text
        ('["' + "[" * 100 + '"]', False),  # brackets inside a JSON string do not nest
        ("[" * MAX_NESTING + "]" * MAX_NESTING, False),
        (_nested(MAX_NESTING + 1), True),
        (_nested(MAX_NESTING), False),
    ],
    ids=["long", "unclosed", "spaced", "prose", "in-string", "at-bound", "deep-list", "list"],
)
def test_transcript_bounds_leave_out_exactly_the_values_too_deep(
    value: object, unreadable: bool
) -> None:
    attrs = {"gen_ai.operation.name": "invoke_agent", "v": value}
    root = span("invoke_agent a", span_id="0000000000000001", attrs=attrs)
    readable, count = _readable([root, span("child", parent=root)])
    assert count == int(unreadable)
    assert (readable[0].attributes["v"] is None) is unreadable
    flags = build_transcript(trace(root)).flags
    assert (Flag.UNREADABLE_VALUES in flags) is unreadable


def test_a_shared_unreadable_resource_counts_for_every_span() -> None:
    resource = {"service.name": "agent", "deep": DEEP_JSON}
    root = span("root", span_id="0000000000000001")
    child = span("child", parent=root)
    # Spans decoded from one record share one resource mapping.
    spans = [replace(root, resource=resource), replace(child, resource=resource)]
    readable, count = _readable(spans)
    assert count == 2
    assert all(s.resource["deep"] is None for s in readable)


@pytest.mark.parametrize(
    "part",
    [
        {"type": "text", "content": "hello"},
        {"type": "text", "content": "   "},
        {"type": "text", "content": {"nested": [1]}},
        {"type": "text", "content": "hi", "thought": True},
        {"type": "text", "text": "hi"},
        {"type": "text", "content": "hi", "function_call": {"name": "f", "args": {}}},
    ],
    ids=["text", "blank", "structured", "thought", "text-key", "with-call"],
)
def test_text_parts_read_as_the_general_reader_reads_them(part: dict[str, Any]) -> None:
    message = parse_message({"role": "model", "parts": [part]}, "user")
    # The same part with a key no reader looks at takes the general path.
    general = parse_message({"role": "model", "parts": [{**part, "x-extra": 1}]}, "user")
    assert message == general


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [("Refunded $1,250.50 of 1.2k", Outcome.PASS), ("Refunded $1,250.51", Outcome.FAIL)],
    ids=["grounded", "ungrounded"],
)
def test_grounding_decides_the_same_twice(answer: str, outcome: Outcome) -> None:
    seen = transcript(answer=answer, user_input="order 1250.5, about 1190 items")
    first = grounded_numbers(GroundedNumbers(name="n", type="grounded_numbers"), seen)
    again = grounded_numbers(GroundedNumbers(name="n", type="grounded_numbers"), seen)
    assert first == again
    assert first.outcome is outcome


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_replay_without_a_judge_gives_what_its_task_path_gives(seed: int, tmp_path: Path) -> None:
    cases = make_cases(40, seed=seed)
    assembler = Assembler(decision_wait=0.0, max_trace_age=1e9, max_open_traces=10**9)
    traces = []
    for record in (part for c in cases for part in split_requests(c.spans, 2)):
        traces.extend(assembler.add(decode(record), 0.0))
    traces.extend(assembler.drain(DecideReason.FLUSH))
    rubrics = load_rubrics(write_rubrics(tmp_path))

    def replay(source: Any) -> list[str]:
        verdicts = asyncio.run(
            offline.evaluate_traces(
                source,
                rubrics,
                Sampler(judge_enabled=False),
                judge=None,
                summary=offline.ReplaySummary(),
            )
        )
        return [verdict_json(v) for v in verdicts]

    sequential = replay(traces)
    assert len(sequential) >= len(traces)
    assert sequential == replay(offline._aiter(traces))
