from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from sidecar.evaluate.pipeline import bare_transcript
from sidecar.evaluate.transcript import build_transcript
from sidecar.model import ErrorSpan, SpanKind, ToolCall, Trace, Transcript
from tests.builders import (
    MS,
    TRACE_ID,
    ToolSpec,
    event,
    genai_trace,
    span,
    span_id,
    trace,
    with_spans,
)

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

LOOKUP_RESULT = '{"order_id":"A1","amount":40.0,"status":"delivered"}'
REFUND_CALLS: list[ToolSpec] = [
    ("lookup_order", {"order_id": "A1"}, LOOKUP_RESULT),
    ("issue_refund", {"order_id": "A1", "amount": 40.0}, '{"status":"refunded"}'),
]
ADK_SCOPE = "gcp.vertex.agent"


def tool_view(call: ToolCall) -> tuple[Any, ...]:
    """A tool call with its arguments parsed, so JSON spacing does not matter."""
    arguments = None if call.arguments is None else json.loads(call.arguments)
    return (call.name, call.call_id, arguments, call.result, call.error)


def check(transcript: Transcript, expected: Mapping[str, Any]) -> None:
    for name, want in expected.items():
        if name == "tool_calls":
            assert [tool_view(c) for c in transcript.tool_calls] == want
        else:
            assert getattr(transcript, name) == want, name


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# --- one case per convention ----------------------------------------------------------


def case_otel_genai() -> Trace:
    return genai_trace(
        "Refund order A1, please.", REFUND_CALLS, "Your refund of $40 is on its way."
    )


def case_otel_genai_events() -> Trace:
    """Content as span events (semconv before 1.37), kvlist and JSON string mixed."""
    root = span("invoke_agent helpdesk", span_id=span_id(1), end=50 * MS)
    first = span(
        "chat gpt-4o",
        span_id=span_id(2),
        parent=root,
        start=1 * MS,
        end=10 * MS,
        attrs={"gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o"},
        events=[
            event("gen_ai.system.message", {"gen_ai.system": "openai", "content": "Be brief."}),
            event(
                "gen_ai.user.message", {"gen_ai.system": "openai", "content": "Weather in Paris?"}
            ),
            event(
                "gen_ai.choice",
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "id": "call_w",
                                "type": "function",
                                "function": {
                                    "name": "get_weather",
                                    "arguments": '{"location":"Paris"}',
                                },
                            }
                        ],
                    },
                },
            ),
        ],
    )
    second = span(
        "chat gpt-4o",
        span_id=span_id(3),
        parent=root,
        start=20 * MS,
        end=30 * MS,
        attrs={"gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o"},
        events=[
            event("gen_ai.user.message", {"content": "Weather in Paris?"}),
            event("gen_ai.tool.message", {"content": "rainy, 57°F", "id": "call_w"}),
            event(
                "gen_ai.choice",
                {"message": json.dumps({"role": "assistant", "content": "Rainy, 57°F."})},
            ),
        ],
    )
    return trace(root, first, second)


def case_otel_genai_content_events() -> Trace:
    """The oldest form: gen_ai.content.prompt / gen_ai.content.completion events."""
    chat = span(
        "chat gpt-3.5-turbo",
        span_id=span_id(1),
        attrs={
            "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-3.5-turbo",
            "gen_ai.usage.prompt_tokens": 12,
            "gen_ai.usage.completion_tokens": 3,
        },
        events=[
            event(
                "gen_ai.content.prompt",
                {"gen_ai.prompt": json.dumps([{"role": "user", "content": "Say hi"}])},
            ),
            event(
                "gen_ai.content.completion",
                {"gen_ai.completion": json.dumps([{"role": "assistant", "content": "Hi!"}])},
            ),
        ],
    )
    return trace(chat)


def case_otel_genai_messages_only() -> Trace:
    """No execute_tool span: the call is rebuilt from the two chat spans' messages."""
    root = span("invoke_agent weather", span_id=span_id(1), end=40 * MS)
    call = {"type": "tool_call", "id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}}
    asked = [{"role": "user", "parts": [{"type": "text", "content": "Oslo weather?"}]}]
    first = span(
        "chat m",
        span_id=span_id(2),
        parent=root,
        start=1 * MS,
        attrs={
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": asked,
            "gen_ai.output.messages": [{"role": "assistant", "parts": [call]}],
        },
    )
    response = {"type": "tool_call_response", "id": "c1", "response": {"temp_c": -3}}
    second = span(
        "chat m",
        span_id=span_id(3),
        parent=root,
        start=5 * MS,
        attrs={
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": [
                *asked,
                {"role": "assistant", "parts": [call]},
                {"role": "tool", "parts": [response]},
            ],
            "gen_ai.output.messages": [
                {"role": "assistant", "parts": [{"type": "text", "content": "-3 °C in Oslo."}]}
            ],
        },
    )
    return trace(root, first, second)


def adk_v1_trace(*, content: bool = True, parallel: bool = False) -> Trace:
    """What google-adk 1.14 records for one tool round trip (telemetry.py, runners.py).

    ``invocation`` > ``agent_run [refund_agent]`` > ``call_llm`` > ``execute_tool``;
    request and response are pydantic dumps in JSON strings, tool spans carry
    ``{}`` placeholders for the LLM fields.
    """
    res = {"service.name": "refund-service", "service.version": "2.0.0"}

    def adk(name: str, n: int, parent: str | None, start: int, end: int, **attrs: Any) -> Any:
        return span(
            name,
            span_id=span_id(n),
            parent=parent,
            start=start,
            end=end,
            attrs=attrs,
            resource=res,
            scope=ADK_SCOPE,
        )

    user = {"parts": [{"text": "I want a refund for order A1"}], "role": "user"}
    calls: list[dict[str, Any]] = [
        {"id": "adk-7f3e", "args": {"order_id": "A1"}, "name": "lookup_order"}
    ]
    if parallel:
        calls.append({"id": "adk-8a21", "args": {"order_id": "A1"}, "name": "order_history"})
    model_turn = {"parts": [{"function_call": c} for c in calls], "role": "model"}
    results: dict[str, Any] = {
        "adk-7f3e": {"amount": 40.0, "status": "delivered"},
        "adk-8a21": {"result": "none"},
    }
    tool_turn = {
        "parts": [
            {"function_response": {"id": c["id"], "name": c["name"], "response": results[c["id"]]}}
            for c in calls
        ],
        "role": "user",
    }
    config = {
        "system_instruction": "You help customers with refunds.",
        "labels": {"adk_agent_name": "refund_agent"},
    }

    def request(contents: list[Any]) -> str:
        body = {"model": "gemini-2.5-flash", "config": config, "contents": contents}
        return json.dumps(body, ensure_ascii=False)

    def response(content: Any, tokens_in: int, tokens_out: int) -> str:
        usage = {
            "candidates_token_count": tokens_out,
            "prompt_token_count": tokens_in,
            "total_token_count": tokens_in + tokens_out,
        }
        return compact({"content": content, "finish_reason": "STOP", "usage_metadata": usage})

    def llm(n: int, start: int, contents: list[Any], answer: Any, usage: tuple[int, int]) -> Any:
        attrs: dict[str, Any] = {
            "gen_ai.system": "gcp.vertex.agent",
            "gen_ai.request.model": "gemini-2.5-flash",
            "gcp.vertex.agent.invocation_id": "e-5c1b",
            "gcp.vertex.agent.session_id": "s-1",
            "gcp.vertex.agent.event_id": f"ev-{n}",
            "gen_ai.usage.input_tokens": usage[0],
            "gen_ai.usage.output_tokens": usage[1],
            "gen_ai.response.finish_reasons": ["stop"],
        }
        if content:
            attrs["gcp.vertex.agent.llm_request"] = request(contents)
            attrs["gcp.vertex.agent.llm_response"] = response(answer, *usage)
        else:  # ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS=false (ADK 1.15+)
            attrs["gcp.vertex.agent.llm_request"] = {}
            attrs["gcp.vertex.agent.llm_response"] = {}
        return adk("call_llm", n, span_id(2), start, start + 10 * MS, **attrs)

    spans = [
        adk("invocation", 1, None, 0, 100 * MS),
        adk("agent_run [refund_agent]", 2, span_id(1), 1 * MS, 99 * MS),
        llm(3, 2 * MS, [user], model_turn, (150, 12)),
    ]
    for k, c in enumerate(calls):
        tool_attrs: dict[str, Any] = {
            "gen_ai.system": "gcp.vertex.agent",
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": c["name"],
            "gen_ai.tool.description": f"{c['name']} tool",
            "gen_ai.tool.call.id": c["id"],
            "gcp.vertex.agent.event_id": f"ev-t{k}",
            "gcp.vertex.agent.llm_request": "{}",
            "gcp.vertex.agent.llm_response": "{}",
        }
        if content:
            tool_attrs["gcp.vertex.agent.tool_call_args"] = json.dumps(c["args"])
            tool_attrs["gcp.vertex.agent.tool_response"] = json.dumps(results[c["id"]])
        start = (5 + k) * MS
        spans.append(
            adk(f"execute_tool {c['name']}", 4 + k, span_id(3), start, start + MS, **tool_attrs)
        )
    if parallel:
        spans.append(
            adk(
                "execute_tool (merged)",
                9,
                span_id(3),
                8 * MS,
                9 * MS,
                **{
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "(merged tools)",
                    "gen_ai.tool.call.id": "ev-merged",
                    "gcp.vertex.agent.tool_call_args": "N/A",
                    "gcp.vertex.agent.tool_response": "{}",
                },
            )
        )
    final = {"parts": [{"text": "Your refund of $40.00 is on its way."}], "role": "model"}
    spans.append(llm(10, 20 * MS, [user, model_turn, tool_turn], final, (200, 15)))
    return trace(*spans)


def case_adk_v2() -> Trace:
    """ADK 2: OTel GenAI names under ADK's scope, root invoke_workflow, structured messages."""
    res = {"service.name": "refund-service"}
    root = span(
        "invoke_workflow refund_flow",
        span_id=span_id(1),
        end=60 * MS,
        scope=ADK_SCOPE,
        resource=res,
        attrs={"gen_ai.operation.name": "invoke_workflow"},
    )
    agent = span(
        "invoke_agent refund_agent",
        span_id=span_id(2),
        parent=root,
        start=1 * MS,
        end=59 * MS,
        scope=ADK_SCOPE,
        resource=res,
        attrs={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "refund_agent",
            "gen_ai.conversation.id": "s-1",
        },
    )
    user = {"role": "user", "parts": [{"type": "text", "content": "Refund A1"}]}
    call = {
        "type": "tool_call",
        "id": "adk-1",
        "name": "lookup_order",
        "arguments": {"order_id": "A1"},
    }
    llm1 = span(
        "generate_content gemini-2.5-flash",
        span_id=span_id(3),
        parent=agent,
        start=2 * MS,
        end=10 * MS,
        scope=ADK_SCOPE,
        attrs={
            "gen_ai.operation.name": "generate_content",
            "gen_ai.request.model": "gemini-2.5-flash",
            "gen_ai.input.messages": [user],
            "gen_ai.output.messages": [
                {"role": "assistant", "parts": [call], "finish_reason": "stop"}
            ],
            "gen_ai.usage.input_tokens": 90,
            "gen_ai.usage.output_tokens": 7,
        },
    )
    tool = span(
        "execute_tool lookup_order",
        span_id=span_id(4),
        parent=agent,
        start=11 * MS,
        scope=ADK_SCOPE,
        attrs={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "lookup_order",
            "gen_ai.tool.call.id": "adk-1",
            "gen_ai.tool.call.arguments": {"order_id": "A1"},
            "gen_ai.tool.call.result": {"amount": 40.0},
        },
    )
    llm2 = span(
        "generate_content gemini-2.5-flash",
        span_id=span_id(5),
        parent=agent,
        start=20 * MS,
        end=30 * MS,
        scope=ADK_SCOPE,
        attrs={
            "gen_ai.operation.name": "generate_content",
            "gen_ai.request.model": "gemini-2.5-flash",
            "gen_ai.output.messages": [
                {"role": "assistant", "parts": [{"type": "text", "content": "Refunded $40."}]}
            ],
            "gen_ai.usage.input_tokens": 120,
            "gen_ai.usage.output_tokens": 5,
        },
    )
    return trace(root, agent, llm1, tool, llm2)


def case_openinference() -> Trace:
    res = {"service.name": "support-bot"}
    root = span(
        "RefundAgent",
        span_id=span_id(1),
        end=80 * MS,
        resource=res,
        attrs={
            "openinference.span.kind": "AGENT",
            "input.value": "Refund order A1 please",
            "input.mime_type": "text/plain",
            "output.value": json.dumps({"output": "Refunded $40."}),
            "output.mime_type": "application/json",
        },
    )
    first = span(
        "ChatCompletion",
        span_id=span_id(2),
        parent=root,
        start=1 * MS,
        end=10 * MS,
        attrs={
            "openinference.span.kind": "LLM",
            "llm.model_name": "gpt-4o-2024-08-06",
            "llm.input_messages.0.message.role": "system",
            "llm.input_messages.0.message.content": "You process refunds.",
            "llm.input_messages.1.message.role": "user",
            "llm.input_messages.1.message.content": "Refund order A1 please",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.tool_calls.0.tool_call.id": "call_a",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "lookup_order",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"order_id":"A1"}',
            "llm.token_count.prompt": 120,
            "llm.token_count.completion": 10,
            "llm.token_count.total": 130,
        },
    )
    tool = span(
        "lookup_order",
        span_id=span_id(3),
        parent=root,
        start=11 * MS,
        attrs={
            "openinference.span.kind": "TOOL",
            "tool.name": "lookup_order",
            "tool.parameters": '{"type":"object","properties":{"order_id":{"type":"string"}}}',
            "input.value": '{"order_id": "A1"}',
            "output.value": '{"amount": 40}',
        },
    )
    second = span(
        "ChatCompletion",
        span_id=span_id(4),
        parent=root,
        start=20 * MS,
        end=30 * MS,
        attrs={
            "openinference.span.kind": "LLM",
            "llm.model_name": "gpt-4o-2024-08-06",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "Refund order A1 please",
            "llm.input_messages.1.message.role": "assistant",
            "llm.input_messages.1.message.tool_calls.0.tool_call.id": "call_a",
            "llm.input_messages.1.message.tool_calls.0.tool_call.function.name": "lookup_order",
            "llm.input_messages.1.message.tool_calls.0.tool_call.function.arguments": '{"order_id":"A1"}',
            "llm.input_messages.2.message.role": "tool",
            "llm.input_messages.2.message.tool_call_id": "call_a",
            "llm.input_messages.2.message.content": '{"amount": 40}',
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "Refunded $40.",
            "llm.token_count.prompt": 150,
            "llm.token_count.completion": 8,
        },
    )
    return trace(root, first, tool, second)


def case_openllmetry() -> Trace:
    res = {"service.name": "refund-flow-svc"}
    root = span(
        "refund_flow.workflow",
        span_id=span_id(1),
        end=90 * MS,
        resource=res,
        attrs={
            "traceloop.span.kind": "workflow",
            "traceloop.entity.name": "refund_flow",
            "traceloop.workflow.name": "refund_flow",
            "traceloop.entity.input": json.dumps({"args": ["Refund order A1"], "kwargs": {}}),
            "traceloop.entity.output": json.dumps("Refunded $40."),
        },
    )
    common = {
        "llm.request.type": "chat",
        "gen_ai.system": "openai",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.response.model": "gpt-4o-2024-08-06",
    }
    first = span(
        "openai.chat",
        span_id=span_id(2),
        parent=root,
        start=1 * MS,
        end=10 * MS,
        kind=SpanKind.CLIENT,
        attrs={
            **common,
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": "Refund order A1",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.finish_reason": "tool_calls",
            "gen_ai.completion.0.tool_calls.0.id": "call_x",
            "gen_ai.completion.0.tool_calls.0.name": "lookup_order",
            "gen_ai.completion.0.tool_calls.0.arguments": '{"order_id":"A1"}',
            "gen_ai.usage.prompt_tokens": 50,
            "gen_ai.usage.completion_tokens": 9,
            "llm.usage.total_tokens": 59,
        },
    )
    tool = span(
        "lookup_order.tool",
        span_id=span_id(3),
        parent=root,
        start=11 * MS,
        attrs={
            "traceloop.span.kind": "tool",
            "traceloop.entity.name": "lookup_order",
            "traceloop.entity.input": json.dumps({"args": [], "kwargs": {"order_id": "A1"}}),
            "traceloop.entity.output": '{"amount": 40}',
        },
    )
    second = span(
        "openai.chat",
        span_id=span_id(4),
        parent=root,
        start=20 * MS,
        end=30 * MS,
        kind=SpanKind.CLIENT,
        attrs={
            **common,
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": "Refund order A1",
            "gen_ai.prompt.1.role": "assistant",
            "gen_ai.prompt.1.tool_calls.0.id": "call_x",
            "gen_ai.prompt.1.tool_calls.0.name": "lookup_order",
            "gen_ai.prompt.1.tool_calls.0.arguments": '{"order_id":"A1"}',
            "gen_ai.prompt.2.role": "tool",
            "gen_ai.prompt.2.content": '{"amount": 40}',
            "gen_ai.prompt.2.tool_call_id": "call_x",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": "Refunded $40.",
            "gen_ai.usage.prompt_tokens": 80,
            "gen_ai.usage.completion_tokens": 6,
        },
    )
    return trace(root, first, tool, second)


LOOKUP_A1 = ("lookup_order", {"order_id": "A1"})
CONVENTION_CASES = [
    pytest.param(
        case_otel_genai,
        {
            "root_span_id": span_id(1),
            "agent_name": "refund-agent",
            "agent_version": "1.4.2",
            "user_input": "Refund order A1, please.",
            "tool_calls": [
                ("lookup_order", "call_1", {"order_id": "A1"}, LOOKUP_RESULT, None),
                (
                    "issue_refund",
                    "call_2",
                    {"order_id": "A1", "amount": 40.0},
                    '{"status":"refunded"}',
                    None,
                ),
            ],
            "answer": "Your refund of $40 is on its way.",
            "models": ("gemini-2.5-flash",),
            "input_tokens": 300,
            "output_tokens": 60,
            "latency_ms": 47.0,
            "conventions": ("otel_genai",),
        },
        id="otel_genai-semconv-1.37",
    ),
    pytest.param(
        case_otel_genai_events,
        {
            "agent_name": "helpdesk",
            "user_input": "Weather in Paris?",
            "tool_calls": [("get_weather", "call_w", {"location": "Paris"}, "rainy, 57°F", None)],
            "answer": "Rainy, 57°F.",
            "models": ("gpt-4o",),
            "conventions": ("otel_genai",),
        },
        id="otel_genai-span-events",
    ),
    pytest.param(
        case_otel_genai_content_events,
        {
            "user_input": "Say hi",
            "answer": "Hi!",
            "input_tokens": 12,
            "output_tokens": 3,
            "agent_name": None,
            "conventions": ("otel_genai",),
        },
        id="otel_genai-content-prompt-events",
    ),
    pytest.param(
        case_otel_genai_messages_only,
        {
            "user_input": "Oslo weather?",
            "tool_calls": [("get_weather", "c1", {"city": "Oslo"}, '{"temp_c":-3}', None)],
            "answer": "-3 °C in Oslo.",
        },
        id="otel_genai-tool-call-from-messages",
    ),
    pytest.param(
        adk_v1_trace,
        {
            "root_span_id": span_id(1),
            "agent_name": "refund_agent",
            "agent_version": "2.0.0",
            "user_input": "I want a refund for order A1",
            "tool_calls": [
                (
                    "lookup_order",
                    "adk-7f3e",
                    {"order_id": "A1"},
                    '{"amount": 40.0, "status": "delivered"}',
                    None,
                )
            ],
            "answer": "Your refund of $40.00 is on its way.",
            "models": ("gemini-2.5-flash",),
            "input_tokens": 350,
            "output_tokens": 27,
            "latency_ms": 100.0,
            "conventions": ("adk_v1",),
        },
        id="adk_v1-1.14",
    ),
    pytest.param(
        lambda: adk_v1_trace(parallel=True),
        {
            "tool_calls": [
                (
                    "lookup_order",
                    "adk-7f3e",
                    {"order_id": "A1"},
                    '{"amount": 40.0, "status": "delivered"}',
                    None,
                ),
                ("order_history", "adk-8a21", {"order_id": "A1"}, '{"result": "none"}', None),
            ],
            "answer": "Your refund of $40.00 is on its way.",
        },
        id="adk_v1-parallel-calls-merged-span-skipped",
    ),
    pytest.param(
        lambda: adk_v1_trace(content=False),
        {
            "user_input": None,
            "answer": None,
            "tool_calls": [("lookup_order", "adk-7f3e", None, None, None)],
            "input_tokens": 350,
        },
        id="adk_v1-content-capture-off",
    ),
    pytest.param(
        case_adk_v2,
        {
            "root_span_id": span_id(1),
            "agent_name": "refund_agent",
            "user_input": "Refund A1",
            "tool_calls": [("lookup_order", "adk-1", {"order_id": "A1"}, '{"amount":40.0}', None)],
            "answer": "Refunded $40.",
            "input_tokens": 210,
            "output_tokens": 12,
            "conventions": ("otel_genai",),
        },
        id="adk_v2-invoke_workflow",
    ),
    pytest.param(
        case_openinference,
        {
            "agent_name": "support-bot",
            "user_input": "Refund order A1 please",
            "tool_calls": [("lookup_order", "call_a", {"order_id": "A1"}, '{"amount": 40}', None)],
            "answer": "Refunded $40.",
            "models": ("gpt-4o-2024-08-06",),
            "input_tokens": 270,
            "output_tokens": 18,
            "conventions": ("openinference",),
        },
        id="openinference-agent-llm-tool",
    ),
    pytest.param(
        case_openllmetry,
        {
            "agent_name": "refund-flow-svc",
            "user_input": "Refund order A1",
            "tool_calls": [("lookup_order", "call_x", {"order_id": "A1"}, '{"amount": 40}', None)],
            "answer": "Refunded $40.",
            "models": ("gpt-4o-2024-08-06",),
            "input_tokens": 130,
            "output_tokens": 15,
            "conventions": ("openllmetry",),
        },
        id="openllmetry-workflow-legacy-prompts",
    ),
]


@pytest.mark.parametrize(("build", "expected"), CONVENTION_CASES)
def test_convention(build: Callable[[], Trace], expected: Mapping[str, Any]) -> None:
    check(build_transcript(build()), expected)


# --- real fixtures: the same tool call in OTel GenAI and OpenInference form ------------


def shared(name: str) -> dict[str, Any]:
    path = SHARED_DATA / name
    if not path.is_file():
        pytest.skip(f"shared test data not found at {path} (it lives outside the repository)")
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def test_genai_and_openinference_fixtures_give_the_same_tool_call() -> None:
    genai = shared("openinference_genai_otel_genai_client_span_tool_calls.json")
    openinference = shared("openinference_genai_expected_openinference_client_span_tool_calls.json")

    from_genai = build_transcript(trace(span("chat gpt-4", attrs=genai)))
    from_oi = build_transcript(trace(span("ChatCompletion", attrs=openinference)))

    assert from_genai.conventions == ("otel_genai",)
    assert from_oi.conventions == ("openinference",)
    assert [tool_view(c) for c in from_genai.tool_calls] == [
        ("get_weather", "1234", {"location": "Paris"}, "rainy, 57°F", None)
    ]
    assert [tool_view(c) for c in from_oi.tool_calls] == [
        tool_view(c) for c in from_genai.tool_calls
    ]
    for field in ("user_input", "answer", "models", "input_tokens", "output_tokens"):
        assert getattr(from_oi, field) == getattr(from_genai, field), field
    assert from_genai.user_input == "Weather in Paris?"
    assert (
        from_genai.answer == "The weather in Paris is currently rainy with a temperature of 57°F."
    )
    assert from_genai.models == ("gpt-4-0613",)
    assert (from_genai.input_tokens, from_genai.output_tokens) == (97, 52)


def test_genai_tool_execution_fixture_merges_with_the_client_span() -> None:
    client = shared("openinference_genai_otel_genai_client_span_tool_calls.json")
    tool = shared("openinference_genai_otel_genai_tool_execution_span.json")
    root = span("invoke_agent weather", span_id=span_id(1), end=30 * MS)
    execution = span(
        "execute_tool get_weather", span_id=span_id(2), parent=root, start=1 * MS, attrs=tool
    )
    chat = span("chat gpt-4", span_id=span_id(3), parent=root, start=5 * MS, attrs=client)

    transcript = build_transcript(trace(root, execution, chat))

    # One call, not two: the execution span and the message history share call id 1234.
    assert [tool_view(c) for c in transcript.tool_calls] == [
        ("get_weather", "1234", {"location": "Paris"}, "rainy, 57°F", None)
    ]
    assert transcript.tool_calls[0].span_id == span_id(2)


# --- content forms and capture ------------------------------------------------------------


def test_kvlist_and_json_string_content_give_the_same_transcript() -> None:
    as_json = build_transcript(
        genai_trace("Refund A1", REFUND_CALLS, "Done: $40.", structured=False)
    )
    as_kvlist = build_transcript(
        genai_trace("Refund A1", REFUND_CALLS, "Done: $40.", structured=True)
    )
    assert as_kvlist == as_json
    assert as_json.user_input == "Refund A1"
    assert [c.name for c in as_json.tool_calls] == ["lookup_order", "issue_refund"]


def test_content_capture_off_gives_none_never_empty_text() -> None:
    transcript = build_transcript(
        genai_trace("Refund A1", REFUND_CALLS, "Done.", capture_content=False)
    )
    assert transcript.user_input is None
    assert transcript.answer is None
    assert [(c.name, c.arguments, c.result) for c in transcript.tool_calls] == [
        ("lookup_order", None, None),
        ("issue_refund", None, None),
    ]
    # What is not content is still there.
    assert transcript.input_tokens == 300
    assert transcript.models == ("gemini-2.5-flash",)


@pytest.mark.parametrize(
    "output",
    [
        pytest.param(
            [{"role": "assistant", "parts": [{"type": "text", "content": ""}]}], id="empty-part"
        ),
        pytest.param(
            [{"role": "assistant", "parts": [{"type": "text", "content": "  "}]}], id="blank-part"
        ),
        pytest.param("", id="empty-attribute"),
        pytest.param([], id="no-messages"),
    ],
)
def test_empty_recorded_text_is_missing(output: Any) -> None:
    chat = span("chat m", attrs={"gen_ai.operation.name": "chat", "gen_ai.output.messages": output})
    assert build_transcript(trace(chat)).answer is None


# --- tool calls ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("untrusted", "flags"),
    [
        pytest.param((), [False, False], id="none-untrusted"),
        pytest.param(["lookup_order"], [True, False], id="one-untrusted"),
        pytest.param(
            {"lookup_order", "issue_refund", "web_fetch"}, [True, True], id="all-untrusted"
        ),
    ],
)
def test_untrusted_tools_are_marked(untrusted: Any, flags: list[bool]) -> None:
    transcript = build_transcript(genai_trace("Refund A1", REFUND_CALLS), untrusted)
    assert [c.untrusted for c in transcript.tool_calls] == flags


def test_structured_arguments_become_compact_json() -> None:
    tool = span(
        "execute_tool t",
        attrs={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "t",
            "gen_ai.tool.call.arguments": {"city": "Zürich", "days": [1, 2]},
            "gen_ai.tool.call.result": ["a", {"b": 1}],
        },
    )
    (call,) = build_transcript(trace(tool)).tool_calls
    assert call.arguments == '{"city":"Zürich","days":[1,2]}'
    assert call.result == '["a",{"b":1}]'


def test_tool_calls_are_ordered_by_start_time() -> None:
    base = genai_trace("Refund A1", REFUND_CALLS)
    shuffled = trace(*reversed(base.spans))
    assert [c.name for c in build_transcript(shuffled).tool_calls] == [
        "lookup_order",
        "issue_refund",
    ]


def test_earlier_turns_in_the_history_are_not_this_traces_tool_calls() -> None:
    history = [
        {"role": "user", "parts": [{"type": "text", "content": "Where is order A0?"}]},
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "old", "name": "track", "arguments": {}}],
        },
        {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": "old", "response": "shipped"}],
        },
        {"role": "assistant", "parts": [{"type": "text", "content": "It shipped."}]},
        {"role": "user", "parts": [{"type": "text", "content": "Thanks, bye"}]},
    ]
    chat = span(
        "chat m",
        attrs={
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": history,
            "gen_ai.output.messages": [
                {"role": "assistant", "parts": [{"type": "text", "content": "Bye!"}]}
            ],
        },
    )
    transcript = build_transcript(trace(chat))
    assert transcript.user_input == "Thanks, bye"
    assert transcript.tool_calls == ()
    assert transcript.answer == "Bye!"


def test_calls_without_ids_pair_by_name_and_order() -> None:
    """Gemini without call ids: two calls to the same tool keep their own results."""

    def chat(n: int, start: int, inputs: list[Any], outputs: list[Any]) -> Any:
        return span(
            "generate_content gemini",
            span_id=span_id(n),
            start=start,
            attrs={
                "gen_ai.operation.name": "generate_content",
                "gen_ai.input.messages": inputs,
                "gen_ai.output.messages": outputs,
            },
        )

    user = {"role": "user", "parts": [{"text": "Convert 10 and 20 USD"}]}
    calls = {
        "role": "model",
        "parts": [
            {"function_call": {"name": "fx", "args": {"usd": 10}}},
            {"function_call": {"name": "fx", "args": {"usd": 20}}},
        ],
    }
    results = {
        "role": "user",
        "parts": [
            {"function_response": {"name": "fx", "response": {"eur": 9}}},
            {"function_response": {"name": "fx", "response": {"eur": 18}}},
        ],
    }
    answer = {"role": "model", "parts": [{"text": "9 and 18 EUR."}]}
    transcript = build_transcript(
        trace(chat(1, 0, [user], [calls]), chat(2, 5 * MS, [user, calls, results], [answer]))
    )
    assert [tool_view(c) for c in transcript.tool_calls] == [
        ("fx", None, {"usd": 10}, '{"eur":9}', None),
        ("fx", None, {"usd": 20}, '{"eur":18}', None),
    ]
    assert transcript.answer == "9 and 18 EUR."


# --- tokens ------------------------------------------------------------------------------------


def test_agent_span_usage_is_not_added_to_its_llm_calls() -> None:
    base = genai_trace(
        "Refund A1",
        REFUND_CALLS,
        root_attrs={"gen_ai.usage.input_tokens": 300, "gen_ai.usage.output_tokens": 60},
    )
    transcript = build_transcript(base)
    assert (transcript.input_tokens, transcript.output_tokens) == (300, 60)


def test_agent_span_usage_counts_when_no_llm_span_reports() -> None:
    root = span(
        "invoke_agent a",
        attrs={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.usage.input_tokens": 42,
            "gen_ai.usage.output_tokens": 7,
        },
    )
    assert (
        build_transcript(trace(root)).input_tokens,
        build_transcript(trace(root)).output_tokens,
    ) == (42, 7)


def test_framework_and_client_spans_for_one_call_count_once() -> None:
    """ADK's call_llm around the google-genai client span: both report the same usage."""
    base = adk_v1_trace()
    client = span(
        "generate_content gemini-2.5-flash",
        span_id=span_id(20),
        parent=span_id(3),
        start=3 * MS,
        kind=SpanKind.CLIENT,
        attrs={
            "gen_ai.operation.name": "generate_content",
            "gen_ai.request.model": "gemini-2.5-flash",
            "gen_ai.usage.input_tokens": 150,
            "gen_ai.usage.output_tokens": 12,
        },
    )
    transcript = build_transcript(with_spans(base, client))
    assert (transcript.input_tokens, transcript.output_tokens) == (350, 27)
    assert transcript.conventions == ("otel_genai", "adk_v1")


@pytest.mark.parametrize(
    ("attrs", "expected"),
    [
        pytest.param(
            {"gen_ai.usage.input_tokens": 5, "gen_ai.usage.output_tokens": 2}, (5, 2), id="genai"
        ),
        pytest.param(
            {"gen_ai.usage.prompt_tokens": 5, "gen_ai.usage.completion_tokens": 2},
            (5, 2),
            id="genai-legacy",
        ),
        pytest.param(
            {"llm.token_count.prompt": 5, "llm.token_count.completion": 2},
            (5, 2),
            id="openinference",
        ),
        pytest.param(
            {"llm.usage.prompt_tokens": 5, "llm.usage.completion_tokens": 2},
            (5, 2),
            id="openllmetry",
        ),
        pytest.param(
            {"gen_ai.usage.input_tokens": "5", "gen_ai.usage.output_tokens": 2.0},
            (5, 2),
            id="string-and-float",
        ),
        pytest.param({"gen_ai.usage.input_tokens": True}, (0, 0), id="bool-ignored"),
    ],
)
def test_token_attribute_names(attrs: dict[str, Any], expected: tuple[int, int]) -> None:
    first = span("chat a", span_id=span_id(1), attrs={"gen_ai.operation.name": "chat", **attrs})
    second = span(
        "chat b", span_id=span_id(2), start=2 * MS, attrs={"gen_ai.operation.name": "chat", **attrs}
    )
    transcript = build_transcript(trace(first, second))
    assert (transcript.input_tokens, transcript.output_tokens) == (expected[0] * 2, expected[1] * 2)


# --- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "attrs", "events", "message"),
    [
        pytest.param("upstream 503", {}, [], "upstream 503", id="status-message"),
        pytest.param(
            True,
            {},
            [
                event(
                    "exception",
                    {"exception.type": "TimeoutError", "exception.message": "after 30s"},
                )
            ],
            "TimeoutError: after 30s",
            id="exception-event",
        ),
        pytest.param(True, {"error.type": "rate_limited"}, [], "rate_limited", id="error-type"),
        pytest.param(True, {}, [], "error", id="nothing-said"),
    ],
)
def test_error_spans(status: Any, attrs: dict[str, Any], events: list[Any], message: str) -> None:
    root = span("invoke_agent a", span_id=span_id(1), end=10 * MS)
    failed = span(
        "execute_tool lookup_order",
        span_id=span_id(2),
        parent=root,
        start=1 * MS,
        attrs={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "lookup_order",
            **attrs,
        },
        status_error=status,
        events=events,
    )
    transcript = build_transcript(trace(root, failed))
    assert transcript.error_spans == (ErrorSpan(span_id(2), "execute_tool lookup_order", message),)
    assert transcript.tool_calls[0].error == message


def test_failing_tool_in_genai_trace() -> None:
    transcript = build_transcript(
        genai_trace(
            "Refund A1", REFUND_CALLS, failing_tools={"issue_refund": "payment gateway down"}
        )
    )
    assert [c.error for c in transcript.tool_calls] == [None, "payment gateway down"]
    assert [e.message for e in transcript.error_spans] == ["payment gateway down"]


# --- several conventions in one trace ----------------------------------------------------------------


def test_several_conventions_in_one_trace() -> None:
    """An OTel GenAI agent whose model client is OpenInference-instrumented and whose
    tool is a Traceloop-decorated function."""
    root = span(
        "invoke_agent mixed",
        span_id=span_id(1),
        end=50 * MS,
        resource={"service.name": "mixed-svc"},
        attrs={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "mixed"},
    )
    llm = span(
        "ChatCompletion",
        span_id=span_id(2),
        parent=root,
        start=1 * MS,
        attrs={
            "openinference.span.kind": "LLM",
            "llm.model_name": "gpt-4o-mini",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.contents.0.message_content.type": "text",
            "llm.input_messages.0.message.contents.0.message_content.text": "Fetch example.com",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.tool_calls.0.tool_call.id": "t1",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "web_fetch",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"url":"https://example.com"}',
            "llm.token_count.prompt": 30,
            "llm.token_count.completion": 4,
        },
    )
    tool = span(
        "web_fetch.tool",
        span_id=span_id(3),
        parent=root,
        start=5 * MS,
        attrs={
            "traceloop.span.kind": "tool",
            "traceloop.entity.name": "web_fetch",
            "traceloop.entity.input": json.dumps({"inputs": {"url": "https://example.com"}}),
            "traceloop.entity.output": json.dumps({"outputs": "Example Domain"}),
        },
    )
    final = span(
        "chat gpt-4o-mini",
        span_id=span_id(4),
        parent=root,
        start=10 * MS,
        attrs={
            "gen_ai.operation.name": "chat",
            "gen_ai.response.model": "gpt-4o-mini",
            "gen_ai.output.messages": json.dumps(
                [
                    {
                        "role": "assistant",
                        "parts": [{"type": "text", "content": "It says Example Domain."}],
                    }
                ]
            ),
            "gen_ai.usage.input_tokens": 40,
            "gen_ai.usage.output_tokens": 6,
        },
    )
    transcript = build_transcript(trace(root, llm, tool, final), untrusted_tools=["web_fetch"])
    assert transcript.conventions == ("otel_genai", "openinference", "openllmetry")
    assert transcript.agent_name == "mixed"
    assert transcript.user_input == "Fetch example.com"
    assert [(*tool_view(c), c.untrusted) for c in transcript.tool_calls] == [
        ("web_fetch", "t1", {"url": "https://example.com"}, "Example Domain", None, True)
    ]
    assert transcript.answer == "It says Example Domain."
    assert transcript.models == ("gpt-4o-mini",)
    assert (transcript.input_tokens, transcript.output_tokens) == (70, 10)


# --- root, identity, reference -----------------------------------------------------------------------


def test_root_is_the_agent_span_when_the_real_root_is_missing() -> None:
    """A truncated trace: the HTTP root never arrived; orphans remain."""
    base = genai_trace("Refund A1", REFUND_CALLS)
    root, *children = base.spans
    orphan_agent = span(
        "invoke_agent refund-agent",
        span_id=root.span_id,
        parent="ffffffffffffffff",
        start=root.start_time_unix_nano,
        end=root.end_time_unix_nano,
        attrs=root.attributes,
        resource=root.resource,
    )
    stray = span("GET /health", span_id=span_id(99), parent="eeeeeeeeeeeeeeee", start=0)
    transcript = build_transcript(trace(stray, orphan_agent, *children, truncated=True))
    assert transcript.root_span_id == root.span_id
    assert transcript.truncated is True
    assert transcript.user_input == "Refund A1"


def test_root_prefers_a_span_without_parent() -> None:
    http = span(
        "POST /chat",
        span_id=span_id(1),
        end=100 * MS,
        kind=SpanKind.SERVER,
        attrs={"http.route": "/chat"},
    )
    agent = span(
        "invoke_agent a",
        span_id=span_id(2),
        parent=http,
        start=1 * MS,
        end=90 * MS,
        attrs={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "a",
            "eval.reference": "42",
        },
    )
    transcript = build_transcript(trace(agent, http))
    assert transcript.root_span_id == span_id(1)
    assert transcript.latency_ms == 100.0
    assert transcript.agent_name == "a"
    # Root and agent span attributes are merged for routing.
    assert transcript.root_attributes["http.route"] == "/chat"
    assert transcript.root_attributes["gen_ai.agent.name"] == "a"
    assert transcript.reference == "42"


@pytest.mark.parametrize(
    ("root_attrs", "resource", "name", "version"),
    [
        pytest.param(
            {"gen_ai.agent.name": "n", "gen_ai.agent.version": "v"},
            {"service.name": "s", "service.version": "sv"},
            "n",
            "v",
            id="from-span",
        ),
        pytest.param(
            {}, {"service.name": "s", "service.version": "sv"}, "s", "sv", id="from-resource"
        ),
        pytest.param({}, {}, None, None, id="unknown"),
    ],
)
def test_agent_identity(
    root_attrs: dict[str, Any], resource: dict[str, Any], name: str | None, version: str | None
) -> None:
    root = span("work", attrs=root_attrs, resource=resource)
    transcript = build_transcript(trace(root))
    assert (transcript.agent_name, transcript.agent_version) == (name, version)
    assert transcript.resource == resource


@pytest.mark.parametrize(
    ("attrs", "reference"),
    [
        pytest.param({"eval.reference": "Refund is $40."}, "Refund is $40.", id="eval.reference"),
        pytest.param(
            {"gen_ai.evaluation.reference": {"amount": 40}}, '{"amount":40}', id="structured"
        ),
        pytest.param({}, None, id="absent"),
    ],
)
def test_reference(attrs: dict[str, Any], reference: str | None) -> None:
    assert build_transcript(genai_trace("q", root_attrs=attrs)).reference == reference


def test_empty_trace() -> None:
    empty = trace(truncated=True)
    assert build_transcript(empty) == Transcript(
        trace_id=TRACE_ID, root_span_id=None, truncated=True
    )


def test_structured_agent_output_falls_back_to_the_model_text() -> None:
    root = span(
        "agent",
        span_id=span_id(1),
        end=20 * MS,
        attrs={
            "openinference.span.kind": "AGENT",
            "input.value": json.dumps({"input": "hi", "chat_history": []}),
            "output.value": json.dumps({"output": {"text": "Hello!", "meta": 1}, "steps": []}),
        },
    )
    llm = span(
        "llm",
        span_id=span_id(2),
        parent=root,
        start=1 * MS,
        attrs={
            "openinference.span.kind": "LLM",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "hi",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "Hello!",
        },
    )
    transcript = build_transcript(trace(root, llm))
    assert (transcript.user_input, transcript.answer) == ("hi", "Hello!")


# --- when the trace ran ------------------------------------------------------------------

_ROOT = span_id(1)


@pytest.mark.parametrize(
    ("spans", "times"),
    [
        pytest.param(
            [
                span("root", span_id=_ROOT, start=10 * MS, end=50 * MS),
                span("child", span_id=span_id(2), parent=_ROOT, start=20 * MS, end=60 * MS),
            ],
            (10 * MS, 50 * MS),
            id="the-root-span-s-start-and-end",
        ),
        pytest.param(
            [
                span("step", span_id=span_id(2), parent="f" * 16, start=20 * MS, end=30 * MS),
                span("step", span_id=span_id(3), parent="f" * 16, start=15 * MS, end=40 * MS),
            ],
            (15 * MS, 40 * MS),
            id="no-root-earliest-start-latest-end",
        ),
        pytest.param(
            [
                span("root", span_id=_ROOT, start=10 * MS, end=0),
                span("child", span_id=span_id(2), parent=_ROOT, start=12 * MS, end=30 * MS),
            ],
            (10 * MS, 30 * MS),
            id="a-root-without-end-takes-the-latest-end",
        ),
        pytest.param([span("root", span_id=_ROOT, start=0, end=0)], (None, None), id="no-timing"),
        pytest.param([], (None, None), id="no-spans"),
    ],
)
def test_transcript_times(spans: list[Any], times: tuple[int | None, int | None]) -> None:
    t = build_transcript(trace(*spans))
    assert (t.start_unix_nano, t.end_unix_nano) == times
    # The stand-in for a trace whose transcript failed knows the same times.
    bare = bare_transcript(trace(*spans))
    assert (bare.start_unix_nano, bare.end_unix_nano) == times
