"""Readers for the tracing conventions agents use to describe themselves.

Each reader looks at one span and, if it recognises the span, returns a
``Reading``: what kind of step the span is (agent, LLM call, tool execution)
and the content it carries, normalised into ``Message`` records. The first
reader that recognises a span wins, so the order of ``READERS`` is the
precedence.

Content that was not captured is ``None``; an empty string never means
"missing". Nothing here does I/O.
"""

from __future__ import annotations

from typing import Protocol

from sidecar.conventions.adk import read_adk_v1
from sidecar.conventions.content import (
    ADK_V1,
    ALL_CONVENTIONS,
    OPENINFERENCE,
    OPENLLMETRY,
    OTEL_GENAI,
    Message,
    Reading,
    Role,
    ToolRequest,
    ToolResponse,
    last_assistant_text,
    last_user_text,
    looks_structured,
    parse_message,
    parse_messages,
    text_of,
    unwrap_io,
    usage,
)
from sidecar.conventions.memo import MessageMemo
from sidecar.conventions.openinference import read_openinference
from sidecar.conventions.openllmetry import read_openllmetry
from sidecar.conventions.otel_genai import read_otel_genai
from sidecar.model import Span

__all__ = [
    "ADK_V1",
    "ALL_CONVENTIONS",
    "OPENINFERENCE",
    "OPENLLMETRY",
    "OTEL_GENAI",
    "READERS",
    "Message",
    "MessageMemo",
    "Reading",
    "Role",
    "ToolRequest",
    "ToolResponse",
    "last_assistant_text",
    "last_user_text",
    "looks_structured",
    "parse_message",
    "parse_messages",
    "read_span",
    "text_of",
    "unwrap_io",
    "usage",
]


class Reader(Protocol):
    def __call__(self, span: Span, memo: MessageMemo | None = None, /) -> Reading | None: ...


# ADK and OpenLLMetry spans also carry some gen_ai.* names, so the specific
# conventions go first and OTel GenAI, the common vocabulary, last.
READERS: tuple[Reader, ...] = (read_adk_v1, read_openinference, read_openllmetry, read_otel_genai)


def read_span(span: Span, memo: MessageMemo | None = None) -> Reading | None:
    """The first reading of ``span``; ``memo`` shares parsed messages across one trace."""
    for reader in READERS:
        reading = reader(span, memo)
        if reading is not None:
            return reading
    return None
