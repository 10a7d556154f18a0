"""Readers for the tracing conventions agents use to describe themselves.

Each convention is one module with one ``Convention`` declaration
(``sidecar.evaluate.conventions.reading``): its reader, its precedence and its root
spans. ``CONVENTIONS`` below is the one registry; everything else is derived
from it:

- ``read_span`` tries the readers in ascending precedence; the first that
  recognises a span wins and says what kind of step it is (agent, LLM call,
  tool execution) and what content it carries, as ``Message`` records;
- ``ALL_CONVENTIONS``: the order in which ``Transcript.conventions`` lists
  them (registry order), so equal traces list them equally;
- ``ROOT_SPANS``: the spans the assembler may take as a trace's root.

Adding a convention: a module with its reader and declaration, and one line
here (a test fails when a module declares a convention that is not listed).

Shared by the readers: ``attributes`` (OTLP attribute values, JSON text),
``messages`` (message and part shapes, every block vocabulary), ``content``
(GenAI content from whichever carrier brought it: attributes, span events,
log records folded into the span; its precedence table) and ``memo`` (each
message text of a trace parsed once). Content that was not captured is ``None``; an empty
string never means "missing". Nothing here does I/O.
"""

from __future__ import annotations

import functools
import operator

from sidecar.evaluate.conventions import adk, openinference, openllmetry, otel_genai
from sidecar.evaluate.conventions.adk import ADK_V1
from sidecar.evaluate.conventions.attributes import parse_json, text_of, usage
from sidecar.evaluate.conventions.content import (
    REDACTED,
    SpanMessages,
    carries_messages,
    span_messages,
    tool_content,
)
from sidecar.evaluate.conventions.memo import MessageMemo
from sidecar.evaluate.conventions.messages import (
    Message,
    ToolRequest,
    ToolResponse,
    last_assistant_text,
    last_user_text,
    looks_structured,
    parse_message,
    parse_messages,
    unwrap_io,
)
from sidecar.evaluate.conventions.openinference import OPENINFERENCE
from sidecar.evaluate.conventions.openllmetry import OPENLLMETRY
from sidecar.evaluate.conventions.otel_genai import OTEL_GENAI
from sidecar.evaluate.conventions.reading import (
    Convention,
    Reader,
    Reading,
    Role,
    RootSpans,
)
from sidecar.model import Span

__all__ = [
    "ADK_V1",
    "ALL_CONVENTIONS",
    "CONVENTIONS",
    "OPENINFERENCE",
    "OPENLLMETRY",
    "OTEL_GENAI",
    "READERS",
    "REDACTED",
    "ROOT_SPANS",
    "Convention",
    "Message",
    "MessageMemo",
    "Reading",
    "Role",
    "RootSpans",
    "SpanMessages",
    "ToolRequest",
    "ToolResponse",
    "carries_messages",
    "last_assistant_text",
    "last_user_text",
    "looks_structured",
    "parse_json",
    "parse_message",
    "parse_messages",
    "read_span",
    "span_messages",
    "text_of",
    "tool_content",
    "unwrap_io",
    "usage",
]

# The registry, in the order Transcript.conventions lists the conventions.
CONVENTIONS: tuple[Convention, ...] = (
    otel_genai.CONVENTION,
    adk.CONVENTION,
    openinference.CONVENTION,
    openllmetry.CONVENTION,
)

ALL_CONVENTIONS: tuple[str, ...] = tuple(c.name for c in CONVENTIONS)

_BY_PRECEDENCE = sorted(CONVENTIONS, key=lambda c: c.precedence)

READERS: tuple[Reader, ...] = tuple(c.read for c in _BY_PRECEDENCE)

ROOT_SPANS: RootSpans = functools.reduce(
    operator.or_, (c.root_spans for c in CONVENTIONS), RootSpans()
)


def read_span(span: Span, memo: MessageMemo | None = None) -> Reading | None:
    """The first reading of ``span``; ``memo`` shares parsed messages across one trace."""
    for reader in READERS:
        reading = reader(span, memo)
        if reading is not None:
            return reading
    return None
