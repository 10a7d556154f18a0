"""Bounds on untrusted values, checked before anything recurses into them.

Span content, tool results and answers are written by agents, users and web
pages. Nothing here trusts their shape:

- ``MAX_NESTING``: arrays and objects (OTLP kvlist/array values, JSON text)
  nested deeper than this are not read. A value that deep is *unreadable*:
  the field holding it is missing, so whatever needs it is ERROR, never PASS.
  The bound sits far below Python's recursion limit, so no reader, encoder or
  validator working on a readable value can raise ``RecursionError``.
- ``json_too_deep`` answers for JSON text without parsing it, in one linear
  scan that only runs when the text holds more brackets than the bound.
- ``value_depth`` measures an already-built value without recursion.

Integer ranges of the OTLP wire types are here too, so that decoders reject a
``1e400`` or a 5,000-digit timestamp by range, not by whatever a later
``int()`` or ``str()`` happens to raise (Python's int-string conversion limit,
``sys.set_int_max_str_digits``, depends on the process).
"""

from __future__ import annotations

import re

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "MAX_INT_DIGITS",
    "MAX_NESTING",
    "UINT64_MAX",
    "json_too_deep",
    "value_depth",
]

MAX_NESTING = 64

# isinstance with a tuple built once: a union in the call is built on every call (slower).
_SEQUENCE = (list, tuple)

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1
# Digits of the longest 64-bit integer, with room for a sign and leading zeros.
MAX_INT_DIGITS = 24

# A string (closed or running to the end of the text) or one bracket. Strings are
# matched whole so that brackets inside them do not count; both alternatives
# start with distinct characters and repeat possessively, so the scan is linear.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]++|\\.)*+"?|[\[\]{}]', re.DOTALL)


def json_too_deep(text: str, limit: int = MAX_NESTING) -> bool:
    """True when JSON ``text`` nests arrays and objects more than ``limit`` deep.

    Malformed text is measured as far as it goes; ``json.loads`` rejects it
    afterwards anyway.
    """
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth > limit:
                return True
        elif token in ("]", "}"):
            depth = max(0, depth - 1)
    return False


def value_depth(value: object, limit: int = MAX_NESTING) -> int:
    """Nesting depth of lists and dicts in ``value`` (a scalar is 0), counted up to ``limit + 1``.

    Iterative, so a value of any depth is measured without recursion; the
    count stops once it is past ``limit``. Level by level: each pass holds
    the children of the containers of the level above.
    """
    deepest = 0
    level: list[object] = [value]
    while level:
        below: list[object] = []
        nested = False
        for item in level:
            if isinstance(item, dict):
                below.extend(item.values())
            elif isinstance(item, _SEQUENCE):
                below.extend(item)
            else:
                continue
            nested = True
        if not nested:
            break
        deepest += 1
        if deepest > limit:
            break
        level = below
    return deepest
