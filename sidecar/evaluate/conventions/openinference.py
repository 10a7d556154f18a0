"""OpenInference (Arize): ``openinference.span.kind`` and flattened ``llm.*_messages``."""

from __future__ import annotations

from sidecar.evaluate.conventions.attributes import (
    indexed,
    json_text,
    models_of,
    parse_json,
    str_attr,
    text_of,
)
from sidecar.evaluate.conventions.memo import MessageMemo
from sidecar.evaluate.conventions.messages import Message, parse_message, parse_messages, unwrap_io
from sidecar.evaluate.conventions.reading import (
    Convention,
    Reading,
    Role,
    RootSpans,
    new_reading,
)
from sidecar.model import Attributes, AttrValue, Span, new_tool_call

OPENINFERENCE = "openinference"

# What OPENINFERENCE_HIDE_* settings write instead of the content: not captured, not text.
REDACTED = "__REDACTED__"


def read_openinference(span: Span, memo: MessageMemo | None = None) -> Reading | None:
    attrs = _unredacted(span.attributes)
    kind = str_attr(attrs, "openinference.span.kind")
    if kind is None:
        return None
    kind = kind.upper()
    if kind == "LLM":
        inputs = _oi_messages(attrs, "llm.input_messages", "user")
        outputs = _oi_messages(attrs, "llm.output_messages", "assistant")
        if inputs is None:
            inputs = _oi_value_messages(attrs.get("input.value"), "user", memo)
        if outputs is None:
            outputs = _oi_value_messages(attrs.get("output.value"), "assistant", memo)
        return new_reading(
            OPENINFERENCE,
            Role.LLM,
            inputs=inputs,
            outputs=outputs,
            models=models_of(attrs, "llm.model_name"),
        )
    if kind == "TOOL":
        name = str_attr(attrs, "tool.name", "tool_call.function.name") or span.name
        arguments = attrs.get("tool_call.function.arguments", attrs.get("input.value"))
        tool = new_tool_call(
            name=name,
            call_id=text_of(attrs.get("tool_call.id")),
            arguments=json_text(arguments),
            result=text_of(attrs.get("output.value")),
            span_id=span.span_id,
        )
        return new_reading(OPENINFERENCE, Role.TOOL, tool=tool)
    if kind in ("AGENT", "CHAIN"):
        return new_reading(
            OPENINFERENCE,
            Role.AGENT,
            strong=kind == "AGENT",
            agent_name=str_attr(attrs, "agent.name", "gen_ai.agent.name"),
            input_text=unwrap_io(attrs.get("input.value"), output=False),
            output_text=unwrap_io(attrs.get("output.value"), output=True),
        )
    return new_reading(OPENINFERENCE, Role.OTHER)


def _unredacted(attrs: Attributes) -> Attributes:
    if REDACTED not in attrs.values():
        return attrs
    return {key: value for key, value in attrs.items() if value != REDACTED}


def _oi_messages(attrs: Attributes, prefix: str, default_role: str) -> tuple[Message, ...] | None:
    groups = indexed(attrs, prefix)
    if not groups:
        return None
    messages = []
    for group in groups:
        contents = [
            {"type": "text", "content": part.get("message_content.text")}
            for part in indexed(group, "message.contents")
            if part.get("message_content.type", "text") == "text"
        ]
        tool_calls = [
            {
                "id": call.get("tool_call.id"),
                "function": {
                    "name": call.get("tool_call.function.name"),
                    "arguments": call.get("tool_call.function.arguments"),
                },
            }
            for call in indexed(group, "message.tool_calls")
        ]
        content = group.get("message.content")
        message = parse_message(
            {
                "role": group.get("message.role"),
                "content": content if content is not None else contents or None,
                "tool_calls": tool_calls,
                "tool_call_id": group.get("message.tool_call_id"),
                "name": group.get("message.name"),
            },
            default_role,
        )
        if message is not None:
            messages.append(message)
    return tuple(messages)


def _oi_value_messages(
    value: AttrValue, default_role: str, memo: MessageMemo | None
) -> tuple[Message, ...] | None:
    data = parse_json(value)
    # Raw request/response bodies: {"messages": [...]}, {"choices": [...]}, {"text": ...}.
    if isinstance(data, dict) and isinstance(data.get("choices"), list):
        data = [c.get("message", c) for c in data["choices"] if isinstance(c, dict)]
    return parse_messages(data, default_role, memo)


# Agent spans are told by openinference.span.kind, not by name. None is declared a root:
# under a remote parent, a trace of this convention alone waits for max_trace_age.
CONVENTION = Convention(
    name=OPENINFERENCE,
    read=read_openinference,
    precedence=20,
    root_spans=RootSpans(),
)
