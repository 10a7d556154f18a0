"""Redaction of content in the verdict and review records: one policy, pure functions.

A :class:`Redaction` says what happens to every free-text content field of
the records (:mod:`sidecar.wire.verdicts`, :mod:`sidecar.wire.reviews`):

- verdict record: ``raw_output`` (the judge's answer), each criterion's
  ``evidence`` and each check's ``detail`` (details may quote the answer,
  tool arguments or an error message);
- review record: the verdict above, and the transcript's ``user_input``,
  ``answer`` and each tool call's ``arguments``, ``result`` and ``error``.

Ids, names, outcomes, reasons (closed sets), provenance and the idempotency key
are never touched, so metrics, matching and de-duplication are unchanged.

``content`` is one of:

- ``keep``: the text stays, with each of ``patterns`` masked by a fixed token;
- ``hash``: the text becomes ``sha256:<first 16 hex digits>`` of it, so equal
  values still match without being readable;
- ``drop``: the field is left out (null, or absent where the record leaves
  nulls out), never an empty string that would read as "captured, empty".

Under ``hash`` and ``drop`` the record says so (``"redacted": "hash"``), so a
null there is not mistaken for "not captured". ``None`` (not captured) stays
``None`` in every mode.

Patterns, applied in the order given (RE2, linear time):

    email         ``name@example.org``                        -> ``[email]``
    card_number   13-19 digits, spaces or dashes between,
                  passing the Luhn check (so order numbers
                  of the same length stay)                    -> ``[card_number]``
    phone         an international number written with ``+``  -> ``[phone]``
    regex:<re>    any RE2 expression                          -> ``[redacted]``
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

import re2

from sidecar.evaluate.checks.schema import compile_linear


class Content(StrEnum):
    KEEP = "keep"
    HASH = "hash"
    DROP = "drop"


def luhn_valid(digits: str) -> bool:
    """The Luhn checksum of a string of decimal digits (payment card numbers pass it)."""
    total = 0
    for position, char in enumerate(reversed(digits)):
        n = int(char)
        if position % 2:
            n = n * 2 - 9 if n > 4 else n * 2
        total += n
    return total % 10 == 0


def _card_number(text: str) -> bool:
    digits = "".join(c for c in text if c.isdigit())
    return 13 <= len(digits) <= 19 and luhn_valid(digits)


@dataclass(frozen=True, slots=True)
class Masker:
    """Matches of ``regex`` become ``token`` when ``accept`` (if given) agrees."""

    name: str
    regex: re2._Regexp
    token: str
    accept: Callable[[str], bool] | None = None
    # A cheap test that is true of every text holding a match (else the regex is skipped).
    maybe: Callable[[str], bool] | None = None

    def apply(self, text: str) -> str:
        if self.maybe is not None and not self.maybe(text):
            return text
        accept = self.accept
        if accept is None:
            masked: str = self.regex.sub(self.token, text)
        else:
            masked = self.regex.sub(
                lambda m: self.token if accept(m.group(0)) else m.group(0), text
            )
        return masked


# Thirteen digits with at most single spaces or dashes between: in every card number
# match. (Python's \d also takes non-ASCII digits, RE2's only 0-9: a superset, as a
# prefilter must be. Each start position tries at most 26 steps: linear.)
_DIGITS = re.compile(r"\d(?:[ -]?\d){12}")


def _has_at(text: str) -> bool:
    return "@" in text


def _has_digits(text: str) -> bool:
    return _DIGITS.search(text) is not None


def _has_plus(text: str) -> bool:
    return "+" in text


# Prefilters of the built-ins (RE2 calls cost far more than these on short texts).
_MAYBE: dict[str, Callable[[str], bool]] = {
    "email": _has_at,
    "card_number": _has_digits,
    "phone": _has_plus,
}

# (pattern, token, accept) for each built-in name.
_BUILT_IN: dict[str, tuple[str, str, Callable[[str], bool] | None]] = {
    "email": (
        r"[A-Za-z0-9._%+-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
        r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,}",
        "[email]",
        None,
    ),
    # 13-19 digits with single spaces or dashes between, on word boundaries (so
    # not inside a longer unbroken number); Luhn is checked on the digits matched.
    "card_number": (r"\b\d(?:[ -]?\d){12,18}\b", "[card_number]", _card_number),
    "phone": (r"\+\d(?:[ .()-]{0,2}\d){6,14}\b", "[phone]", None),
}
BUILT_IN_PATTERNS = tuple(_BUILT_IN)
CUSTOM_PREFIX = "regex:"


class PatternError(ValueError):
    """A pattern name that is neither built in nor a valid ``regex:`` expression."""


def masker(pattern: str) -> Masker:
    """The masker for one entry of ``patterns``; PatternError says why it is refused."""
    if pattern.startswith(CUSTOM_PREFIX):
        expression = pattern[len(CUSTOM_PREFIX) :]
        if not expression:
            raise PatternError(f"{pattern!r}: empty regular expression")
        try:
            return Masker(pattern, compile_linear(expression), "[redacted]")
        except re.error as exc:
            raise PatternError(f"{pattern!r}: {exc}") from exc
    if pattern not in _BUILT_IN:
        known = ", ".join(BUILT_IN_PATTERNS)
        raise PatternError(f"unknown pattern {pattern!r}; use one of {known} or regex:<RE2>")
    expression, token, accept = _BUILT_IN[pattern]
    return Masker(pattern, compile_linear(expression), token, accept, _MAYBE[pattern])


def content_hash(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Redaction:
    """What to do with content fields; :meth:`text` applies it to one value."""

    content: Content = Content.KEEP
    maskers: tuple[Masker, ...] = ()

    @classmethod
    def build(cls, content: str | Content, patterns: Iterable[str]) -> Redaction:
        return cls(Content(content), tuple(masker(p) for p in patterns))

    @property
    def marker(self) -> str | None:
        """The record's ``redacted`` field: the mode when content was hashed or dropped."""
        return None if self.content is Content.KEEP else self.content.value

    def text(self, value: str | None) -> str | None:
        if value is None:
            return None
        match self.content:
            case Content.DROP:
                return None
            case Content.HASH:
                return content_hash(value)
            case Content.KEEP:
                for m in self.maskers:
                    value = m.apply(value)
                return value


DEFAULT_PATTERNS = ("email", "card_number")
NO_REDACTION = Redaction()
DEFAULT_REDACTION = Redaction.build(Content.KEEP, DEFAULT_PATTERNS)
