"""The shared content readers: block vocabularies, carriers keyed by id, honest capture states.

Table-driven, on spans built here; ``test_fuzz_carriers`` holds the carriers
together as a property, and ``test_live_stacks`` reads what real producers emit.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import pytest

from sidecar.evaluate.capture import CaptureWarnings
from sidecar.evaluate.checks import run_checks
from sidecar.evaluate.conventions import Message, ToolRequest, ToolResponse, parse_message
from sidecar.evaluate.pipeline import missing_evidence
from sidecar.evaluate.transcript import build_transcript
from sidecar.model import UNREADABLE_SHAPE, Captured, ContentField, Outcome, SpanKind, Trace
from tests.builders import event, rubric, span, trace

USER = "My blender from order A1001 arrived broken."

# --- one part reader, every block vocabulary ------------------------------------------------

BLOCKS = [
    pytest.param([{"text": USER}], "user", Message("user", USER), id="bedrock-text-list-body"),
    pytest.param(
        json.dumps([{"text": USER}]), "user", Message("user", USER), id="list-body-as-json"
    ),
    pytest.param(
        {"role": "user", "content": [{"text": USER}]},
        "user",
        Message("user", USER),
        id="bedrock-text-content",
    ),
    pytest.param(
        {
            "role": "assistant",
            "content": [
                {
                    "toolUse": {
                        "toolUseId": "t1",
                        "name": "lookup_order",
                        "input": {"order_id": "A1001"},
                    }
                }
            ],
        },
        "assistant",
        Message("assistant", None, (ToolRequest("lookup_order", "t1", '{"order_id":"A1001"}'),)),
        id="bedrock-tool-use",
    ),
    pytest.param(
        {
            "role": "user",
            "content": [
                {
                    "toolResult": {
                        "toolUseId": "t1",
                        "status": "success",
                        "content": [{"text": "129.99"}],
                    }
                }
            ],
        },
        "user",
        Message("user", None, (), (ToolResponse("t1", None, "129.99"),)),
        id="bedrock-tool-result",
    ),
    pytest.param(
        {
            "role": "user",
            "content": [{"toolResult": {"toolUseId": "t1", "content": [{"json": {"amount": 1}}]}}],
        },
        "user",
        Message("user", None, (), (ToolResponse("t1", None, '{"amount":1}'),)),
        id="bedrock-json-result",
    ),
    pytest.param(
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Looking."},
                {
                    "type": "tool_use",
                    "id": "tu1",
                    "name": "lookup_order",
                    "input": {"order_id": "A1001"},
                },
            ],
        },
        "assistant",
        Message(
            "assistant", "Looking.", (ToolRequest("lookup_order", "tu1", '{"order_id":"A1001"}'),)
        ),
        id="anthropic-text-and-tool-use",
    ),
    pytest.param(
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "tu1",
                    "content": [{"type": "text", "text": "129.99"}],
                }
            ],
        },
        "user",
        Message("user", None, (), (ToolResponse("tu1", None, "129.99"),)),
        id="anthropic-tool-result",
    ),
    pytest.param(
        {"role": "model", "parts": [{"text": "Hi"}, {"functionCall": {"name": "f", "args": {}}}]},
        "user",
        Message("assistant", "Hi", (ToolRequest("f", None, "{}"),)),
        id="gemini-parts",
    ),
    pytest.param(
        {
            "role": "assistant",
            "content": [{"reasoningContent": {"text": "hmm"}}, {"text": "Done."}],
        },
        "assistant",
        Message("assistant", "Done."),
        id="bedrock-reasoning-left-out",
    ),
    pytest.param(
        {"role": "user", "content": '[{"note": "typed by the user"}]'},
        "user",
        Message("user", '[{"note": "typed by the user"}]'),
        id="json-typed-by-a-user-stays-text",
    ),
]


@pytest.mark.parametrize(("value", "role", "expected"), BLOCKS)
def test_one_part_reader_knows_every_block_vocabulary(
    value: object, role: str, expected: Message
) -> None:
    assert parse_message(value, role) == expected


# --- tool arguments and results in events keyed by id (Strands' default) -------------------


def _tool_span(events: list[Any], attrs: dict[str, Any] | None = None) -> Trace:
    root = span("invoke_agent a", attrs={"gen_ai.operation.name": "invoke_agent"}, end=10_000)
    tool = span(
        "execute_tool lookup_order",
        parent=root,
        attrs={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "lookup_order",
            "gen_ai.tool.call.id": "call_1",
            **(attrs or {}),
        },
        start=10,
        end=20,
        events=events,
    )
    return trace(root, tool)


RESULT_BLOCKS = json.dumps([{"text": '{"amount": 129.99}'}])


@pytest.mark.parametrize(
    ("events", "attrs"),
    [
        pytest.param(
            [
                event(
                    "gen_ai.tool.message",
                    {"role": "tool", "content": '{"order_id": "A1001"}', "id": "call_1"},
                ),
                event("gen_ai.choice", {"message": RESULT_BLOCKS, "id": "call_1"}),
            ],
            {},
            id="tool-message-and-choice-events",
        ),
        pytest.param(
            [
                event(
                    "gen_ai.client.inference.operation.details",
                    {
                        "gen_ai.input.messages": json.dumps(
                            [
                                {
                                    "role": "tool",
                                    "parts": [
                                        {
                                            "type": "tool_call",
                                            "id": "call_1",
                                            "name": "lookup_order",
                                            "arguments": {"order_id": "A1001"},
                                        }
                                    ],
                                }
                            ]
                        )
                    },
                ),
                event(
                    "gen_ai.client.inference.operation.details",
                    {
                        "gen_ai.output.messages": json.dumps(
                            [
                                {
                                    "role": "tool",
                                    "parts": [
                                        {
                                            "type": "tool_call_response",
                                            "id": "call_1",
                                            "response": [{"text": '{"amount": 129.99}'}],
                                        }
                                    ],
                                }
                            ]
                        )
                    },
                ),
            ],
            {},
            id="details-span-events",
        ),
        pytest.param(
            [],
            {
                "gen_ai.tool.call.arguments": '{"order_id": "A1001"}',
                "gen_ai.tool.call.result": RESULT_BLOCKS,
            },
            id="attributes",
        ),
    ],
)
def test_tool_content_is_joined_to_its_call_whatever_carries_it(
    events: list[Any], attrs: dict[str, Any]
) -> None:
    (call,) = build_transcript(_tool_span(events, attrs)).tool_calls
    assert json.loads(call.arguments or "null") == {"order_id": "A1001"}
    assert call.result == '{"amount": 129.99}'


def test_an_event_of_another_call_is_not_joined() -> None:
    events = [event("gen_ai.tool.message", {"content": '{"order_id": "X"}', "id": "call_9"})]
    (call,) = build_transcript(_tool_span(events)).tool_calls
    assert call.arguments is None


# --- not captured, captured but unreadable -------------------------------------------------

RUBRIC = rubric(
    id="refunds",
    checks=[
        {"name": "answered", "type": "answer_regex", "must_match": "."},
        {"name": "grounded", "type": "grounded_numbers"},
    ],
)


def _chat_trace(output: object) -> Trace:
    root = span(
        "invoke_agent refund-agent",
        attrs={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "refund-agent"},
        resource={"service.name": "refund-agent"},
        end=10_000,
    )
    chat = span(
        "chat gpt-4o",
        parent=root,
        kind=SpanKind.CLIENT,
        scope="opentelemetry.instrumentation.openai_v2",
        attrs={
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps([{"role": "user", "content": USER}]),
            "gen_ai.output.messages": output,
        },
        start=10,
        end=20,
    )
    return trace(root, chat)


def test_content_in_an_unknown_shape_is_unreadable_not_uncaptured(
    caplog: pytest.LogCaptureFixture,
) -> None:
    transcript = build_transcript(_chat_trace(json.dumps({"reply": {"said": "Refunded 129.99"}})))
    capture = transcript.capture
    assert capture.answer is Captured.UNREADABLE
    assert capture.missing == ()
    assert capture.unreadable_fields == (ContentField.ANSWER,)
    assert capture.advice == ""
    assert "gen_ai.output.messages on span 'chat gpt-4o'" in capture.unreadable
    by_name = {r.name: r for r in run_checks(RUBRIC, transcript)}
    detail = by_name["answered"].detail
    assert by_name["answered"].outcome is Outcome.ERROR
    assert UNREADABLE_SHAPE in detail
    assert "gen_ai.output.messages" in detail
    assert "OTEL_INSTRUMENTATION" not in detail  # never advice to change a setting that is right
    warnings = CaptureWarnings()
    with caplog.at_level(logging.WARNING):
        warnings.note(transcript)
        warnings.note(transcript)
    (logged,) = caplog.records
    assert UNREADABLE_SHAPE in logged.getMessage()


@pytest.mark.parametrize(
    "output",
    [
        pytest.param(None, id="absent"),
        pytest.param("[REDACTED]", id="strands-redacted"),
        pytest.param(
            json.dumps([{"role": "assistant", "parts": [{"type": "text"}]}]), id="skeleton"
        ),
    ],
)
def test_withheld_content_is_not_captured_and_advice_names_the_setting(output: object) -> None:
    transcript = build_transcript(_chat_trace(output))
    assert transcript.capture.answer is Captured.NOT_CAPTURED
    assert transcript.capture.unreadable_fields == ()
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in transcript.capture.advice


@dataclass(frozen=True)
class _Case:
    rubric: Any
    transcript: Any


def test_the_judge_is_not_asked_about_an_unreadable_case() -> None:
    transcript = build_transcript(_chat_trace(json.dumps({"reply": {"said": "x"}})))
    gap = missing_evidence(_Case(RUBRIC, transcript))  # type: ignore[arg-type]
    assert gap is not None
    assert gap[0] == UNREADABLE_SHAPE
    assert "gen_ai.output.messages" in gap[1]


def test_a_trace_that_only_defines_an_agent_has_nothing_to_capture() -> None:
    """LangGraph under OpenLLMetry records building the graph as a trace of its own."""
    built = span(
        "create_agent refund-agent",
        attrs={"gen_ai.operation.name": "create_agent", "gen_ai.agent.name": "refund-agent"},
        resource={"service.name": "refund-agent"},
    )
    transcript = build_transcript(trace(built))
    assert transcript.capture.missing == ()
    assert transcript.capture.advice == ""
    assert transcript.capture.answer is Captured.NOT_APPLICABLE
    assert transcript.agent_name == "refund-agent"
