"""OpenTelemetry GenAI semantic conventions (v1.37+, and the older event-based content)."""

from __future__ import annotations

from sidecar.evaluate.conventions.attributes import compact_json, models_of, str_attr, text_of
from sidecar.evaluate.conventions.content import span_messages, tool_content
from sidecar.evaluate.conventions.memo import MessageMemo
from sidecar.evaluate.conventions.messages import Message, last_assistant_text, last_user_text
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
    """The span's input messages from any carrier (``content.span_messages``)."""
    return span_messages(span, memo).inputs


def genai_outputs(span: Span, memo: MessageMemo | None = None) -> tuple[Message, ...] | None:
    """The span's output messages from any carrier (``content.span_messages``)."""
    return span_messages(span, memo).outputs


def read_otel_genai(span: Span, memo: MessageMemo | None = None) -> Reading | None:
    op = genai_operation(span)
    if op is None:
        return None
    attrs = span.attributes
    if op in _GENAI_LLM_OPS:
        messages = span_messages(span, memo)
        return new_reading(
            OTEL_GENAI,
            Role.LLM,
            inputs=messages.inputs,
            outputs=messages.outputs,
            models=models_of(attrs, "gen_ai.response.model", "gen_ai.request.model"),
            unreadable=messages.unreadable,
        )
    if op == "execute_tool":
        name = str_attr(attrs, "gen_ai.tool.name") or name_after(span.name, "execute_tool ")
        if name is None:
            return new_reading(OTEL_GENAI, Role.OTHER)
        call_id = text_of(attrs.get("gen_ai.tool.call.id"))
        arguments, result, unreadable = tool_content(span, call_id, memo)
        tool = new_tool_call(
            name=name, call_id=call_id, arguments=arguments, result=result, span_id=span.span_id
        )
        return new_reading(OTEL_GENAI, Role.TOOL, tool=tool, unreadable=unreadable)
    if op in ("invoke_agent", "invoke_workflow"):
        messages = span_messages(span, memo)
        inputs, outputs = messages.inputs, messages.outputs
        return new_reading(
            OTEL_GENAI,
            Role.AGENT,
            strong=op != "invoke_workflow",
            agent_name=str_attr(attrs, "gen_ai.agent.name")
            or name_after(span.name, "invoke_agent "),
            input_text=last_user_text(inputs or ()),
            output_text=last_assistant_text(outputs or ()) or _final_result(attrs),
            models=models_of(attrs, "gen_ai.response.model", "gen_ai.request.model"),
            unreadable=messages.unreadable,
        )
    # create_agent defines an agent (LangGraph under OpenLLMetry records building the
    # graph as a trace of its own); it runs nothing, so it is no agent span.
    return new_reading(OTEL_GENAI, Role.OTHER)


def _final_result(attrs: Attributes) -> str | None:
    """pydantic-ai's ``final_result`` on its agent run span: the run's output, as text.

    A text output is the answer as the model wrote it; a structured one (the
    model called an output tool, ``final_result`` by default) is its JSON,
    which no chat span carries as text.
    """
    value = attrs.get("final_result")
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        return value if value.strip() else None
    return compact_json(value)


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
)
