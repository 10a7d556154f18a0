"""The cheap scans of ``grounded_numbers`` read what the plain scans read.

- the claim, evidence-form and unreadable-form patterns start with a digit
  lookahead: their matches are those of the patterns without it;
- the second evidence pass (number forms of several parts, scale words) is
  skipped only for a text where it cannot find a number the digit-run pass
  has not found.
"""

from __future__ import annotations

import re
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.evaluate.checks import grounding

_BITS = [
    "40",
    "40.00",
    "1,250.50",
    "1.299,00",
    "1 299,00",
    "1\u00a0299,00",
    "1'299.00",
    "1\u2019299.00",
    "12,99",
    "5,7",
    "1.2k",
    "$5M",
    "3bn",
    "2mn",
    "7B",
    "1.5 million",
    "2\tthousand",
    "4trillion",
    "12%",
    "A123",
    "ORD-1234",
    "2nd",
    "1.2.3",
    "1e3",
    "1_000",
    "0x1F",
    "1,2345",
    "-2.5",
    "\uff14\uff10",
    "\u0664\u0660",
    "USD 40",
    "EUR40",
]
_GLUE = [" ", "", ",", "'", ".", "-", "\n", "k", "M", " million", "x", "_", '"', ":"]

texts = st.lists(st.sampled_from(_BITS + _GLUE), max_size=14).map("".join)


def _without_anchor(pattern: re.Pattern[str]) -> re.Pattern[str]:
    assert pattern.pattern.startswith("(?=[0-9])")
    return re.compile(pattern.pattern.removeprefix("(?=[0-9])"), pattern.flags)


def _every_form(text: str) -> set[Decimal]:
    """What _add_text_numbers finds when it never skips the second pass."""
    found: set[Decimal] = set()
    folded = grounding._fold(text)
    for run in grounding._DIGIT_RUN.findall(folded):
        if (value := grounding._number(run)) is not None:
            found.add(value)
    for match in grounding._EVIDENCE_FORM.finditer(folded):
        readings = grounding._readings(match)
        for reading in readings:
            found.update(reading)
        scale = grounding._scale(match)
        if scale is not None:
            for reading in readings:
                if len(reading) == 1:
                    found.add(grounding._shifted(reading[0], scale))
    return found


@settings(max_examples=400, deadline=None)
@given(texts)
def test_anchored_patterns_match_as_unanchored(text: str) -> None:
    folded = grounding._fold(text)
    for pattern in (grounding._CLAIM, grounding._EVIDENCE_FORM, grounding._UNREADABLE):
        plain = _without_anchor(pattern)
        assert [m.group() for m in pattern.finditer(folded)] == [
            m.group() for m in plain.finditer(folded)
        ]


@settings(max_examples=600, deadline=None)
@given(texts)
def test_second_pass_skipped_only_when_it_adds_nothing(text: str) -> None:
    found: set[Decimal] = set()
    grounding._add_text_numbers(text, found)
    assert found == _every_form(text)


def test_the_skip_is_taken_and_multi_part_forms_still_read() -> None:
    # A text of plain digit runs only: the second pass finds nothing new.
    assert grounding._MULTI_PART.search("order A7544 amount 311.21") is None
    for text, expected in (
        ("1,250.50", Decimal("1250.50")),
        ("1 299,00", Decimal("1299.00")),
        ("1.2k", Decimal("1.2e3")),
        ("3 million", Decimal("3e6")),
        ("1'299.00", Decimal("1299.00")),
    ):
        found: set[Decimal] = set()
        grounding._add_text_numbers(text, found)
        assert expected in found, text
