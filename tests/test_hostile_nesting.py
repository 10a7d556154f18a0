"""Deep nesting never raises RecursionError (class 2).

JSON text inside message content, tool results and arguments, and structured
(kvlist/array) values, nested deeper than ``sidecar.bounds.MAX_NESTING``, are
unreadable: the field is missing (checks that need it are ERROR, never PASS),
the transcript is flagged ``unreadable_values``, and the trace still gets its
verdict.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from sidecar.bounds import MAX_NESTING, json_too_deep, value_depth
from sidecar.evaluate.checks import run_checks
from sidecar.evaluate.conventions import MessageMemo, parse_messages
from sidecar.evaluate.conventions.attributes import parse_json, text_of
from sidecar.evaluate.pipeline import judge_cases, plan
from sidecar.evaluate.rubric import Rubric
from sidecar.evaluate.sample import Sampler
from sidecar.evaluate.transcript import build_transcript
from sidecar.model import Flag, Outcome, SpanEvent, SpanKind
from tests.builders import MS, genai_trace, span, trace

DEEP = 100_000


def deep_text(depth: int, opener: str = "[") -> str:
    if opener == "{":
        return '{"a":' * depth + "1" + "}" * depth
    return "[" * depth + "1" + "]" * depth


def deep_value(depth: int) -> Any:
    value: Any = "bottom"
    for level in range(depth):
        value = {"k": value} if level % 2 else [value]
    return value


@pytest.mark.parametrize(
    ("text", "too_deep"),
    [
        pytest.param("[" * MAX_NESTING + "]" * MAX_NESTING, False, id="at-the-bound"),
        pytest.param("[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1), True, id="past-the-bound"),
        pytest.param('["' + "[" * 500 + '"]', False, id="brackets-inside-a-string"),
        pytest.param('["\\"' + "[" * 500 + '"]', False, id="escaped-quote-then-brackets"),
        pytest.param("[" * DEEP, True, id="unclosed"),
        pytest.param("[]" * DEEP, False, id="many-shallow"),
    ],
)
def test_json_too_deep_measures_without_parsing(text: str, too_deep: bool) -> None:
    assert json_too_deep(text) is too_deep


def test_value_depth_is_iterative() -> None:
    assert value_depth(deep_value(DEEP)) == MAX_NESTING + 1
    assert value_depth(deep_value(10)) == 10
    assert value_depth("x") == 0


@pytest.mark.parametrize("opener", ["[", "{"])
def test_parse_json_reads_deep_text_as_missing(opener: str) -> None:
    assert parse_json(deep_text(DEEP, opener)) is None
    assert parse_json("[[1]]") == [[1]]


def test_text_of_a_deep_structure_is_missing() -> None:
    assert text_of(deep_value(DEEP)) is None


def test_messages_nested_too_deep_are_missing_with_and_without_memo() -> None:
    text = '[{"role": "user", "parts": [{"type": "text", "content": ' + deep_text(5000) + "}]}]"
    assert parse_messages(text, "user") is None
    assert MessageMemo().messages(text, "user") is None
    # A known conversation growing by a too-deep message: the memo refuses only the new part.
    memo = MessageMemo()
    first = '[{"role": "user", "content": "hi"}]'
    assert memo.messages(first, "user") is not None
    assert memo.messages(first[:-1] + ", " + deep_text(5000) + "]", "user") is None


def test_deep_json_inside_message_content_is_text_not_a_crash() -> None:
    # The user typed brackets: the messages are shallow, the content is its own text.
    content = deep_text(DEEP)
    messages = json.dumps([{"role": "user", "parts": [{"type": "text", "content": content}]}])
    [message] = parse_messages(messages, "user") or ()
    assert message.text == content


GROUNDED = Rubric.model_validate(
    {
        "id": "shop",
        "version": "1",
        "checks": [
            {"name": "grounded", "type": "grounded_numbers"},
            {
                "name": "args",
                "type": "tool_arguments",
                "tool": "lookup",
                "schema": {"type": "object"},
            },
        ],
    }
)


def test_deep_messages_attribute_leaves_the_input_missing_and_flags_the_trace() -> None:
    deep_messages = "[" * DEEP + "]" * DEEP
    base = genai_trace("Refund order 7", [("lookup", {"id": 7}, '{"amount": 40}')], "Refund: $40")
    spans = list(base.spans)
    chat = next(s for s in spans if s.name.startswith("chat"))
    attributes = {**chat.attributes, "gen_ai.input.messages": deep_messages}
    spans[spans.index(chat)] = dataclasses.replace(chat, attributes=attributes)
    transcript = build_transcript(trace(*spans))
    assert Flag.UNREADABLE_VALUES in transcript.flags
    assert transcript.answer == "Refund: $40"


def test_deep_structured_and_text_values_end_as_error_not_pass() -> None:
    root = span(
        "invoke_agent shop",
        span_id="a" * 16,
        attrs={"gen_ai.agent.name": "shop", "gen_ai.operation.name": "invoke_agent"},
        end=5 * MS,
    )
    tool = span(
        "execute_tool lookup",
        span_id="b" * 16,
        parent=root,
        attrs={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "lookup",
            "gen_ai.tool.call.arguments": deep_value(DEEP),
            "gen_ai.tool.call.result": deep_text(DEEP, "{"),
        },
        start=MS,
        events=[SpanEvent("note", 0, {"deep": deep_value(DEEP)})],
    )
    chat = span(
        "chat m",
        span_id="c" * 16,
        parent=root,
        kind=SpanKind.CLIENT,
        attrs={
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps([{"role": "user", "content": "refund?"}]),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "content": "$45 back"}]),
        },
        start=2 * MS,
    )
    transcript = build_transcript(trace(root, tool, chat))
    assert transcript.flags == (Flag.UNREADABLE_VALUES,)
    [call] = transcript.tool_calls
    # Too deep to read, as a structure or as JSON text: missing, never read as something else.
    assert (call.arguments, call.result) == (None, None)
    results = {r.name: r for r in run_checks(GROUNDED, transcript)}
    assert results["grounded"].outcome is Outcome.ERROR
    assert "not captured or unreadable; cannot ground 45" in results["grounded"].detail
    assert results["args"].outcome is Outcome.ERROR


async def test_a_deep_trace_gets_its_verdict_through_the_pipeline() -> None:
    # OpenAI-style messages whose content is JSON text nested 5,000 deep.
    deep = deep_text(5000)
    root = span(
        "invoke_agent shop",
        span_id="a" * 16,
        attrs={"gen_ai.operation.name": "invoke_agent"},
        end=5 * MS,
    )
    chat = span(
        "chat m",
        span_id="c" * 16,
        parent=root,
        kind=SpanKind.CLIENT,
        attrs={
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps([{"role": "user", "content": deep}]),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "content": deep}]),
            "gen_ai.tool.call.result": deep,
        },
        start=MS,
    )
    tool = span(
        "execute_tool lookup",
        span_id="b" * 16,
        parent=root,
        attrs={"gen_ai.tool.name": "lookup", "gen_ai.tool.call.arguments": deep},
        start=2 * MS,
    )
    transcript, cases = plan(trace(root, chat, tool), [GROUNDED], Sampler(judge_enabled=False), 0.0)
    [verdict] = await judge_cases(cases, None)
    assert transcript.user_input == deep  # the user's text, read as text
    assert transcript.answer == deep
    assert "unreadable_values" in verdict.flags
    checks = {c.name: c.outcome for c in verdict.checks}
    assert checks["args"] is Outcome.ERROR  # the arguments cannot be read as JSON


def test_grounding_reads_the_digits_of_a_deep_document_inside_a_result() -> None:
    # The result is plain text quoting a deep document: its digits are evidence.
    deep_result = "found: " + "[" * 5000 + "40" + "]" * 5000
    base = genai_trace("refund?", [("lookup", {"id": 1}, deep_result)], "You get $45.")
    rubric = Rubric.model_validate(
        {"id": "g", "version": "1", "checks": [{"name": "g", "type": "grounded_numbers"}]}
    )
    [result] = run_checks(rubric, build_transcript(base))
    assert (result.outcome, result.detail[:13]) == (Outcome.FAIL, "ungrounded 45")
