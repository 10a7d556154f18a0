"""OpenTelemetry GenAI semantic conventions (v1.37+, and the older event-based content)."""

from __future__ import annotations

from sidecar.evaluate.conventions.attributes import json_text, models_of, str_attr, text_of
from sidecar.evaluate.conventions.memo import MessageMemo
from sidecar.evaluate.conventions.messages import (
    Message,
    last_assistant_text,
    last_user_text,
    parse_message,
    parse_messages,
)
from sidecar.evaluate.conventions.reading import Convention, Reading, Role, RootSpans, new_reading
from sidecar.model import Attributes, Span, new_tool_call

OTEL_GENAI = "otel_genai"

_GENAI_LLM_OPS = frozenset({"chat", "generate_content", "text_completion"})
_GENAI_OPS = _GENAI_LLM_OPS | {
    "execute_tool",
    "invoke_agent",
    "create_agent",
    "invoke_workflow",
    "embeddings",
    "retrieval",
}
_EVENT_ROLES = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}


def genai_operation(span: Span) -> str | None:
    attrs = span.attributes
    op = str_attr(attrs, "gen_ai.operation.name")
    if op:
        return op
    first_word = span.name.split(" ", 1)[0]
    if first_word in _GENAI_OPS:
        return first_word
    if any(
        key in attrs
        for key in (
            "gen_ai.input.messages",
            "gen_ai.output.messages",
            "gen_ai.prompt",
            "gen_ai.completion",
        )
    ):
        return "chat"
    if "gen_ai.tool.name" in attrs or "gen_ai.tool.call.id" in attrs:
        return "execute_tool"
    if "gen_ai.agent.name" in attrs:
        return "invoke_agent"
    if str_attr(attrs, "gen_ai.system", "gen_ai.provider.name") and str_attr(
        attrs, "gen_ai.request.model", "gen_ai.response.model"
    ):
        return "chat"
    return None


def genai_inputs(span: Span, memo: MessageMemo | None = None) -> tuple[Message, ...] | None:
    attrs = span.attributes
    messages = parse_messages(attrs.get("gen_ai.input.messages"), "user", memo)
    if messages is None:
        messages = parse_messages(attrs.get("gen_ai.prompt"), "user", memo)
    if messages is None:
        from_events: list[Message] = []
        for event in span.events:
            role = _EVENT_ROLES.get(event.name)
            if role is not None:
                message = _event_message(event.attributes, role)
                if message is not None:
                    from_events.append(message)
            elif event.name == "gen_ai.content.prompt":
                from_events.extend(
                    parse_messages(event.attributes.get("gen_ai.prompt"), "user", memo) or ()
                )
        messages = tuple(from_events) or None
    return messages


def genai_outputs(span: Span, memo: MessageMemo | None = None) -> tuple[Message, ...] | None:
    attrs = span.attributes
    messages = parse_messages(attrs.get("gen_ai.output.messages"), "assistant", memo)
    if messages is None:
        messages = parse_messages(attrs.get("gen_ai.completion"), "assistant", memo)
    if messages is None:
        from_events: list[Message] = []
        for event in span.events:
            if event.name == "gen_ai.choice":
                message = _event_message(event.attributes, "assistant")
                if message is not None:
                    from_events.append(message)
            elif event.name == "gen_ai.content.completion":
                from_events.extend(
                    parse_messages(event.attributes.get("gen_ai.completion"), "assistant", memo)
                    or ()
                )
        messages = tuple(from_events) or None
    return messages


def _event_message(attrs: Attributes, role: str) -> Message | None:
    body = {key: value for key, value in attrs.items() if not key.startswith("gen_ai.")}
    if "message" in body:
        message = parse_message(body["message"], role)
    else:
        if role == "tool" and "id" in body:
            body.setdefault("tool_call_id", body["id"])
        message = parse_message(body, role)
    if message is None or not (message.text or message.tool_requests or message.tool_responses):
        return None
    return message


def read_otel_genai(span: Span, memo: MessageMemo | None = None) -> Reading | None:
    op = genai_operation(span)
    if op is None:
        return None
    attrs = span.attributes
    if op in _GENAI_LLM_OPS:
        return new_reading(
            OTEL_GENAI,
            Role.LLM,
            inputs=genai_inputs(span, memo),
            outputs=genai_outputs(span, memo),
            models=models_of(attrs, "gen_ai.response.model", "gen_ai.request.model"),
        )
    if op == "execute_tool":
        name = str_attr(attrs, "gen_ai.tool.name") or name_after(span.name, "execute_tool ")
        if name is None:
            return new_reading(OTEL_GENAI, Role.OTHER)
        tool = new_tool_call(
            name=name,
            call_id=text_of(attrs.get("gen_ai.tool.call.id")),
            arguments=json_text(attrs.get("gen_ai.tool.call.arguments")),
            result=text_of(attrs.get("gen_ai.tool.call.result")),
            span_id=span.span_id,
        )
        return new_reading(OTEL_GENAI, Role.TOOL, tool=tool)
    if op in ("invoke_agent", "create_agent", "invoke_workflow"):
        inputs = genai_inputs(span, memo)
        outputs = genai_outputs(span, memo)
        return new_reading(
            OTEL_GENAI,
            Role.AGENT,
            strong=op != "invoke_workflow",
            agent_name=str_attr(attrs, "gen_ai.agent.name")
            or name_after(span.name, "invoke_agent "),
            input_text=last_user_text(inputs or ()),
            output_text=last_assistant_text(outputs or ()),
            models=models_of(attrs, "gen_ai.response.model", "gen_ai.request.model"),
        )
    return new_reading(OTEL_GENAI, Role.OTHER)


def name_after(span_name: str, prefix: str) -> str | None:
    if span_name.startswith(prefix):
        return span_name[len(prefix) :].strip() or None
    return None


# The common vocabulary: ADK and OpenLLMetry spans carry gen_ai.* names too, so
# the specific conventions are tried first. ADK 2 writes this convention, with
# ``invoke_workflow`` as its root.
CONVENTION = Convention(
    name=OTEL_GENAI,
    read=read_otel_genai,
    precedence=90,
    root_spans=RootSpans(
        name_prefixes=("invoke_agent", "invoke_workflow"),
        attributes=(
            ("gen_ai.operation.name", "invoke_agent"),
            ("gen_ai.operation.name", "invoke_workflow"),
        ),
    ),
    claims=None,  # any span with a GenAI operation, told from its name or attributes
)
