"""Parse each message text of a trace once.

Every LLM call's input repeats the conversation so far, usually as the
previous call's input with the new messages appended, and each model output
comes back as an item of the next input. Parsing every span's messages from
scratch is quadratic in the length of the conversation; a ``MessageMemo``,
kept for the spans of one trace, reads only what is new:

- a JSON array text that extends one read before (the same text up to its
  closing ``]``, then ``,`` and more items) has only the new items parsed;
- an item whose JSON text was parsed before is not parsed again.

The result is exactly what ``messages.parse_messages`` returns without a
memo: items are cut out by the ``json`` module's own scanner, and any text it
would not read as one array is left to the ordinary path. This module uses
the message parser; the parser knows the memo only as ``MessageCache``.
"""

from __future__ import annotations

import json
import re

from sidecar.bounds import MAX_NESTING, json_too_deep
from sidecar.evaluate.conventions.messages import Message, parse_message
from sidecar.text import may_hold_surrogates, repair

# Recent array texts to try as the start of a new one: enough for the LLM
# calls of a few agents running side by side.
_RECENT_ARRAYS = 8

_DECODER = json.JSONDecoder()
_JSON_SPACE = re.compile(r"[ \t\n\r]*")


class MessageMemo:
    """Messages parsed so far in one trace, by the JSON text they came from."""

    __slots__ = ("_arrays", "_items", "_recent")

    def __init__(self) -> None:
        self._arrays: dict[tuple[str, str], tuple[Message, ...]] = {}
        # (text without its closing "]", default role, messages) of recent
        # arrays with items, newest last.
        self._recent: list[tuple[str, str, tuple[Message, ...]]] = []
        # Keyed by item text and default role; the role is None for items whose
        # own role makes the default irrelevant.
        self._items: dict[tuple[str, str | None], Message | None] = {}

    def messages(self, value: str, default_role: str) -> tuple[Message, ...] | None:
        """``parse_messages(value, default_role)`` for a JSON array text, else ``None``."""
        text = value.strip()
        if text[:1] != "[":
            return None
        seen = self._arrays.get((text, default_role))
        if seen is not None:
            return seen
        known: tuple[Message, ...] = ()
        start = 1
        for head, role, messages in reversed(self._recent):
            if role != default_role or not text.startswith(head):
                continue
            index = _after_space(text, len(head))
            delimiter = text[index : index + 1]
            if delimiter == "]" and _after_space(text, index + 1) == len(text):
                return messages
            # Any other character could continue the earlier array's last item.
            if delimiter == ",":
                known, start = messages, index + 1
                break
        # Text nested too deeply is left to parse_messages, which reads it as missing.
        # A known head was measured when it was read; only the new items are, inside "[".
        # Counting brackets in place first spares copying the text (json_too_deep counts too).
        if text.count("[", start) + text.count("{", start) > MAX_NESTING - 1 and json_too_deep(
            text[start:], MAX_NESTING - 1
        ):
            return None
        items = _array_items(text, start, first=start == 1)
        if items is None:
            return None
        found = list(known)
        for item_text, item in items:
            message = self._item(item_text, item, default_role)
            if message is not None:
                found.append(message)
        parsed = tuple(found)
        self._arrays[text, default_role] = parsed
        if items:
            self._recent.append((text[:-1], default_role, parsed))
            del self._recent[:-_RECENT_ARRAYS]
        return parsed

    def _item(self, text: str, item: object, default_role: str) -> Message | None:
        own_role = isinstance(item, dict) and isinstance(item.get("role"), str) and item["role"]
        key = (text, None if own_role else default_role)
        if key in self._items:
            return self._items[key]
        message = self._items[key] = parse_message(item, default_role)
        return message


def _after_space(text: str, index: int) -> int:
    if not text.startswith((" ", "\t", "\n", "\r"), index):
        return index
    match = _JSON_SPACE.match(text, index)
    return match.end() if match is not None else index


def _array_items(text: str, index: int, *, first: bool) -> list[tuple[str, object]] | None:
    """Items of the JSON array ``text`` from ``index`` on, each with its text.

    ``index`` is just past the ``[`` (``first``) or past a ``,``. ``None`` when
    ``json.loads`` would not read the rest as the end of an array, nesting too
    deep included.
    """
    items: list[tuple[str, object]] = []
    index = _after_space(text, index)
    if first and text[index : index + 1] == "]":
        return items if _after_space(text, index + 1) == len(text) else None
    while True:
        try:
            item, end = _DECODER.raw_decode(text, index)
        except (ValueError, RecursionError):
            return None
        piece = text[index:end]
        if may_hold_surrogates(piece):
            item, _ = repair(item)
        items.append((piece, item))
        index = _after_space(text, end)
        delimiter = text[index : index + 1]
        if delimiter == "]":
            return items if _after_space(text, index + 1) == len(text) else None
        if delimiter != ",":
            return None
        index = _after_space(text, index + 1)
