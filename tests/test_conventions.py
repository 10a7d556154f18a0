from __future__ import annotations

import dataclasses
import graphlib
import importlib
import json
import pkgutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import sidecar
import sidecar.evaluate.conventions
from sidecar.evaluate.conventions import (
    ADK_V1,
    ALL_CONVENTIONS,
    CONVENTIONS,
    OPENINFERENCE,
    OPENLLMETRY,
    OTEL_GENAI,
    READERS,
    ROOT_SPANS,
    Convention,
    Message,
    Role,
    ToolRequest,
    ToolResponse,
    parse_message,
    parse_messages,
    read_span,
    unwrap_io,
)
from tests.builders import span
from tests.imports import imports_of, module_name

ADK = "gcp.vertex.agent"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(
            {"role": "user", "parts": [{"type": "text", "content": "hi"}]},
            Message("user", "hi"),
            id="genai-text",
        ),
        pytest.param(
            {
                "role": "assistant",
                "parts": [
                    {"type": "text", "content": "Checking."},
                    {"type": "tool_call", "id": "1", "name": "f", "arguments": {"x": 1}},
                ],
            },
            Message("assistant", "Checking.", (ToolRequest("f", "1", '{"x":1}'),)),
            id="genai-tool-call",
        ),
        pytest.param(
            {"role": "tool", "parts": [{"type": "tool_call_response", "id": "1", "result": "ok"}]},
            Message("tool", None, (), (ToolResponse("1", None, "ok"),)),
            id="genai-tool-response",
        ),
        pytest.param(
            {
                "role": "model",
                "parts": [
                    {"text": "thinking...", "thought": True},
                    {"text": "Done"},
                    {"function_call": {"id": "a", "name": "g", "args": {}}},
                ],
            },
            Message("assistant", "Done", (ToolRequest("g", "a", "{}"),)),
            id="gemini-model-turn",
        ),
        pytest.param(
            {"role": "user", "parts": [{"functionResponse": {"name": "g", "response": {"v": 2}}}]},
            Message("user", None, (), (ToolResponse(None, "g", '{"v":2}'),)),
            id="gemini-camel-case-response",
        ),
        pytest.param(
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
            Message("user", "a\nb"),
            id="openai-content-parts",
        ),
        pytest.param(
            {"role": "user", "content": '{"order": "A1"}'},
            Message("user", '{"order": "A1"}'),
            id="json-typed-by-user-stays-text",
        ),
        pytest.param(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "h", "arguments": "{}"}}
                ],
            },
            Message("assistant", None, (ToolRequest("h", "c", "{}"),)),
            id="openai-tool-calls",
        ),
        pytest.param(
            {"role": "tool", "tool_call_id": "c", "content": "42"},
            Message("tool", None, (), (ToolResponse("c", None, "42"),)),
            id="openai-tool-message",
        ),
        pytest.param(
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm"},
                    {"type": "tool_use", "id": "tu", "name": "k", "input": {"q": 1}},
                ],
            },
            Message("assistant", None, (ToolRequest("k", "tu", '{"q":1}'),)),
            id="anthropic-tool-use",
        ),
        pytest.param(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "tu", "content": "r"}],
            },
            Message("user", None, (), (ToolResponse("tu", None, "r"),)),
            id="anthropic-tool-result",
        ),
        pytest.param(
            {"text": "The end.", "finish_reason": "stop"},
            Message("assistant", "The end."),
            id="completion-text",
        ),
        pytest.param(
            {"index": 0, "message": {"role": "assistant", "content": "Hi"}},
            Message("assistant", "Hi"),
            id="choice-wrapper",
        ),
        pytest.param("plain", Message("assistant", "plain"), id="bare-string"),
        pytest.param("", None, id="empty-string"),
    ],
)
def test_parse_message(raw: Any, expected: Message | None) -> None:
    assert parse_message(raw, "assistant") == expected


def test_parse_messages_accepts_json_text_and_structured_lists_alike() -> None:
    messages = [
        {"role": "user", "parts": [{"type": "text", "content": "q"}]},
        {"role": "assistant", "parts": [{"type": "text", "content": "a"}]},
    ]
    assert parse_messages(json.dumps(messages), "user") == parse_messages(messages, "user")
    assert parse_messages(None, "user") is None
    assert parse_messages({"messages": messages}, "user") == parse_messages(messages, "user")


@pytest.mark.parametrize(
    ("value", "output", "expected"),
    [
        pytest.param(json.dumps({"args": ["hi"], "kwargs": {}}), False, "hi", id="traceloop-args"),
        pytest.param(
            json.dumps({"args": [], "kwargs": {"q": "hi"}}), False, "hi", id="traceloop-kwarg"
        ),
        pytest.param(
            json.dumps({"inputs": {"question": "q?"}}), False, "q?", id="langchain-inputs"
        ),
        pytest.param(json.dumps({"outputs": {"output": "a."}}), True, "a.", id="langchain-outputs"),
        pytest.param(json.dumps("quoted"), True, "quoted", id="json-string"),
        pytest.param('{"a": 1, "b": 2}', True, '{"a": 1, "b": 2}', id="structured-as-recorded"),
        pytest.param({"a": 1, "b": 2}, True, '{"a":1,"b":2}', id="kvlist-as-json"),
        pytest.param(
            json.dumps([{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]),
            False,
            "x",
            id="messages-input",
        ),
        pytest.param(
            json.dumps(
                {"messages": [{"role": "user", "content": "x"}, {"role": "ai", "content": "y"}]}
            ),
            True,
            "y",
            id="messages-output",
        ),
        pytest.param("plain text", False, "plain text", id="plain"),
        pytest.param("", False, None, id="empty"),
        pytest.param(None, False, None, id="absent"),
    ],
)
def test_unwrap_io(value: Any, output: bool, expected: str | None) -> None:
    assert unwrap_io(value, output=output) == expected


READ_SPAN_CASES = [
    pytest.param({"name": "call_llm", "scope": ADK}, ADK_V1, Role.LLM, id="adk-call_llm"),
    pytest.param({"name": "invocation", "scope": ADK}, ADK_V1, Role.AGENT, id="adk-invocation"),
    pytest.param({"name": "agent_run [a]", "scope": ADK}, ADK_V1, Role.AGENT, id="adk-agent_run"),
    pytest.param(
        {
            "name": "execute_tool f",
            "attrs": {"gen_ai.tool.name": "f", "gcp.vertex.agent.tool_call_args": "{}"},
        },
        ADK_V1,
        Role.TOOL,
        id="adk-tool-outside-scope",
    ),
    pytest.param(
        {
            "name": "invoke_agent a",
            "scope": ADK,
            "attrs": {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"},
        },
        OTEL_GENAI,
        Role.AGENT,
        id="adk-1.15-genai-names",
    ),
    pytest.param({"name": "send_data", "scope": ADK}, ADK_V1, Role.OTHER, id="adk-send_data"),
    pytest.param(
        {"name": "x", "attrs": {"openinference.span.kind": "TOOL", "tool.name": "t"}},
        OPENINFERENCE,
        Role.TOOL,
        id="openinference-tool",
    ),
    pytest.param(
        {"name": "x", "attrs": {"openinference.span.kind": "RETRIEVER"}},
        OPENINFERENCE,
        Role.OTHER,
        id="openinference-retriever",
    ),
    pytest.param(
        {"name": "t.task", "attrs": {"traceloop.span.kind": "task"}},
        OPENLLMETRY,
        Role.OTHER,
        id="openllmetry-task",
    ),
    pytest.param(
        {"name": "anthropic.chat", "attrs": {"gen_ai.prompt.0.content": "hi"}},
        OPENLLMETRY,
        Role.LLM,
        id="openllmetry-legacy-prompt",
    ),
    pytest.param({"name": "chat gpt-4o"}, OTEL_GENAI, Role.LLM, id="genai-by-span-name"),
    pytest.param({"name": "execute_tool f"}, OTEL_GENAI, Role.TOOL, id="genai-tool-by-name"),
    pytest.param(
        {"name": "x", "attrs": {"gen_ai.operation.name": "embeddings"}},
        OTEL_GENAI,
        Role.OTHER,
        id="genai-embeddings",
    ),
    pytest.param(
        {"name": "x", "attrs": {"gen_ai.system": "openai", "gen_ai.request.model": "m"}},
        OTEL_GENAI,
        Role.LLM,
        id="genai-old-client-span",
    ),
]


@pytest.mark.parametrize(("kwargs", "convention", "role"), READ_SPAN_CASES)
def test_read_span_convention_and_role(kwargs: dict[str, Any], convention: str, role: Role) -> None:
    reading = read_span(span(**kwargs))
    assert reading is not None
    assert (reading.convention, reading.role) == (convention, role)


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"name": "GET /orders", "attrs": {"http.route": "/orders"}}, id="http"),
        pytest.param({"name": "SELECT orders", "attrs": {"db.system": "postgresql"}}, id="db"),
        pytest.param({"name": "invocation"}, id="invocation-outside-adk-scope"),
    ],
)
def test_read_span_ignores_unrelated_spans(kwargs: dict[str, Any]) -> None:
    assert read_span(span(**kwargs)) is None


def test_tool_parameters_schema_is_not_taken_for_arguments() -> None:
    reading = read_span(
        span(
            "t",
            attrs={
                "openinference.span.kind": "TOOL",
                "tool.name": "t",
                "tool.parameters": '{"type": "object"}',
            },
        )
    )
    assert reading is not None
    assert reading.tool is not None
    assert reading.tool.arguments is None


# --- the registry: a convention left out anywhere fails here ----------------------------------

# The modules every reader shares; every other module of the package is one convention.
SHARED_MODULES = {"attributes", "content", "memo", "messages", "reading"}


def _convention_modules() -> dict[str, ModuleType]:
    return {
        info.name: importlib.import_module(f"sidecar.evaluate.conventions.{info.name}")
        for info in pkgutil.iter_modules(sidecar.evaluate.conventions.__path__)
        if info.name not in SHARED_MODULES
    }


def test_every_convention_module_declares_a_registered_convention() -> None:
    modules = _convention_modules()
    assert len(modules) == len(CONVENTIONS)
    for name, module in modules.items():
        declared = getattr(module, "CONVENTION", None)
        assert isinstance(declared, Convention), (
            f"sidecar/evaluate/conventions/{name}.py: no CONVENTION"
        )
        assert any(declared is c for c in CONVENTIONS), f"{declared.name} is not in CONVENTIONS"


def test_registry_names_and_precedences_are_unique() -> None:
    assert len({c.name for c in CONVENTIONS}) == len(CONVENTIONS)
    assert len({c.precedence for c in CONVENTIONS}) == len(CONVENTIONS)


def test_readers_run_in_precedence_order_and_conventions_list_in_registry_order() -> None:
    by_precedence = sorted(CONVENTIONS, key=lambda c: c.precedence)
    assert tuple(c.read for c in by_precedence) == READERS
    assert tuple(c.name for c in CONVENTIONS) == ALL_CONVENTIONS


def test_the_declaration_leaves_nothing_to_a_default() -> None:
    # A default would let a new convention skip its precedence or its root spans.
    assert all(
        f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        for f in dataclasses.fields(Convention)
    )


def test_every_registered_convention_has_read_span_cases() -> None:
    assert {case.values[1] for case in READ_SPAN_CASES} == set(ALL_CONVENTIONS)


ROOT_SPAN_CASES = [
    pytest.param({"name": "invoke_agent refund-agent"}, OTEL_GENAI, id="genai-invoke_agent"),
    pytest.param({"name": "invoke_workflow checkout"}, OTEL_GENAI, id="adk2-invoke_workflow"),
    pytest.param(
        {"name": "agent", "attrs": {"gen_ai.operation.name": "invoke_agent"}},
        OTEL_GENAI,
        id="genai-invoke_agent-operation",
    ),
    pytest.param(
        {"name": "flow", "attrs": {"gen_ai.operation.name": "invoke_workflow"}},
        OTEL_GENAI,
        id="genai-invoke_workflow-operation",
    ),
    pytest.param({"name": "invocation", "scope": ADK}, ADK_V1, id="adk1-invocation"),
]


@pytest.mark.parametrize(("kwargs", "convention"), ROOT_SPAN_CASES)
def test_a_root_span_is_an_agent_span_of_its_convention(
    kwargs: dict[str, Any], convention: str
) -> None:
    root = span(**kwargs)
    reading = read_span(root)
    assert ROOT_SPANS.matches(root)
    assert reading is not None
    assert (reading.convention, reading.role) == (convention, Role.AGENT)


def test_every_declared_root_span_has_a_case() -> None:
    spans = [(span(**case.values[0]), case.values[1]) for case in ROOT_SPAN_CASES]
    for declared in CONVENTIONS:
        own = [s for s, convention in spans if convention == declared.name]
        for prefix in declared.root_spans.name_prefixes:
            assert any(s.name.startswith(prefix) for s in own), (declared.name, prefix)
        for key, value in declared.root_spans.attributes:
            assert any(s.attributes.get(key) == value for s in own), (declared.name, key, value)


def test_root_spans_are_the_union_of_the_declarations() -> None:
    for declared in CONVENTIONS:
        assert set(declared.root_spans.name_prefixes) <= set(ROOT_SPANS.name_prefixes)
        assert set(declared.root_spans.attributes) <= set(ROOT_SPANS.attributes)
    assert ROOT_SPANS.name_prefixes, "no convention declares a root span"


def test_no_import_cycles_among_the_readers_checks_and_rubric() -> None:
    """Imports anywhere in a module count, ``TYPE_CHECKING`` blocks included."""
    package = Path(sidecar.__file__).resolve().parent
    modules = {module_name(p): p for p in package.rglob("*.py")}
    owned = (
        "sidecar.evaluate.conventions",
        "sidecar.evaluate.checks",
        "sidecar.evaluate.rubric",
        "sidecar.ingest.assemble",
    )
    graph = {
        name: {m for m in imports_of(path) if m in modules and m != name}
        for name, path in modules.items()
        if name.startswith(owned) or name == "sidecar.evaluate.transcript"
    }
    graphlib.TopologicalSorter(graph).prepare()  # raises CycleError naming the circle
