"""What a convention declares, and what its reader returns for one span.

A convention is one ``Convention`` record in its own module:

- ``read``: recognises the convention's spans (``None`` for any other span)
  and reads each into a ``Reading``;
- ``precedence``: readers are tried in ascending precedence and the first
  that recognises a span wins;
- ``root_spans``: which of its spans may be the root of a trace whose parent
  is remote (the assembler decides a trace once its root has ended);

The registry in ``sidecar.evaluate.conventions`` lists the declarations; the reading
order, the order of ``Transcript.conventions`` and the assembler's root spans
are derived from it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from sidecar.evaluate.conventions.memo import MessageMemo
from sidecar.evaluate.conventions.messages import Message
from sidecar.fastrecord import record_builder
from sidecar.model import Span, ToolCall


class Role(enum.Enum):
    AGENT = "agent"
    LLM = "llm"
    TOOL = "tool"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class Reading:
    """What one convention read from one span.

    ``inputs``/``outputs`` are ``None`` when the span carries no captured
    content. ``strong`` separates real agent spans from wrappers around them
    (workflows, chains, ADK's ``invocation``) when picking *the* agent span.
    """

    convention: str
    role: Role
    strong: bool = True
    agent_name: str | None = None
    input_text: str | None = None
    output_text: str | None = None
    inputs: tuple[Message, ...] | None = None
    outputs: tuple[Message, ...] | None = None
    tool: ToolCall | None = None
    models: tuple[str, ...] = ()
    # Content carriers present on the span in a shape no reader understands, as
    # "side:carrier" ("input:gen_ai.input.messages"): captured, yet unreadable.
    unreadable: tuple[str, ...] = ()


# Every reader returns one of these per span (sidecar.fastrecord); after the
# convention and the role, fields are passed by keyword.
new_reading = record_builder(Reading, defaults=True, keyword_only_after=2)


class Reader(Protocol):
    def __call__(self, span: Span, memo: MessageMemo | None = None, /) -> Reading | None: ...


@dataclass(frozen=True, slots=True)
class RootSpans:
    """Spans that may be a trace's root although their parent is not in the trace.

    A span matches when its name starts with one of ``name_prefixes`` or one
    of ``attributes`` (key, value) is among its attributes. The assembler
    accepts only SERVER and INTERNAL spans this way.
    """

    name_prefixes: tuple[str, ...] = ()
    attributes: tuple[tuple[str, str], ...] = ()

    def matches(self, span: Span) -> bool:
        if span.name.startswith(self.name_prefixes):
            return True
        return any(span.attributes.get(key) == value for key, value in self.attributes)

    def __or__(self, other: RootSpans) -> RootSpans:
        return RootSpans(
            tuple(dict.fromkeys(self.name_prefixes + other.name_prefixes)),
            tuple(dict.fromkeys(self.attributes + other.attributes)),
        )


@dataclass(frozen=True, slots=True)
class Convention:
    """One tracing convention; every field is required, so a declaration decides each.

    ``name`` is what ``Reading.convention`` and ``Transcript.conventions``
    carry. ``root_spans`` may be empty (``RootSpans()``): then a trace of only
    this convention needs a span without a parent as its root.
    """

    name: str
    read: Reader
    precedence: int
    root_spans: RootSpans
