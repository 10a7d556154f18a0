"""grounded_numbers: every number the agent states comes from its evidence.

What counts as a number *in the answer* (a claim to be grounded), read as a
reader would read it:

- digit runs with an optional decimal part, ``40``, ``40.00``, ``-2.5``;
- thousands written with commas ``1,250.50``, spaces (also non-breaking and
  narrow ones) ``1 299,00``, dots before a decimal comma ``1.299,00`` or
  apostrophes ``1'299.00``; a decimal comma ``12,99``. Where a form has
  two readings each is tried (``1,299`` is 1299 or 1.299 or the list 1 and
  299; ``5,7`` is 5.7 or 5 and 7), and the claim is grounded when one of them is;
- digits of any script and full-width forms (``４０``, ``٤٠``) are digits;
  a Unicode minus is a minus;
- currency signs, currency codes (``USD 40``, ``EUR40``) and a leading minus
  are ignored and magnitudes compared, so ``$40``, ``-40``, ``40.-`` and
  ``40.00`` are all 40 (a refund is often recorded as a negative amount and
  told as a positive one);
- a percentage ``12%`` is grounded by 12 or by 0.12;
- an abbreviated magnitude, ``1.2k``, ``$5M``, ``3bn``, ``1.5 million``, is
  grounded by its digits as written (5) or by an evidence number that rounds
  to it at the precision written (1.2k: 1150 to 1250);
- numbers glued to a letter or underscore, directly or through one hyphen,
  are part of a word, not a quantity, and are skipped: ids such as ``A123``,
  ``HAT005``, ``ORD-1234``, ordinals such as ``2nd`` and ``20th``, and units
  written together such as ``5pm`` or ``24-hour``;
- dotted runs with more than one dot (versions, IP addresses) are skipped;
- list markers at the start of a line (``1.``, ``2)``) are numbering, not claims;
- dates and times are not special: ``2024-05-20`` is 2024, 5 and 20, and is
  grounded when those numbers appear in the evidence, in whatever format.

The evidence is every tool result, every tool call's arguments and the user
input. It is read generously: JSON numbers (including exponent notation),
every digit run in any text, ids included, so ``card ending in 7815`` is
grounded by ``credit_card_7815``, and every reading of the forms above. A
gate that fails on a true statement costs more than one that lets a rare
coincidence through.

Numbers in ``allow`` are always grounded. Comparison is exact in decimal
(``40 == 40.00``, ``1,250.50 == 1250.5``); no rounding is accepted except
the precision an abbreviated magnitude states.

A number in the evidence that cannot be read (``1e999999999``, a JSON
document nested too deeply) grounds nothing and spoils nothing: the answer's
numbers are still decided against the rest.

When a number cannot be grounded and some evidence was not captured (a tool
result, arguments or the user input is missing), the check is ERROR, not
FAIL: the number may be in what was not captured. When the answer is unknown
because the trace's root never arrived, the check is ERROR and says so.
"""

from __future__ import annotations

import bisect
import decimal
import json
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

from pydantic import Field

from sidecar.bounds import json_too_deep
from sidecar.evaluate.checks._common import Finding, errored, failed, no_answer, passed, plural
from sidecar.evaluate.checks.base import CheckConfig, CheckType, Part
from sidecar.model import Captured, Flag, Outcome, Transcript


class GroundedNumbers(CheckConfig):
    type: Literal["grounded_numbers"]
    # Numbers that may always appear (e.g. a support phone number's digits).
    allow: list[float] = Field(default_factory=list)


# --- folding: what a reader sees as the same characters ---------------------------------


class _Fold(dict[int, int]):
    """``str.translate`` table, filled on first sight of each character.

    Digits of any script become ASCII digits, full-width ASCII becomes ASCII,
    every space separator a plain space, the Unicode minus and the right single
    quotation mark their ASCII forms. One character stays one character.
    """

    def __missing__(self, code: int) -> int:
        char = chr(code)
        folded = code
        if 0xFF01 <= code <= 0xFF5E:
            folded = code - 0xFEE0
        elif char.isdigit() and unicodedata.decimal(char, None) is not None:
            folded = ord("0") + unicodedata.decimal(char)
        elif unicodedata.category(char) == "Zs":
            folded = ord(" ")
        elif char == "\u2212":
            folded = ord("-")
        elif char == "\u2019":
            folded = ord("'")
        self[code] = folded
        return folded


_FOLD = _Fold()


def _fold(text: str) -> str:
    return text if text.isascii() else text.translate(_FOLD)


# --- reading numbers ------------------------------------------------------------------

_WORD_CHAR = r"[^\W\d]"  # a letter (any script) or underscore

_CURRENCY_CODES = (
    "USD|EUR|GBP|CHF|JPY|CAD|AUD|NZD|CNY|HKD|SGD|INR|SEK|NOK|DKK|PLN|CZK|BRL|MXN|ZAR|KRW|TRY"
)

# Alternatives tried in order (the group is atomic: a number glued to a word is
# skipped whole, never cut to a prefix). Each alternative is named by its form.
_NUMBER = (
    r"(?>"
    r"(?P<us>[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?)"
    r"|(?P<eu>[0-9]{1,3}(?:\.[0-9]{3})+,[0-9]+)"
    r"|(?P<spaced>[0-9]{1,3}(?: [0-9]{3})+(?:[.,][0-9]+)?)"
    r"|(?P<swiss>[0-9]{1,3}(?:'[0-9]{3})+(?:\.[0-9]+)?)"
    r"|(?P<comma>[0-9]+,[0-9]{1,2})"
    r"|(?P<plain>[0-9]+(?:\.[0-9]+)?)"
    r")"
)

_SCALE_WORDS = {"thousand": 3, "million": 6, "billion": 9, "trillion": 12}
_SCALE_GLUED = {"k": 3, "K": 3, "M": 6, "mn": 6, "B": 9, "bn": 9}

# Every form starts with a digit: the leading lookahead lets the scan skip to the
# next digit instead of trying the lookbehinds at every position (same matches).
_CLAIM = re.compile(
    # Not part of a word or a dotted run; a currency code right before is fine.
    r"(?=[0-9])"
    rf"(?:(?<![\w.])(?<!{_WORD_CHAR}-)|(?<=(?<![A-Za-z])(?:{_CURRENCY_CODES})))"
    + _NUMBER
    + r"(?:(?P<glued>k|K|M|mn|B|bn)|[ \t]?(?P<word>thousand|million|billion|trillion))?"
    rf"(?!\w)(?!-{_WORD_CHAR})(?![.,'][0-9])"
    r"(?P<percent>[ \t]?%)?"
)

# Digits written in a number syntax no rule above reads: exponent notation (5e3,
# 1.5E+6), underscore groups (1_000), hexadecimal (0x1F). _CLAIM skips them (a digit
# glued to a letter or an underscore is part of a word), so they could hide an
# ungrounded amount; the check reports them unreadable instead of passing.
_UNREADABLE = re.compile(
    r"(?=[0-9])(?<![\w.])(?:[0-9]+(?:\.[0-9]+)?[eE][+-]?[0-9]+|[0-9]+(?:_[0-9]+)+|0[xX][0-9A-Fa-f]+)"
    r"(?![\w])"
)

_LIST_MARKER = re.compile(r"^[ \t]*[0-9]{1,3}[.)](?=[ \t])", re.MULTILINE)

# Every digit run in evidence, whatever surrounds it.
_DIGIT_RUN = re.compile(r"[0-9]+(?:\.[0-9]+)?")
# The forms of _NUMBER in evidence, also inside words and ids.
_EVIDENCE_FORM = re.compile(
    r"(?=[0-9])"  # the atomic group hides its first character from the scanner
    + _NUMBER
    + r"(?:(?P<glued>k|K|M|mn|B|bn)|[ \t]?(?P<word>thousand|million|billion|trillion))?"
)
# What _EVIDENCE_FORM can read that _DIGIT_RUN does not: a digit followed by a group
# separator and a digit (the us, eu, spaced, swiss and comma forms) or by a scale.
# Without it every _EVIDENCE_FORM match is a plain digit run, whose one reading the
# digit-run pass has already found: the second pass is skipped.
_MULTI_PART = re.compile(
    r"[0-9](?:[, '][0-9]|[kKMB]|mn|bn|[ \t]?(?:thousand|million|billion|trillion))"
)

_HUNDRED_SCALE = -2


def _number(text: str) -> Decimal | None:
    """The magnitude written as ``text`` (digits, one optional ``.``); None if unreadable."""
    try:
        return Decimal(text).copy_abs()
    except (ArithmeticError, ValueError):
        return None


def _shifted(value: Decimal, places: int) -> Decimal:
    """``value * 10**places``, exactly (no context, so no rounding or overflow)."""
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):  # infinity or NaN never reach here; be safe
        return value
    return Decimal((sign, digits, exponent + places))


@dataclass(frozen=True, slots=True)
class _Claim:
    """One number of the answer: as written, and the readings that would ground it.

    ``readings``: each is a tuple of values that must all be known (a list such
    as ``5,7`` needs both). ``scaled``: for abbreviated magnitudes, the value
    written and the power of ten it stands for.
    """

    shown: str
    readings: tuple[tuple[Decimal, ...], ...]
    percent: bool = False
    scaled: tuple[Decimal, int] | None = None


def _readings(match: re.Match[str]) -> tuple[tuple[Decimal, ...], ...]:
    """Every reading of the number in ``match`` (alternatives of _NUMBER)."""
    form = _form(match)
    return _readings_of(form, match.group(form))


def _readings_of(form: str, text: str) -> tuple[tuple[Decimal, ...], ...]:
    candidates: list[tuple[str, ...]]
    match form:
        case "us":
            whole = text.replace(",", "")
            candidates = [(whole,), tuple(text.split(","))]
            if "." not in text and text.count(",") == 1:
                candidates.append((text.replace(",", "."),))
        case "eu":
            candidates = [(text.replace(".", "").replace(",", "."),)]
        case "spaced":
            head, _, tail = text.replace(" ", "").rpartition(",")
            joined = f"{head}.{tail}" if head else tail
            candidates = [(joined,), tuple(re.split(r"[ ,]", text))]
        case "swiss":
            candidates = [(text.replace("'", ""),)]
        case "comma":
            candidates = [(text.replace(",", "."),), tuple(text.split(","))]
        case _:
            candidates = [(text,)]
    readings: list[tuple[Decimal, ...]] = []
    for parts in candidates:
        values = tuple(_number(p) for p in parts if p)
        if values and all(v is not None for v in values):
            readings.append(tuple(v for v in values if v is not None))
    return tuple(dict.fromkeys(readings))


_FORMS = ("us", "eu", "spaced", "swiss", "comma", "plain")


def _form(match: re.Match[str]) -> str:
    groups = match.group(*_FORMS)
    return next(name for name, group in zip(_FORMS, groups, strict=True) if group is not None)


def _scale(match: re.Match[str]) -> int | None:
    if match.group("glued"):
        return _SCALE_GLUED[match.group("glued")]
    if match.group("word"):
        return _SCALE_WORDS[match.group("word")]
    return None


def _claims(answer: str) -> list[_Claim]:
    claims: list[_Claim] = []
    for match in _CLAIM.finditer(_LIST_MARKER.sub("", _fold(answer))):
        readings = _readings(match)
        if not readings:
            continue
        scale = _scale(match)
        scaled = None
        if scale is not None and len(readings[0]) == 1:
            scaled = (readings[0][0], scale)
        claims.append(
            _Claim(
                shown=match.group().replace(" ", "").replace("\t", ""),
                readings=readings,
                percent=bool(match.group("percent")),
                scaled=scaled,
            )
        )
    return claims


# --- the evidence -----------------------------------------------------------------------


def _add_text_numbers(text: str, found: set[Decimal]) -> None:
    text = _fold(text)
    # Each distinct run once: a set keeps one of equal numbers anyway.
    for run in set(_DIGIT_RUN.findall(text)):
        if (value := _number(run)) is not None:
            found.add(value)
    if _MULTI_PART.search(text) is None:
        return
    for match in _EVIDENCE_FORM.finditer(text):
        readings = _readings(match)
        for reading in readings:
            found.update(reading)
        scale = _scale(match)
        if scale is not None:
            for reading in readings:
                if len(reading) == 1:
                    found.add(_shifted(reading[0], scale))


def _add_json_numbers(document: object, found: set[Decimal]) -> None:
    # Iterative: the document's depth is bounded, but need not be trusted here.
    stack: list[object] = [document]
    while stack:
        value = stack.pop()
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, Decimal):
            if value.is_finite():
                found.add(value.copy_abs())
        elif isinstance(value, int):
            found.add(Decimal(value).copy_abs())
        elif isinstance(value, str):
            _add_text_numbers(value, found)
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, dict):
            for key, item in value.items():
                _add_text_numbers(key, found)
                stack.append(item)


# json.loads(text, parse_float=Decimal, parse_int=Decimal, parse_constant=...) without
# building a decoder for every text. Decimal has no digit limit and takes any exponent.
_JSON = json.JSONDecoder(parse_float=Decimal, parse_int=Decimal, parse_constant=lambda _: None)


# Only these can hide a number of a JSON document from a digit run of its text:
# escapes in strings, exponents, and items packed as "1,2345" (read as 1,234 and
# 5). Without them, reading the text as JSON finds nothing new.
_JSON_MAY_ADD = re.compile(r"\\|[0-9][eE]|[0-9],[0-9]")


def _all_grounded(claims: Iterable[_Claim], known: _Known) -> bool:
    """Every claim grounded by ``known``; False when deciding it raised (the full path decides)."""
    try:
        return all(_grounded(claim, known) for claim in claims)
    except ArithmeticError:
        return False


def _add_evidence_numbers(text: str, found: set[Decimal]) -> None:
    """Every number of ``text``: each reading of its number forms, and its JSON numbers."""
    _add_text_numbers(text, found)
    if _JSON_MAY_ADD.search(text) is None or json_too_deep(text):
        return
    try:
        document = _JSON.decode(text)
    except (ValueError, RecursionError, ArithmeticError):
        return
    _add_json_numbers(document, found)


class _Known:
    """Evidence numbers that only grow: exact membership, and ranges for abbreviated magnitudes.

    For ranges the numbers are kept in sorted runs whose sizes at least double
    from the newest to the oldest (new numbers are sorted into a run when a
    range is next asked for, and equal-sized runs merged), so each number is
    merged O(log n) times and a range is found by bisecting each run: a
    conversation's growing evidence is never sorted again per turn.
    """

    def __init__(self, numbers: Iterable[Decimal] = ()) -> None:
        self._set: set[Decimal] = set()
        self._runs: list[list[Decimal]] = []
        self._new: list[Decimal] = []
        self.update(numbers)

    def update(self, numbers: Iterable[Decimal]) -> None:
        for value in numbers:
            if value not in self._set:
                self._set.add(value)
                self._new.append(value)

    def __contains__(self, value: Decimal) -> bool:
        return value in self._set

    def any_within(self, low: Decimal, high: Decimal) -> bool:
        if self._new:
            run = sorted(self._new)
            self._new = []
            while self._runs and len(self._runs[-1]) <= 2 * len(run):
                run = sorted(self._runs.pop() + run)  # two sorted runs: one linear merge
            self._runs.append(run)
        for run in self._runs:
            index = bisect.bisect_left(run, low)
            if index < len(run) and run[index] <= high:
                return True
        return False


def _grounded(claim: _Claim, known: _Known) -> bool:
    for reading in claim.readings:
        if all(v in known for v in reading):
            return True
        if claim.percent and len(reading) == 1 and _shifted(reading[0], _HUNDRED_SCALE) in known:
            return True
    if claim.scaled is not None:
        value, scale = claim.scaled
        exponent = value.as_tuple().exponent
        if isinstance(exponent, int):
            # Half a unit of the last digit written, at the scale the word gives.
            half = Decimal((0, (5,), exponent - 1 + scale))
            centre = _shifted(value, scale)
            with decimal.localcontext() as context:
                context.prec = max(28, len(value.as_tuple().digits) + 4)
                context.traps[decimal.Inexact] = False
                return known.any_within(centre - half, centre + half)
    return False


def _uncaptured(transcript: Transcript) -> list[str]:
    calls = transcript.tool_calls
    # A call that failed has no result by nature; only a silent gap is missing evidence.
    return _gaps(
        transcript,
        results_missing=any(c.result is None and c.error is None for c in calls),
        arguments_missing=any(c.arguments is None for c in calls),
    )


def _gaps(transcript: Transcript, *, results_missing: bool, arguments_missing: bool) -> list[str]:
    """The evidence not captured, by name: tool results or arguments, this input, tool calls."""
    missing: list[str] = []
    if results_missing:
        missing.append("tool results")
    if arguments_missing:
        missing.append("tool arguments")
    if transcript.user_input is None:
        missing.append("user input")
    if transcript.capture.tool_calls in (Captured.NOT_CAPTURED, Captured.UNREADABLE):
        missing.append("tool calls")
    return missing


class Evidence:
    """What answers are grounded in, read once per text as it is added.

    Each text added is folded and its digit runs and unreadable number forms
    (``5e3``, ``1_000``, ``0xFF``) read at once; the full reading (every form,
    JSON numbers) is done for a text only when some answer needs it, and then
    once. Evidence only grows, so a conversation adds each turn's texts and
    grounds each turn's answer against all so far at a cost linear in the
    conversation's size. ``texts_read`` and ``texts_read_in_full`` count the
    reads (tests use them to show the work is linear).
    """

    # The digit-run pass first (``quick``); off, every answer is read against the whole.
    QUICK = True

    def __init__(self, spec: GroundedNumbers, *, quick: bool | None = None) -> None:
        self.quick = self.QUICK if quick is None else quick
        allowed = list(_allowed(spec.allow))
        self._runs = _Known(allowed)  # digit runs of every text: a subset of the whole
        self._whole = _Known(allowed)  # every reading of the texts read in full
        self._forms: set[str] = set()
        self._pending: list[str] = []
        self.texts_read = 0
        self.texts_read_in_full = 0

    def add(self, text: str) -> None:
        folded = _fold(text)
        # Each distinct run once: a set keeps one of equal numbers anyway.
        self._runs.update(
            value for run in set(_DIGIT_RUN.findall(folded)) if (value := _number(run)) is not None
        )
        self._forms.update(_UNREADABLE.findall(folded))
        self._pending.append(text)
        self.texts_read += 1

    def _read_in_full(self) -> _Known:
        found: set[Decimal] = set()
        for text in self._pending:
            _add_evidence_numbers(text, found)
        self.texts_read_in_full += len(self._pending)
        self._pending = []
        self._whole.update(found)
        return self._whole

    def ground(self, transcript: Transcript, missing: Callable[[], list[str]]) -> Finding:
        """``transcript``'s answer against the evidence so far; ``missing`` names what was lost."""
        answer = transcript.answer
        if answer is None:
            return no_answer(transcript)
        finding = self._ground(_claims(answer), transcript, missing)
        if finding.outcome is Outcome.PASS:
            # Only a PASS can be wrong for want of reading a number; a FAIL stands.
            unreadable = [f for f in _UNREADABLE.findall(_fold(answer)) if f not in self._forms]
            if unreadable:  # a form written the same way in the evidence is grounded
                shown = ", ".join(dict.fromkeys(unreadable))
                return errored(f"cannot read the number {shown} in the answer; cannot ground it")
        return finding

    def _ground(
        self, claims: list[_Claim], transcript: Transcript, missing: Callable[[], list[str]]
    ) -> Finding:
        if not claims:
            return passed("no numbers in answer")
        # Grounding only grows with the evidence, and the digit runs of the texts are
        # part of it: when they ground every claim, so does the whole evidence.
        if self.quick and _all_grounded(claims, self._runs):
            return passed(f"{plural(len(claims), 'number')} grounded")
        known = self._read_in_full()
        ungrounded = [claim.shown for claim in claims if not _grounded(claim, known)]
        if not ungrounded:
            return passed(f"{plural(len(claims), 'number')} grounded")

        shown = ", ".join(dict.fromkeys(ungrounded))
        lost = missing()
        if lost and transcript.capture.unreadable_fields:
            note = transcript.capture.unreadable_note
            return errored(f"{' and '.join(lost)} {note}; cannot ground {shown}")
        if lost:
            unread = " or unreadable" if Flag.UNREADABLE_VALUES in transcript.flags else ""
            advice = f"; {transcript.capture.advice}" if transcript.capture.advice else ""
            return errored(
                f"{' and '.join(lost)} not captured{unread}; cannot ground {shown}{advice}"
            )
        return failed(f"ungrounded {shown} (not in tool results, arguments or input)")


def grounded_numbers(spec: GroundedNumbers, transcript: Transcript) -> Finding:
    evidence = Evidence(spec)
    for text in _evidence_texts(transcript):
        evidence.add(text)
    return evidence.ground(transcript, lambda: _uncaptured(transcript))


def _evidence_texts(transcript: Transcript) -> list[str]:
    """What an answer's numbers may come from: tool results and arguments, the input."""
    texts: list[str] = []
    for call in transcript.tool_calls:
        texts.extend(t for t in (call.result, call.arguments) if t is not None)
    if transcript.user_input is not None:
        texts.append(transcript.user_input)
    return texts


class TurnGrounding:
    """``grounded_numbers`` over a conversation's turns in order, each turn read once.

    Turn *k*'s answer is grounded in the tool calls (results and arguments) of
    turns 1..k and the inputs of turns 1..k, as if they were one trace's: an
    earlier input that was not captured counts as a missing tool result, turn
    *k*'s own as a missing user input.
    """

    def __init__(self, spec: GroundedNumbers) -> None:
        self.evidence = Evidence(spec)
        self._results_missing = False
        self._arguments_missing = False

    def turn(self, turn: Transcript) -> Finding:
        """Turn ``turn``'s finding; call once per turn, in order."""
        for call in turn.tool_calls:
            for text in (call.result, call.arguments):
                if text is not None:
                    self.evidence.add(text)
            self._results_missing |= call.result is None and call.error is None
            self._arguments_missing |= call.arguments is None
        if turn.user_input is not None:
            self.evidence.add(turn.user_input)
        try:
            return self.evidence.ground(
                turn,
                lambda: _gaps(
                    turn,
                    results_missing=self._results_missing,
                    arguments_missing=self._arguments_missing,
                ),
            )
        finally:
            # For the later turns this input is an earlier turn's: a missing tool result.
            self._results_missing |= turn.user_input is None


def _allowed(allow: Iterable[float]) -> Iterator[Decimal]:
    for number in allow:
        if (value := _number(repr(number))) is not None and value.is_finite():
            yield value


# The evidence for a number may be in a tool result a truncated trace lost.
GROUNDED_NUMBERS = CheckType(
    GroundedNumbers,
    grounded_numbers,
    inconclusive_if_truncated=Outcome.FAIL,
    about_tools=False,
    # The answer, its evidence (tool calls, the input) and what of it was not captured.
    reads=frozenset({Part.ANSWER, Part.USER_INPUT, Part.TOOL_CALLS, Part.CAPTURE, Part.FLAGS}),
)
