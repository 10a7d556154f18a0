"""Google ADK 1.x: ``invocation``, ``agent_run [name]``, ``call_llm``, ``execute_tool``."""

from __future__ import annotations

import re

from sidecar.evaluate.conventions.attributes import (
    json_text,
    models_of,
    parse_json,
    str_attr,
    text_of,
)
from sidecar.evaluate.conventions.memo import MessageMemo
from sidecar.evaluate.conventions.messages import parse_messages
from sidecar.evaluate.conventions.otel_genai import (
    genai_inputs,
    genai_operation,
    genai_outputs,
    name_after,
)
from sidecar.evaluate.conventions.reading import (
    Convention,
    Reading,
    Role,
    RootSpans,
    new_reading,
)
from sidecar.model import AttrValue, Span, new_tool_call

ADK_V1 = "adk_v1"

_ADK_SCOPE = "gcp.vertex.agent"
_ADK_KEYS = (
    "gcp.vertex.agent.llm_request",
    "gcp.vertex.agent.llm_response",
    "gcp.vertex.agent.tool_call_args",
    "gcp.vertex.agent.tool_response",
    "gcp.vertex.agent.event_id",
    "gcp.vertex.agent.invocation_id",
)
_ADK_AGENT_RUN = re.compile(r"^agent_run \[(?P<name>.+)\]$")
# ADK writes these where it had nothing to record.
_ADK_PLACEHOLDERS = frozenset({"<not specified>", "<not serializable>", "N/A"})


def read_adk_v1(span: Span, memo: MessageMemo | None = None) -> Reading | None:
    attrs = span.attributes
    ours = span.scope_name == _ADK_SCOPE or not attrs.keys().isdisjoint(_ADK_KEYS)
    if not ours:
        return None
    if span.name == "invocation":
        return new_reading(ADK_V1, Role.AGENT, strong=False)
    if match := _ADK_AGENT_RUN.match(span.name):
        return new_reading(ADK_V1, Role.AGENT, agent_name=match["name"])
    if span.name == "call_llm" or _adk_payload(attrs.get("gcp.vertex.agent.llm_request")):
        request = _adk_payload(attrs.get("gcp.vertex.agent.llm_request"))
        response = _adk_payload(attrs.get("gcp.vertex.agent.llm_response"))
        inputs = None
        if request is not None and isinstance(request.get("contents"), list):
            inputs = parse_messages(request["contents"], "user")
        outputs = None
        if response is not None and response.get("content") is not None:
            outputs = parse_messages([response["content"]], "assistant")
        return new_reading(
            ADK_V1,
            Role.LLM,
            inputs=inputs if inputs is not None else genai_inputs(span, memo),
            outputs=outputs if outputs is not None else genai_outputs(span, memo),
            models=models_of(attrs, "gen_ai.response.model", "gen_ai.request.model"),
        )
    if span.name.startswith("execute_tool") and any(key in attrs for key in _ADK_KEYS):
        name = str_attr(attrs, "gen_ai.tool.name") or name_after(span.name, "execute_tool ")
        if name is None or name == "(merged tools)" or span.name == "execute_tool (merged)":
            # ADK also records each merged call in a span of its own.
            return new_reading(ADK_V1, Role.OTHER)
        args = _adk_value(attrs.get("gcp.vertex.agent.tool_call_args"))
        result = _adk_value(attrs.get("gcp.vertex.agent.tool_response"))
        if parse_json(result) == {"result": "<not specified>"}:
            result = None
        if args == "{}" and result == "{}":
            # ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS=false writes "{}" for both: nothing was
            # captured (a tool without arguments returns something when it is).
            args = result = None
        tool = new_tool_call(
            name=name,
            call_id=_adk_value(attrs.get("gen_ai.tool.call.id")),
            arguments=args or json_text(attrs.get("gen_ai.tool.call.arguments")),
            result=result or text_of(attrs.get("gen_ai.tool.call.result")),
            span_id=span.span_id,
        )
        return new_reading(ADK_V1, Role.TOOL, tool=tool)
    # Spans in ADK's scope under GenAI names (ADK 1.15+, ADK 2) read better as GenAI.
    return None if genai_operation(span) else new_reading(ADK_V1, Role.OTHER)


def _adk_value(value: AttrValue) -> str | None:
    # Newer ADK sets an empty mapping when content capture is off.
    if value is None or value == {}:
        return None
    text = json_text(value)
    return None if text in _ADK_PLACEHOLDERS else text


def _adk_payload(value: AttrValue) -> dict[str, object] | None:
    data = parse_json(value)
    # ADK puts "{}" on spans where the request/response does not apply.
    return data if isinstance(data, dict) and data else None


CONVENTION = Convention(
    name=ADK_V1,
    read=read_adk_v1,
    precedence=10,
    root_spans=RootSpans(name_prefixes=("invocation",)),
)
