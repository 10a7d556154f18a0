"""grounded_numbers: every number the agent states comes from its evidence.

What counts as a number *in the answer* (a claim to be grounded):

- digit runs with an optional decimal part, ``40``, ``40.00``, ``-2.5``, or with
  comma thousands separators, ``1,250.50`` (US/UK notation only);
- currency signs and a leading minus are ignored and magnitudes compared, so
  ``$40``, ``-40`` and ``40.00`` are all 40 (a refund is often recorded as a
  negative amount and told as a positive one);
- a percentage ``12%`` is grounded by 12 or by 0.12;
- numbers glued to a letter or underscore, directly or through one hyphen,
  are part of a word, not a quantity, and are skipped: ids such as ``A123``,
  ``HAT005``, ``ORD-1234``, ordinals such as ``2nd`` and ``20th``, and units
  written together such as ``5pm`` or ``24-hour``;
- dotted runs with more than one dot (versions, IP addresses) are skipped;
- list markers at the start of a line (``1.``, ``2)``) are numbering, not claims;
- dates and times are not special: ``2024-05-20`` is 2024, 5 and 20, and is
  grounded when those numbers appear in the evidence, in whatever format.

The evidence is every tool result, every tool call's arguments and the user
input. It is read generously: JSON numbers (including exponent notation) and
every digit run in any text, ids included, so ``card ending in 7815`` is
grounded by ``credit_card_7815``. A gate that fails on a true statement costs
more than one that lets a rare coincidence through.

Numbers in ``allow`` are always grounded. Comparison is exact in decimal
(``40 == 40.00``, ``1,250.50 == 1250.5``); no rounding is accepted.

When a number cannot be grounded and some evidence was not captured (a tool
result, arguments or the user input is missing), the check is ERROR, not
FAIL: the number may be in what was not captured.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from decimal import Decimal
from typing import Literal

from pydantic import Field

from sidecar.checks._common import Finding, errored, failed, passed, plural
from sidecar.checks.base import CheckConfig, CheckType
from sidecar.model import Outcome, Transcript


class GroundedNumbers(CheckConfig):
    type: Literal["grounded_numbers"]
    # Numbers that may always appear (e.g. a support phone number's digits).
    allow: list[float] = Field(default_factory=list)


_WORD_CHAR = r"[^\W\d]"  # a letter (any script) or underscore

_CLAIM = re.compile(
    rf"(?<![\w.])(?<!{_WORD_CHAR}-)"
    # Atomic, so a number glued to a word is skipped whole, never cut to a prefix.
    r"(?P<number>(?>[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?|[0-9]+(?:\.[0-9]+)?))"
    rf"(?!\w)(?!-{_WORD_CHAR})(?!\.[0-9])"
    r"(?P<percent>[ \t]?%)?"
)

_LIST_MARKER = re.compile(r"^[ \t]*[0-9]{1,3}[.)](?=[ \t])", re.MULTILINE)

_EVIDENCE = re.compile(r"[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?|[0-9]+(?:\.[0-9]+)?")

_HUNDRED = Decimal(100)


def _decimal(text: str) -> Decimal:
    return abs(Decimal(text.replace(",", "")))


def _add_text_numbers(text: str, found: set[Decimal]) -> None:
    for number in _EVIDENCE.findall(text):
        found.add(_decimal(number))
        if "," in number:
            # "1,234" may also be a list of two numbers.
            found.update(_decimal(part) for part in number.split(",") if part)


def _add_json_numbers(value: object, found: set[Decimal]) -> None:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int):
        found.add(abs(Decimal(value)))
    elif isinstance(value, Decimal):
        if value.is_finite():
            found.add(abs(value))
    elif isinstance(value, str):
        _add_text_numbers(value, found)
    elif isinstance(value, list):
        for item in value:
            _add_json_numbers(item, found)
    elif isinstance(value, dict):
        for key, item in value.items():
            _add_text_numbers(key, found)
            _add_json_numbers(item, found)


# json.loads(text, parse_float=Decimal, parse_constant=...) without building a
# decoder for every text.
_JSON = json.JSONDecoder(parse_float=Decimal, parse_constant=lambda _: None)


# Only these can hide a number of a JSON document from a digit run of its text:
# escapes in strings, exponents, and items packed as "1,2345" (read as 1,234 and
# 5). Without them, reading the text as JSON finds nothing new.
_JSON_MAY_ADD = re.compile(r"\\|[0-9][eE]|[0-9],[0-9]")


def _evidence_numbers(texts: Iterable[str]) -> set[Decimal]:
    found: set[Decimal] = set()
    for text in texts:
        _add_text_numbers(text, found)
        if _JSON_MAY_ADD.search(text) is None:
            continue
        try:
            document = _JSON.decode(text)
        except (ValueError, RecursionError):
            continue
        _add_json_numbers(document, found)
    return found


def _uncaptured(transcript: Transcript) -> list[str]:
    missing: list[str] = []
    calls = transcript.tool_calls
    # A call that failed has no result by nature; only a silent gap is missing evidence.
    if any(c.result is None and c.error is None for c in calls):
        missing.append("tool results")
    if any(c.arguments is None for c in calls):
        missing.append("tool arguments")
    if transcript.user_input is None:
        missing.append("user input")
    return missing


def grounded_numbers(spec: GroundedNumbers, transcript: Transcript) -> Finding:
    answer = transcript.answer
    if answer is None:
        return errored("answer not captured")
    claims = list(_CLAIM.finditer(_LIST_MARKER.sub("", answer)))
    if not claims:
        return passed("no numbers in answer")

    texts: list[str] = []
    for call in transcript.tool_calls:
        texts.extend(t for t in (call.result, call.arguments) if t is not None)
    if transcript.user_input is not None:
        texts.append(transcript.user_input)
    known = _evidence_numbers(texts)
    known.update(abs(Decimal(repr(n))) for n in spec.allow)

    ungrounded: list[str] = []
    for claim in claims:
        value = _decimal(claim.group("number"))
        if value in known or (claim.group("percent") and value / _HUNDRED in known):
            continue
        ungrounded.append(claim.group().replace(" ", ""))
    if not ungrounded:
        return passed(f"{plural(len(claims), 'number')} grounded")

    shown = ", ".join(dict.fromkeys(ungrounded))
    missing = _uncaptured(transcript)
    if missing:
        return errored(f"{' and '.join(missing)} not captured; cannot ground {shown}")
    return failed(f"ungrounded {shown} (not in tool results, arguments or input)")


# The evidence for a number may be in a tool result a truncated trace lost.
GROUNDED_NUMBERS = CheckType(
    GroundedNumbers, grounded_numbers, inconclusive_if_truncated=Outcome.FAIL
)
