"""Which conversation a trace is a turn of.

The key names of a rubric's ``conversation.key`` are tried in order; for each
the root/agent span's attributes are read first, then the resource. The first
non-empty value (text or an integer) is the conversation id. A trace without
one is not a turn of any conversation of that rubric: the caller counts it and
skips it; an id is never guessed.

Ids longer than :data:`MAX_ID_CHARS` are replaced by a hash of themselves, so
they stay distinct and the turn records stay small.
"""

from __future__ import annotations

import hashlib

from sidecar.evaluate.rubric import ConversationSpec
from sidecar.model import AttrValue, Transcript

MAX_ID_CHARS = 256


def _text(value: AttrValue) -> str | None:
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    text = str(value).strip()
    if not text:
        return None
    if len(text) > MAX_ID_CHARS:
        return "sha256:" + hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()
    return text


def conversation_id(spec: ConversationSpec, transcript: Transcript) -> str | None:
    """The conversation id of ``transcript`` under ``spec``, or None when it has none."""
    for name in spec.key:
        for attributes in (transcript.root_attributes, transcript.resource):
            if name in attributes and (found := _text(attributes[name])) is not None:
                return found
    return None
