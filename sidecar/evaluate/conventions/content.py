"""GenAI content of one span, whichever carrier brought it.

Producers put the same content in different places: span attributes
(``gen_ai.input.messages``), a ``gen_ai.client.inference.operation.details``
event on the span or as a log record, per-message events on the span or as
log records (``gen_ai.user.message``, ``gen_ai.choice``, ...), and tool
arguments and results in ``gen_ai.tool.message`` / ``gen_ai.choice`` events
keyed by the call ``id``. Log records and details events are folded into the
span first (``sidecar.ingest.events.join_logs``: details keys become
attributes, message records become span events), so this module reads two
carriers, attributes and span events, and one precedence decides, written
out once here:

==========================  ===================================================================
content                     carriers, first readable one wins
==========================  ===================================================================
input messages              ``gen_ai.input.messages`` > ``gen_ai.prompt`` > per-message events
                            (``gen_ai.{system,user,assistant,tool}.message``,
                            ``gen_ai.content.prompt``)
output messages             ``gen_ai.output.messages`` > ``gen_ai.completion`` >
                            ``gen_ai.choice`` / ``gen_ai.content.completion`` events
tool call arguments         ``gen_ai.tool.call.arguments`` > the ``tool_call`` part of the
                            span's input messages with the call's id > a
                            ``gen_ai.tool.message`` event with the call's ``id``
tool call result            ``gen_ai.tool.call.result`` > the ``tool_call_response`` part of
                            the span's output messages with the call's id > a
                            ``gen_ai.choice`` event with the call's ``id``
==========================  ===================================================================

On a tool execution span the ``gen_ai.tool.message`` / ``gen_ai.choice``
events are the call's input and output (Strands), not messages of a
conversation: content is attached by what it is.

A carrier that holds a redaction placeholder (:data:`REDACTED`) holds no
content: not captured. A carrier that is present but whose shape no reader
understands (nothing readable parsed out of it) is *unreadable*: it is named
in ``unreadable`` (``"input:gen_ai.input.messages"``), so the capture record
can say the content was there rather than advise turning capture on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sidecar.evaluate.conventions.attributes import json_text, parse_json, text_of
from sidecar.evaluate.conventions.memo import MessageMemo
from sidecar.evaluate.conventions.messages import (
    Message,
    block_text,
    parse_message,
    parse_messages,
)
from sidecar.fastrecord import record_builder
from sidecar.model import Attributes, AttrValue, Span, SpanEvent

__all__ = [
    "INPUT",
    "OUTPUT",
    "REDACTED",
    "SpanMessages",
    "carries_messages",
    "span_messages",
    "tool_content",
]

INPUT = "input"
OUTPUT = "output"
ARGUMENTS = "arguments"
RESULT = "result"

# What redaction settings write instead of content (OpenInference's OPENINFERENCE_HIDE_*,
# Strands' gen_ai_unredacted_attributes, ADK's legacy events with capture off): content
# withheld, never text.
REDACTED = frozenset({"__REDACTED__", "[REDACTED]", "<redacted>", "<elided>"})
_LONGEST_PLACEHOLDER = 32

# Per-message events: the role each gives its message.
_EVENT_ROLES = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
_INPUT_EVENTS = frozenset({*_EVENT_ROLES, "gen_ai.content.prompt"})
_OUTPUT_EVENTS = frozenset({"gen_ai.choice", "gen_ai.content.completion"})
_MESSAGE_KEYS = frozenset(
    {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.prompt", "gen_ai.completion"}
)


@dataclass(frozen=True, slots=True)
class SpanMessages:
    """A span's messages (``None``: none captured) and the carriers it had that could not be read."""

    inputs: tuple[Message, ...] | None = None
    outputs: tuple[Message, ...] | None = None
    unreadable: tuple[str, ...] = ()


_NOTHING = SpanMessages()
new_span_messages = record_builder(SpanMessages)  # one per model call span (sidecar.fastrecord)


def carries_messages(span: Span) -> bool:
    """The span holds message content in some carrier (cheap: keys and event names only)."""
    if not _MESSAGE_KEYS.isdisjoint(span.attributes):
        return True
    return any(e.name in _INPUT_EVENTS or e.name in _OUTPUT_EVENTS for e in span.events)


def span_messages(span: Span, memo: MessageMemo | None = None) -> SpanMessages:
    """The input and output messages of ``span``, by the precedence in the module docstring."""
    attrs = span.attributes
    events = span.events
    # The common case, both sides in the current attributes and readable, read in one go.
    value_in = attrs.get("gen_ai.input.messages")
    value_out = attrs.get("gen_ai.output.messages")
    # A placeholder is short; message lists are long JSON text or structured values.
    if (
        value_in is not None
        and value_out is not None
        and not (isinstance(value_in, str) and len(value_in) <= _LONGEST_PLACEHOLDER)
        and not (isinstance(value_out, str) and len(value_out) <= _LONGEST_PLACEHOLDER)
    ):
        inputs = parse_messages(value_in, "user", memo)
        outputs = parse_messages(value_out, "assistant", memo)
        # Readable when the first message of each side has content (inlined: per model call).
        if inputs and outputs:
            first_in, first_out = inputs[0], outputs[0]
            if (
                first_in.text is not None
                or first_in.tool_requests != ()
                or first_in.tool_responses != ()
            ) and (
                first_out.text is not None
                or first_out.tool_requests != ()
                or first_out.tool_responses != ()
            ):
                return new_span_messages(inputs, outputs, ())
    elif not events and _MESSAGE_KEYS.isdisjoint(attrs):
        return _NOTHING
    unreadable: list[str] = []
    inputs = _first_readable(
        attrs, ("gen_ai.input.messages", "gen_ai.prompt"), "user", memo, INPUT, unreadable
    )
    if inputs is None and events:
        inputs = _from_events(events, _INPUT_EVENTS, memo, INPUT, unreadable)
    outputs = _first_readable(
        attrs,
        ("gen_ai.output.messages", "gen_ai.completion"),
        "assistant",
        memo,
        OUTPUT,
        unreadable,
    )
    if outputs is None and events:
        outputs = _from_events(events, _OUTPUT_EVENTS, memo, OUTPUT, unreadable)
    if inputs is None and outputs is None and not unreadable:
        return _NOTHING
    return new_span_messages(inputs, outputs, tuple(unreadable))


def tool_content(
    span: Span, call_id: str | None, memo: MessageMemo | None = None
) -> tuple[str | None, str | None, tuple[str, ...]]:
    """(arguments, result, unreadable carriers) of the tool call ``span`` executed."""
    attrs = span.attributes
    # Long text is the common case: no placeholder, and (unless it starts a list) no blocks.
    value = attrs.get("gen_ai.tool.call.arguments")
    if isinstance(value, str) and len(value) > _LONGEST_PLACEHOLDER:
        arguments: str | None = text_of(value)
    else:
        arguments = None if value is None or _withheld(value) else json_text(value)
    value = attrs.get("gen_ai.tool.call.result")
    if isinstance(value, str) and len(value) > _LONGEST_PLACEHOLDER and value[0] == "{":
        result: str | None = text_of(value)
    else:
        result = None if value is None or _withheld(value) else block_text(value)
    if arguments is not None and result is not None:
        return arguments, result, ()
    unreadable: list[str] = []
    messages = _tool_messages(span, memo)
    if arguments is None:
        arguments = _requested(messages.inputs, call_id)
    if result is None:
        result = _handed(messages.outputs, call_id)
    for event in span.events:
        if arguments is None and event.name == "gen_ai.tool.message" and _same(event, call_id):
            arguments = _plain(event.attributes.get("content"), json_text)
            if arguments is None and "content" in event.attributes:
                unreadable.append(f"{ARGUMENTS}:{event.name}")
        elif result is None and event.name == "gen_ai.choice" and _same(event, call_id):
            value = event.attributes.get("message", event.attributes.get("content"))
            result = _plain(value, block_text)
    if arguments is None and "gen_ai.tool.call.arguments" in attrs:
        unreadable.extend(_present(attrs, "gen_ai.tool.call.arguments", ARGUMENTS))
    return arguments, result, (*messages.unreadable, *unreadable)


# --- carriers ------------------------------------------------------------------------------


def _redacted(value: AttrValue | object) -> bool:
    # Placeholders are short: a long text is not stripped (copied) to find out.
    return (
        isinstance(value, str) and len(value) <= _LONGEST_PLACEHOLDER and value.strip() in REDACTED
    )


def _withheld(value: AttrValue | object) -> bool:
    # ADK sets an empty mapping when capture is off; redaction writes a placeholder.
    if isinstance(value, str):
        return len(value) <= _LONGEST_PLACEHOLDER and value.strip() in REDACTED
    return value == {}


def _plain(value: AttrValue | object, read: object) -> str | None:
    """A tool argument or result value as text; a placeholder or blank is missing."""
    if value is None or value == {} or _redacted(value):
        return None
    text = read(value)  # type: ignore[operator]
    return text if isinstance(text, str) else None


def _readable(messages: tuple[Message, ...] | None) -> bool:
    """Something was read: an empty list of messages, or a message with content."""
    if messages is None:
        return False
    for message in messages:
        if message.text is not None or message.tool_requests or message.tool_responses:
            return True
    return not messages


def _first_readable(
    attrs: Attributes,
    keys: Sequence[str],
    default_role: str,
    memo: MessageMemo | None,
    side: str,
    unreadable: list[str],
) -> tuple[Message, ...] | None:
    for key in keys:
        value = attrs.get(key)
        if value is None or _redacted(value):
            continue
        messages = parse_messages(value, default_role, memo)
        if _readable(messages):
            return messages
        if _has_content(value):
            unreadable.append(f"{side}:{key}")
    return None


def _from_events(
    events: Sequence[SpanEvent],
    names: frozenset[str],
    memo: MessageMemo | None,
    side: str,
    unreadable: list[str],
) -> tuple[Message, ...] | None:
    found: list[Message] = []
    for event in events:
        name = event.name
        if name not in names:
            continue
        if name == "gen_ai.content.prompt" or name == "gen_ai.content.completion":
            key = "gen_ai.prompt" if name == "gen_ai.content.prompt" else "gen_ai.completion"
            value = event.attributes.get(key)
            if value is None or _redacted(value):
                continue
            messages = parse_messages(value, "user" if side == INPUT else "assistant", memo)
            if _readable(messages) and messages:
                found.extend(messages)
            elif _has_content(value):
                unreadable.append(f"{side}:{name}")
            continue
        message, seen = _event_message(event.attributes, _EVENT_ROLES.get(name, "assistant"))
        if message is not None:
            found.append(message)
        elif seen:
            unreadable.append(f"{side}:{name}")
    return tuple(found) or None


def _event_message(attrs: Attributes, role: str) -> tuple[Message | None, bool]:
    """The message a per-message event holds, and whether it held content at all."""
    body = {key: value for key, value in attrs.items() if not key.startswith("gen_ai.")}
    held = _has_content(body.get("message")) or _has_content(body.get("content"))
    if not held and "tool_calls" not in body:
        return None, False
    if "message" in body:
        message = parse_message(body["message"], role)
        if message is not None and "tool_calls" in body and not message.tool_requests:
            # OpenLLMetry's choice: {message: {content}, tool_calls: [...]} side by side.
            message = parse_message(
                {**_as_dict(body["message"]), "tool_calls": body["tool_calls"]}, role
            )
    elif isinstance(content := parse_json(body.get("content")), dict) and "parts" in content:
        # ADK's legacy events: {"content": <a Gemini Content: role and parts>}.
        message = parse_message(content, role)
    else:
        if role == "tool" and "id" in body:
            body.setdefault("tool_call_id", body["id"])
        message = parse_message(body, role)
    if message is None or not (message.text or message.tool_requests or message.tool_responses):
        return None, held
    return message, True


# Keys that say what a value is, not what it says: a message or part with nothing
# else (what content-off producers keep, e.g. pydantic-ai's {"type": "text"}) holds
# no content.
_STRUCTURE_KEYS = frozenset(
    {"role", "type", "finish_reason", "id", "name", "index", "call_id", "tool_call_id"}
)


def _has_content(value: object) -> bool:
    """Text or numbers beyond the structure keys, not a placeholder: content was captured."""
    if value is None or _redacted(value):
        return False
    data = parse_json(value)
    if isinstance(data, dict):
        return any(k not in _STRUCTURE_KEYS and _has_content(v) for k, v in data.items())
    if isinstance(data, list):
        return any(_has_content(item) for item in data)
    if isinstance(data, bool):
        return False
    return isinstance(data, (int, float)) or text_of(data) is not None


def _as_dict(value: object) -> dict[str, object]:
    data = parse_json(value)
    if isinstance(data, dict):
        return data
    return {"content": data}


def _present(attrs: Attributes, key: str, side: str) -> list[str]:
    return [f"{side}:{key}"] if _has_content(attrs.get(key)) else []


def _tool_messages(span: Span, memo: MessageMemo | None) -> SpanMessages:
    attrs = span.attributes
    if "gen_ai.input.messages" not in attrs and "gen_ai.output.messages" not in attrs:
        return _NOTHING
    unreadable: list[str] = []
    inputs = _first_readable(attrs, ("gen_ai.input.messages",), "tool", memo, ARGUMENTS, unreadable)
    outputs = _first_readable(attrs, ("gen_ai.output.messages",), "tool", memo, RESULT, unreadable)
    return new_span_messages(inputs, outputs, tuple(unreadable))


def _requested(messages: tuple[Message, ...] | None, call_id: str | None) -> str | None:
    requests = [r for m in messages or () for r in m.tool_requests]
    for request in requests:
        if call_id is not None and request.call_id == call_id:
            return request.arguments
    return requests[0].arguments if len(requests) == 1 else None


def _handed(messages: tuple[Message, ...] | None, call_id: str | None) -> str | None:
    responses = [r for m in messages or () for r in m.tool_responses]
    for response in responses:
        if call_id is not None and response.call_id == call_id:
            return response.result
    return responses[0].result if len(responses) == 1 else None


def _same(event: SpanEvent, call_id: str | None) -> bool:
    """The event is about the call: its ``id`` is the call's, or it names none."""
    event_id = text_of(event.attributes.get("id"))
    return event_id is None or call_id is None or event_id == call_id
