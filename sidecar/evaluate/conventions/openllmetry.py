"""OpenLLMetry (Traceloop): ``traceloop.*`` and legacy ``gen_ai.prompt.N.*``."""

from __future__ import annotations

import operator

from sidecar.evaluate.conventions.attributes import (
    indexed,
    json_text,
    list_of,
    models_of,
    parse_json,
    str_attr,
    text_of,
)
from sidecar.evaluate.conventions.memo import MessageMemo
from sidecar.evaluate.conventions.messages import Message, parse_message, unwrap_io
from sidecar.evaluate.conventions.otel_genai import genai_inputs, genai_outputs
from sidecar.evaluate.conventions.reading import (
    Convention,
    Reading,
    Role,
    RootSpans,
    new_reading,
)
from sidecar.model import Attributes, AttrValue, Span, new_tool_call

OPENLLMETRY = "openllmetry"

# Flattened legacy message keys, ``gen_ai.prompt.0.content`` (tested key by key in C).
_LEGACY_PREFIXES = ("gen_ai.prompt.", "gen_ai.completion.")
_LEGACY_KEY = operator.methodcaller("startswith", _LEGACY_PREFIXES)


def read_openllmetry(span: Span, memo: MessageMemo | None = None) -> Reading | None:
    attrs = span.attributes
    kind = str_attr(attrs, "traceloop.span.kind")
    legacy = any(map(_LEGACY_KEY, attrs))
    if kind is None and not legacy and "llm.request.type" not in attrs:
        return None
    if legacy or "llm.request.type" in attrs:
        inputs = _legacy_messages(attrs, "gen_ai.prompt", "user")
        outputs = _legacy_messages(attrs, "gen_ai.completion", "assistant")
        return new_reading(
            OPENLLMETRY,
            Role.LLM,
            inputs=inputs if inputs is not None else genai_inputs(span, memo),
            outputs=outputs if outputs is not None else genai_outputs(span, memo),
            models=models_of(attrs, "gen_ai.response.model", "gen_ai.request.model"),
        )
    entity = str_attr(attrs, "traceloop.entity.name")
    if kind == "tool":
        tool = new_tool_call(
            name=entity or span.name.removesuffix(".tool"),
            call_id=text_of(attrs.get("gen_ai.tool.call.id")),
            arguments=_entity_arguments(attrs.get("traceloop.entity.input")),
            result=unwrap_io(attrs.get("traceloop.entity.output"), output=True),
            span_id=span.span_id,
        )
        return new_reading(OPENLLMETRY, Role.TOOL, tool=tool)
    if kind in ("agent", "workflow"):
        return new_reading(
            OPENLLMETRY,
            Role.AGENT,
            strong=kind == "agent",
            agent_name=entity if kind == "agent" else None,
            input_text=unwrap_io(attrs.get("traceloop.entity.input"), output=False),
            output_text=unwrap_io(attrs.get("traceloop.entity.output"), output=True),
        )
    return new_reading(OPENLLMETRY, Role.OTHER)


def _entity_arguments(value: AttrValue) -> str | None:
    data = parse_json(value)
    if isinstance(data, dict) and "inputs" in data:
        return json_text(parse_json(data["inputs"]))
    if (
        isinstance(data, dict)
        and set(data) <= {"args", "kwargs"}
        and not list_of(data.get("args"))
        and isinstance(data.get("kwargs"), dict)
    ):
        # Decorated Python tools record {"args": [...], "kwargs": {...}}; keyword
        # calls are what a model makes, so show them as the arguments object.
        return json_text(data["kwargs"])
    return json_text(value)


def _legacy_messages(
    attrs: Attributes, prefix: str, default_role: str
) -> tuple[Message, ...] | None:
    groups = indexed(attrs, prefix)
    if not groups:
        return None
    messages = []
    for group in groups:
        tool_calls: list[object] = [
            {"id": call.get("id"), "name": call.get("name"), "arguments": call.get("arguments")}
            for call in indexed(group, "tool_calls")
        ]
        if "function_call.name" in group:
            tool_calls.append(
                {
                    "name": group.get("function_call.name"),
                    "arguments": group.get("function_call.arguments"),
                }
            )
        message = parse_message(
            {
                "role": group.get("role"),
                "content": group.get("content"),
                "tool_calls": tool_calls,
                "tool_call_id": group.get("tool_call_id"),
            },
            default_role,
        )
        if message is not None:
            messages.append(message)
    return tuple(messages)


# Agent spans are told by traceloop.span.kind, not by name. None is declared a root:
# under a remote parent, a trace of this convention alone waits for max_trace_age.
CONVENTION = Convention(
    name=OPENLLMETRY,
    read=read_openllmetry,
    precedence=30,
    root_spans=RootSpans(),
)
