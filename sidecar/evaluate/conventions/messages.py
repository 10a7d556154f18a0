"""Message parsing: the GenAI message and part shapes, normalised into ``Message``.

Conventions record conversations in several shapes: GenAI ``{role, parts:
[{type, ...}]}``, Gemini ``{role, parts: [{text}|{function_call}|
{function_response}]}``, OpenAI-style ``{role, content, tool_calls,
tool_call_id}``, completions ``{text}`` and event ``{message: {...}}``
wrappers, as JSON text or as OTLP kvlists and arrays. Content may also be a
list of blocks, and a message body may be that list alone. One part reader
(``_parse_part``) knows the block vocabularies:

==================  ===============================  ==========================================
vocabulary          text                             tool call / tool result
==================  ===============================  ==========================================
OpenAI parts        ``{type: text, text}``           ``tool_calls`` beside ``content``
GenAI parts         ``{type: text, content}``        ``{type: tool_call}`` / ``tool_call_response``
Anthropic           ``{type: text, text}``           ``{type: tool_use, id, name, input}`` /
                                                     ``{type: tool_result, tool_use_id, content}``
Bedrock Converse    ``{text}`` (``{json}``)          ``{toolUse: {toolUseId, name, input}}`` /
                                                     ``{toolResult: {toolUseId, content, status}}``
Gemini              ``{text}``                       ``{functionCall}`` / ``{functionResponse}``
==================  ===============================  ==========================================

They all become ``Message`` records with the tool calls the model requested
and the results it was handed. Content that was not captured is ``None``;
reasoning blocks are left out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from sidecar.evaluate.conventions.attributes import json_text, list_of, parse_json, text_of
from sidecar.fastrecord import record_builder
from sidecar.model import AttrValue

_STRUCTURED = (dict, list)


@dataclass(frozen=True, slots=True)
class ToolRequest:
    """A tool call as the model asked for it, inside a message."""

    name: str
    call_id: str | None = None
    arguments: str | None = None


@dataclass(frozen=True, slots=True)
class ToolResponse:
    """A tool result as it was handed back to the model, inside a message."""

    call_id: str | None = None
    name: str | None = None
    result: str | None = None


@dataclass(frozen=True, slots=True)
class Message:
    role: str
    text: str | None = None
    tool_requests: tuple[ToolRequest, ...] = ()
    tool_responses: tuple[ToolResponse, ...] = ()


# Parsing a trace's messages builds many of these (sidecar.fastrecord).
new_message = record_builder(Message, defaults=True)
new_tool_request = record_builder(ToolRequest)
new_tool_response = record_builder(ToolResponse)


class MessageCache(Protocol):
    """Messages already parsed in one trace (``sidecar.evaluate.conventions.memo.MessageMemo``)."""

    def messages(self, value: str, default_role: str) -> tuple[Message, ...] | None:
        """What ``parse_messages(value, default_role)`` returns, or ``None`` to parse it here."""
        ...


_ROLE_ALIASES = {"model": "assistant", "ai": "assistant", "human": "user", "function": "tool"}
_SKIPPED_PART_TYPES = frozenset({"reasoning", "thinking", "redacted_thinking"})


def _role(value: object, default: str) -> str:
    if isinstance(value, str) and value:
        return _ROLE_ALIASES.get(value.lower(), value.lower())
    return default


def parse_messages(
    value: AttrValue | object, default_role: str, memo: MessageCache | None = None
) -> tuple[Message, ...] | None:
    """Messages from a JSON string or an already-structured list (OTLP array/kvlist).

    A ``memo`` (one per trace) saves parsing the same message text twice; the
    result is the same with or without it.
    """
    if value is None:
        return None
    if memo is not None and isinstance(value, str):
        remembered = memo.messages(value, default_role)
        if remembered is not None:
            return remembered
    data = parse_json(value)
    if isinstance(data, str):
        text = text_of(data)
        return (new_message(default_role, text),) if text else None
    if isinstance(data, dict):
        inner = data.get("messages")
        data = inner if isinstance(inner, list) else [data]
    if not isinstance(data, list):
        return None
    messages = [parse_message(item, default_role) for item in data]
    return tuple(m for m in messages if m is not None)


def parse_message(value: object, default_role: str) -> Message | None:
    """One message in any of the shapes the conventions use.

    GenAI ``{role, parts:[{type, ...}]}``, Gemini ``{role, parts:[{text}|
    {function_call}|{function_response}]}``, OpenAI-style ``{role, content,
    tool_calls, tool_call_id}``, completion ``{text}`` and event
    ``{message: {...}}`` wrappers.
    """
    value = parse_json(value)
    if isinstance(value, str):
        text = text_of(value)
        return new_message(default_role, text) if text else None
    if isinstance(value, list):
        # A body that is the content blocks alone (Bedrock, Anthropic): one message.
        blocks = _content_parts(value)
        return None if blocks is None else parse_message({"content": blocks}, default_role)
    if not isinstance(value, dict):
        return None
    nested = value.get("message")
    if nested is not None and "role" not in value and "parts" not in value:
        return parse_message(nested, default_role)
    role = _role(value.get("role"), default_role)
    texts: list[str] = []
    requests: list[ToolRequest] = []
    responses: list[ToolResponse] = []
    parts = value.get("parts")
    if isinstance(parts, list):
        _take(parts, texts, requests, responses)
    content = value.get("content")
    content_parts = _content_parts(content) if content is not None else None
    tool_call_id = text_of(value.get("tool_call_id"))
    if role == "tool" or tool_call_id is not None:
        if content is not None:
            result = text_of(content)
            parsed = list(map(_parse_part, content_parts)) if content_parts is not None else []
            handed = [p for p in parsed if isinstance(p, ToolResponse)]
            if handed:
                # Result blocks carry their own call ids (Bedrock toolResult, Anthropic tool_result).
                responses.extend(handed)
            else:
                if content_parts is not None:
                    result = "\n".join(p for p in parsed if isinstance(p, str))
                responses.append(
                    new_tool_response(tool_call_id, text_of(value.get("name")), result or None)
                )
    elif content_parts is not None:
        _take(content_parts, texts, requests, responses)
    elif (text := text_of(content)) is not None:
        texts.append(text)
    if (text := text_of(value.get("text"))) is not None and not parts and content is None:
        texts.append(text)
    calls = value.get("tool_calls")
    if calls is not None:
        for call in list_of(calls):
            request = _tool_request(call)
            if request is not None:
                requests.append(request)
    legacy_call = value.get("function_call")
    if legacy_call is not None and (legacy := _tool_request(legacy_call)) is not None:
        requests.append(legacy)
    return new_message(role, "\n".join(texts) or None, tuple(requests), tuple(responses))


def _take(
    items: Iterable[object],
    texts: list[str],
    requests: list[ToolRequest],
    responses: list[ToolResponse],
) -> None:
    for item in items:
        part = _parse_part(item)
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, ToolRequest):
            requests.append(part)
        elif isinstance(part, ToolResponse):
            responses.append(part)


# Keys that make a mapping a content block of one of the vocabularies above.
_PART_KEYS = frozenset(
    {
        "type",
        "function_call",
        "functionCall",
        "function_response",
        "functionResponse",
        "text",
        "toolUse",
        "toolResult",
        "json",
        "reasoningContent",
    }
)
_SKIPPED_BLOCK_KEYS = frozenset({"reasoningContent", "cachePoint"})


def _content_parts(value: object) -> list[object] | None:
    """Content given as a list of typed parts (possibly as JSON text), else ``None``.

    Only a list whose every item looks like a part counts, so a user who types
    JSON into the chat keeps their text.
    """
    data = parse_json(value) if isinstance(value, str) else value
    if isinstance(data, dict) and _PART_KEYS & data.keys():
        return [data]
    if isinstance(data, list) and data and all(_looks_like_part(p) for p in data):
        return data
    return None


def _looks_like_part(value: object) -> bool:
    return isinstance(value, str) or (isinstance(value, dict) and bool(_PART_KEYS & value.keys()))


def _parse_part(part: object) -> str | ToolRequest | ToolResponse | None:
    if isinstance(part, str):
        return text_of(part)
    if not isinstance(part, dict):
        return None
    kind = part.get("type")
    if kind == "text" and len(part) == 2 and "content" in part:
        # The GenAI text part {type, content}, the commonest of all: what the last branch gives.
        return text_of(part["content"])
    if kind in _SKIPPED_PART_TYPES or part.get("thought") is True:
        return None
    if kind in ("tool_call", "function_call", "tool_use"):
        return _tool_request(part)
    if kind in ("tool_call_response", "tool_result", "function_call_output"):
        payload = None
        for key in ("response", "result", "content", "output"):
            if key in part:
                payload = part[key]
                break
        call_id = part.get("id", part.get("tool_use_id", part.get("call_id")))
        return new_tool_response(text_of(call_id), text_of(part.get("name")), block_text(payload))
    if kind is None and not _SKIPPED_BLOCK_KEYS.isdisjoint(part):
        return None
    if kind is None and isinstance(use := part.get("toolUse"), dict):
        return _tool_request({"name": use.get("name"), "id": use.get("toolUseId"), **use})
    if kind is None and isinstance(answer := part.get("toolResult"), dict):
        return new_tool_response(
            text_of(answer.get("toolUseId")), None, block_text(answer.get("content"))
        )
    if kind is None and "json" in part and "text" not in part:
        return json_text(part["json"])
    if kind in (None, "text", "input_text", "output_text"):
        call = part.get("function_call", part.get("functionCall"))
        if isinstance(call, dict):
            return _tool_request(call)
        answer = part.get("function_response", part.get("functionResponse"))
        if isinstance(answer, dict):
            return new_tool_response(
                text_of(answer.get("id")),
                text_of(answer.get("name")),
                text_of(answer.get("response")),
            )
        return text_of(part.get("content", part.get("text")))
    return None


_LIST_OR_SPACE = "[ \t\n\r"


def block_text(value: object) -> str | None:
    """Text of a tool result: the text of its blocks when it is a list of them, else as recorded."""
    if isinstance(value, str):
        # Most results are an object or plain text: told by their first character.
        if value[:1] not in _LIST_OR_SPACE or not value[:64].lstrip().startswith("["):
            return text_of(value)
        data = parse_json(value)
    else:
        data = value
    # Only a list: a result object that happens to have a "text" key keeps all its fields.
    blocks = _content_parts(data) if isinstance(data, list) else None
    if blocks is None:
        return text_of(value)
    texts = [p for p in map(_parse_part, blocks) if isinstance(p, str)]
    return "\n".join(texts) if texts else text_of(value)


def _tool_request(value: object) -> ToolRequest | None:
    value = parse_json(value)
    if not isinstance(value, dict):
        return None
    function = value.get("function")
    source = function if isinstance(function, dict) else value
    name = text_of(source.get("name"))
    if name is None:
        return None
    arguments = None
    for key in ("arguments", "args", "input"):
        if source.get(key) is not None:
            arguments = source[key]
            break
    call_id = value.get("id", value.get("call_id"))
    return new_tool_request(name, text_of(call_id), json_text(arguments))


def last_user_text(messages: Iterable[Message]) -> str | None:
    texts = [m.text for m in messages if m.role == "user" and m.text is not None]
    return texts[-1] if texts else None


def last_assistant_text(messages: Iterable[Message]) -> str | None:
    texts = [
        m.text
        for m in messages
        if m.role not in ("user", "system", "tool", "developer") and m.text is not None
    ]
    return texts[-1] if texts else None


# --- free-form input/output (agent and workflow spans) ---------------------------------

_WRAPPER_KEYS = {
    "input",
    "output",
    "text",
    "content",
    "query",
    "question",
    "answer",
    "response",
    "result",
    "message",
    "prompt",
}


def unwrap_io(value: AttrValue | object, *, output: bool) -> str | None:
    """Best text of a free-form input or output value.

    Frameworks wrap the interesting text: OpenLLMetry in ``{"inputs": ...}``
    or ``{"args": [...], "kwargs": {...}}``, LangChain in ``{"output": ...}``.
    Peel those wrappers; what is not text after that stays JSON text, as
    recorded when nothing was peeled.
    """
    data = parse_json(value)
    peeled = False
    for _ in range(6):
        found, inner = _peel(data, output)
        if not found:
            break
        data, peeled = parse_json(inner), True
    if isinstance(data, list) and any(isinstance(m, dict) and "role" in m for m in data):
        messages = parse_messages(data, "assistant" if output else "user") or ()
        picked = last_assistant_text(messages) if output else last_user_text(messages)
        if picked is not None:
            return picked
    if isinstance(data, str) or peeled or not isinstance(value, str):
        return text_of(data)
    return text_of(value)


def _peel(data: object, output: bool) -> tuple[bool, object]:
    if not isinstance(data, dict) or not data:
        return False, None
    wrapper = "outputs" if output else "inputs"
    if wrapper in data:
        return True, data[wrapper]
    if set(data) <= {"args", "kwargs"}:
        args = list_of(data.get("args"))
        kwargs = data.get("kwargs")
        kwargs = kwargs if isinstance(kwargs, dict) else {}
        if len(args) == 1 and not kwargs:
            return True, args[0]
        if not args and len(kwargs) == 1:
            return True, next(iter(kwargs.values()))
        return False, None
    if isinstance(data.get("messages"), list):
        return True, data["messages"]
    if len(data) == 1 and next(iter(data)) in _WRAPPER_KEYS:
        return True, next(iter(data.values()))
    return False, None


def looks_structured(text: str) -> bool:
    return isinstance(parse_json(text), _STRUCTURED)
