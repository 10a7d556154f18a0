"""grounded_numbers reads numbers as a reader would (class 5, last bullet).

Each row: an answer, the tool result that is the evidence, and the outcome.
A PASS row shows a form that is read as the number it means; the FAIL row
next to it shows the same form with a wrong number is caught, not skipped.
"""

from __future__ import annotations

import pytest

from sidecar.evaluate.checks import run_check
from sidecar.evaluate.checks.grounding import GroundedNumbers
from sidecar.model import Outcome, ToolCall, Transcript

PASS, FAIL, ERROR = Outcome.PASS, Outcome.FAIL, Outcome.ERROR
CHECK = GroundedNumbers(name="grounded", type="grounded_numbers")

CASES = [
    # thousands and decimal separators
    ("Total: 1,299.00", '{"total": 1299}', PASS, "us-thousands"),
    ("Total: 1,399.00", '{"total": 1299}', FAIL, "us-thousands-wrong"),
    ("Total: 1 299,00 €", '{"total": 1299}', PASS, "space-thousands-decimal-comma"),
    ("Total: 1 399,00 €", '{"total": 1299}', FAIL, "space-thousands-wrong"),
    ("Total: 1\u00a0299,00 €", '{"total": 1299}', PASS, "no-break-space-thousands"),
    ("Total: 1\u202f299,00 €", '{"total": 1299}', PASS, "narrow-no-break-space-thousands"),
    ("Total: 1\u2009299 kr", '{"total": 1299}', PASS, "thin-space-thousands"),
    ("Total: 1.299,00 €", '{"total": 1299}', PASS, "dot-thousands-decimal-comma"),
    ("Total: 1.399,00 €", '{"total": 1299}', FAIL, "dot-thousands-wrong"),
    ("Total: CHF 1'299.00", '{"total": 1299}', PASS, "apostrophe-thousands"),
    ("Total: CHF 1\u2019299.00", '{"total": 1299}', PASS, "typographic-apostrophe-thousands"),
    ("Price: 12,99 €", '{"price": 12.99}', PASS, "decimal-comma"),
    ("Price: 13,99 €", '{"price": 12.99}', FAIL, "decimal-comma-wrong"),
    ("Between 5,7 and more", '{"a": 5, "b": 7}', PASS, "comma-list-still-a-list"),
    ("It is 1,5 kg", '{"weight": 1.5}', PASS, "decimal-comma-one-digit"),
    # currency signs and codes
    ("Refund: $1,299", '{"amount": 1299}', PASS, "dollar-thousands"),
    ("Refund: USD 40", '{"amount": 40}', PASS, "currency-code-spaced"),
    ("Refund: USD40", '{"amount": 40}', PASS, "currency-code-glued"),
    ("Refund: EUR45", '{"amount": 40}', FAIL, "currency-code-glued-wrong"),
    ("Refund: 40.- Fr.", '{"amount": 40}', PASS, "swiss-dash"),
    ("Refund: 45.- Fr.", '{"amount": 40}', FAIL, "swiss-dash-wrong"),
    ("Refund: 40,- €", '{"amount": 40}', PASS, "german-dash"),
    # signs, scripts and widths
    ("Change: \u221240", '{"delta": -40}', PASS, "unicode-minus"),
    ("Change: \u221245", '{"delta": -40}', FAIL, "unicode-minus-wrong"),
    ("Total: \uff14\uff10 yen", '{"total": 40}', PASS, "full-width-digits"),
    ("Total: \uff14\uff15 yen", '{"total": 40}', FAIL, "full-width-digits-wrong"),
    ("Total: \uff11\uff0c\uff12\uff19\uff19", '{"total": 1299}', PASS, "full-width-comma"),
    ("Total: \u0664\u0660", '{"total": 40}', PASS, "arabic-indic-digits"),
    ("Total: \u096a\u096b", '{"total": 40}', FAIL, "devanagari-digits-wrong"),
    ("Total: 40", '{"total": "\uff14\uff10"}', PASS, "full-width-digits-in-evidence"),
    ("Total: 1299", "total 1 299,00 EUR", PASS, "spaced-form-in-evidence"),
    # abbreviated magnitudes: the precision written
    ("About 1.2k views", '{"views": 1234}', PASS, "k-rounds"),
    ("About 1.2k views", '{"views": 1299}', FAIL, "k-too-far"),
    ("Revenue: $5M", '{"revenue": 5000000}', PASS, "M-exact"),
    ("Revenue: $5M", '{"revenue": 5400000}', PASS, "M-within-precision"),
    ("Revenue: $6M", '{"revenue": 5400000}', FAIL, "M-too-far"),
    ("Revenue: 1.5 million", '{"revenue": 1500000}', PASS, "million-word"),
    ("Revenue: 2.5 million", '{"revenue": 1500000}', FAIL, "million-word-wrong"),
    ("Revenue: 3bn", '{"revenue_bn": 3}', PASS, "as-written-digits"),
    # still not numbers
    ("Order A123, flight HAT005, ORD-1234, the 2nd bag, 5pm", "{}", PASS, "ids-skipped"),
    ("Version 1.2.3 on 10.0.0.1", "{}", PASS, "dotted-runs-skipped"),
    # digits in a syntax no number rule reads: never a PASS
    ("Your refund is 5e3 dollars.", '{"amount": 40}', ERROR, "exponent-unreadable"),
    # (the exponent's own digits, read as a number, are not grounded either)
    ("Your refund is 1.5E+3 dollars.", '{"amount": 40}', FAIL, "exponent-signed-not-grounded"),
    ("Your refund is $1_000.", '{"amount": 40}', ERROR, "underscore-groups-unreadable"),
    ("Your refund is 0x3E8 credits.", '{"amount": 40}', ERROR, "hex-unreadable"),
    ("Refund 5e3 or 45 dollars.", '{"amount": 40}', FAIL, "unreadable-beside-ungrounded-fails"),
    ("Refund 5e3, we said 40.", '{"amount": 40}', ERROR, "unreadable-beside-grounded"),
    ("The tool says 5e3.", '{"amount": "5e3"}', PASS, "unreadable-written-as-in-evidence"),
    ("Order A-1001, code X5E3, item sku_1_2", "{}", PASS, "ids-with-digits-still-skipped"),
]


def transcript(answer: str, result: str) -> Transcript:
    return Transcript(
        trace_id="0af7651916cd43dd8448eb211c80319c",
        root_span_id="b7ad6b7169203331",
        user_input="Please help.",
        tool_calls=(ToolCall("lookup", arguments="{}", result=result),),
        answer=answer,
    )


@pytest.mark.parametrize(
    ("answer", "result", "outcome"),
    [pytest.param(a, r, o, id=i) for a, r, o, i in CASES],
)
def test_numbers_are_read_as_a_reader_reads_them(
    answer: str, result: str, outcome: Outcome
) -> None:
    found = run_check(CHECK, transcript(answer, result))
    assert found.outcome is outcome, found.detail


@pytest.mark.parametrize("form", ["5e3", "5E3", "2.5e+4", "7e-1", "10_000", "1_0", "0xFF", "0X1f"])
@pytest.mark.parametrize("around", ["{} dollars", "${}", "about {}.", "({})", "total: {}!"])
def test_an_unreadable_number_never_makes_the_grounding_check_pass(form: str, around: str) -> None:
    found = run_check(CHECK, transcript(around.format(form), '{"amount": 40}'))
    assert found.outcome is not PASS, found.detail
    if found.outcome is ERROR:
        assert f"cannot read the number {form}" in found.detail
    else:  # a signed exponent: its digits after the sign are read, and not grounded
        assert "ungrounded" in found.detail
