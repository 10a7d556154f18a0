"""Untrusted text made encodable, once, where it enters.

JSON may spell a lone UTF-16 surrogate (``"\\ud800"``); Python reads it into a
``str`` that no UTF-8 writer accepts, so one such character would crash every
later step that encodes (records, cache keys, metrics, logs). Readers of
untrusted JSON pass what they parsed through :func:`repair`, which replaces
each lone surrogate with U+FFFD (the Unicode replacement character) and says
how many strings it changed, so the trace can be flagged ``repaired_text``.
Everything downstream may then assume its text encodes.
"""

from __future__ import annotations

import json
import re
from typing import Any

REPLACEMENT = "\ufffd"

_SURROGATE = re.compile("[\ud800-\udfff]")
# A JSON escape that may decode to a surrogate (paired ones decode to one valid
# character; this only says the document is worth a look).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_TEXT = re.compile(r"\\u[dD][89a-fA-F]")


def valid(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (``text`` itself when none)."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub(REPLACEMENT, text)


def may_hold_surrogates(raw: bytes | str) -> bool:
    """Whether JSON text ``raw`` spells an escape that may decode to a surrogate."""
    if isinstance(raw, bytes):
        return b"\\u" in raw and _SURROGATE_ESCAPE.search(raw) is not None
    if "\\u" in raw and _SURROGATE_ESCAPE_TEXT.search(raw) is not None:
        return True
    # Text handed over already decoded may hold the characters themselves.
    return not raw.isascii() and _SURROGATE.search(raw) is not None


def repair(value: Any) -> tuple[Any, int]:
    """``value`` (as ``json.loads`` builds it) with every string made valid, and how many changed.

    Containers are repaired in place (they are fresh from the parser), without
    recursion, so any nesting the parser accepted is walked.
    """
    if isinstance(value, str):
        fixed = valid(value)
        return fixed, int(fixed is not value)
    if not isinstance(value, dict | list):
        return value, 0
    changed = 0
    stack: list[dict[Any, Any] | list[Any]] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            bad_keys = [k for k in node if isinstance(k, str) and valid(k) is not k]
            for key, item in node.items():
                if isinstance(item, str):
                    fixed = valid(item)
                    if fixed is not item:
                        node[key] = fixed
                        changed += 1
                elif isinstance(item, dict | list):
                    stack.append(item)
            for key in bad_keys:
                node[valid(key)] = node.pop(key)
                changed += 1
        else:
            for index, item in enumerate(node):
                if isinstance(item, str):
                    fixed = valid(item)
                    if fixed is not item:
                        node[index] = fixed
                        changed += 1
                elif isinstance(item, dict | list):
                    stack.append(item)
    return value, changed


def loads(text: str | bytes) -> Any:
    """``json.loads`` whose every string encodes (lone surrogates become U+FFFD)."""
    value = json.loads(text)
    if may_hold_surrogates(text):
        value, _ = repair(value)
    return value


# The longest untrusted value kept as a key of a per-value memory or shown in a warning.
MAX_KEPT_CHARS = 128


def clipped(text: str, limit: int = MAX_KEPT_CHARS) -> str:
    """``text`` cut to ``limit`` characters, the cut marked with ``…`` (``text`` when shorter).

    For untrusted values (agent and model names) that become keys of a bounded
    memory or appear in a warning: the count of such keys is capped where they
    are kept, their size here.
    """
    if len(text) <= limit:
        return text
    return text[: limit - 1] + "…"
