"""The planning fast paths give what the general paths give (issue 14, planning).

- ``grounded_numbers`` decides from the digit runs of the evidence when they
  ground every claim, and from the whole evidence otherwise: the finding is the
  one the whole evidence gives, for any answer and evidence;
- ``one_line`` keeps printable text without doubled or outer spaces as it is;
- ``answer_json_schema`` does not try text as JSON that json.loads refuses at
  its first character; ``required_tool_calls`` parses arguments only when an
  expected call lists some;
- ``compact_json`` encodes with one C encoder built once: the text is
  ``json.dumps``'s with the same options.
"""

from __future__ import annotations

import json
import random

import pytest

from sidecar.evaluate.checks import grounding
from sidecar.evaluate.checks._common import one_line
from sidecar.evaluate.checks.answer import _answer_json
from sidecar.evaluate.checks.grounding import GroundedNumbers, grounded_numbers
from sidecar.evaluate.checks.required import ExpectedCall, _actual, _Fit, _fit
from sidecar.evaluate.conventions.attributes import compact_json
from sidecar.model import Outcome, Transcript
from tests.builders import tool_call, transcript

_NUMBER_BITS = [
    "40",
    "40.00",
    "1,250.50",
    "1.299,00",
    "1 299,00",
    "1'299.00",
    "12,99",
    "5,7",
    "1.2k",
    "$5M",
    "3bn",
    "1.5 million",
    "12%",
    "0.12",
    "A123",
    "ORD-1234",
    "2nd",
    "1.2.3",
    "\\u0034\\u0030",
    "1e3",
    "1000",
    "1,2345",
    "-2.5",
    "４０",
    "USD 40",
    "1" * 40 + "k",
]
_WORDS = ["refund", "order", "total", "of", "is", "\n1. ", "about", ":", '"', "{", "}", "[", "]"]


def _text(rng: random.Random, size: int) -> str:
    return " ".join(rng.choice(_NUMBER_BITS + _WORDS) for _ in range(size))


def _finding(spec: GroundedNumbers, seen: Transcript, *, quick: bool) -> object:
    """The finding with or without the digit-run pass (the general path reads everything)."""
    evidence = grounding.Evidence(spec, quick=quick)
    for text in grounding._evidence_texts(seen):
        evidence.add(text)
    return evidence.ground(seen, lambda: grounding._uncaptured(seen))


def test_grounding_decides_as_the_whole_evidence_does() -> None:
    rng = random.Random(14)
    spec = GroundedNumbers(name="n", type="grounded_numbers", allow=[7.0])
    outcomes = set()
    for _ in range(1500):
        calls = [
            tool_call(
                "t",
                arguments=json.dumps({"n": _text(rng, 2)}) if rng.random() < 0.8 else None,
                result=_text(rng, rng.randint(0, 6)) if rng.random() < 0.9 else None,
            )
            for _ in range(rng.randint(0, 3))
        ]
        seen = transcript(
            *calls,
            answer=_text(rng, rng.randint(1, 5)),
            user_input=_text(rng, 3) if rng.random() < 0.8 else None,
        )
        finding = grounded_numbers(spec, seen)
        assert finding == _finding(spec, seen, quick=True) == _finding(spec, seen, quick=False)
        outcomes.add(finding.outcome)
    assert len(outcomes) == 3  # PASS, FAIL and ERROR were all reached


def test_digit_runs_of_the_evidence_ground_a_plain_amount() -> None:
    # The first pass: the digit runs of the evidence alone ground the amount.
    spec = GroundedNumbers(name="n", type="grounded_numbers")
    seen = transcript(tool_call("t", result='{"amount": 562.51}'), answer="Refunded $562.51.")
    evidence = grounding.Evidence(spec)
    evidence.add('{"amount": 562.51}')
    assert evidence.ground(seen, list).outcome is Outcome.PASS
    assert evidence.texts_read_in_full == 0  # the digit runs alone grounded it


def _value(rng: random.Random, depth: int) -> object:
    kind = rng.randrange(9 if depth < 4 else 6)
    match kind:
        case 0:
            return rng.choice([None, True, False])
        case 1:
            return rng.randint(-(10**30), 10**30)
        case 2:
            return rng.choice([0.1, -2.5e-300, 1e300, float("nan"), float("inf"), 3.0])
        case 3:
            return "".join(rng.choice('ab"\\\n\u2028é€𝄞\x00') for _ in range(rng.randint(0, 6)))
        case 4:
            return b"\x00\xffbytes"
        case 5:
            return rng.choice(["", "plain"])
        case 6 | 7:
            return [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
        case _:
            return {f"k{i}\u00e9": _value(rng, depth + 1) for i in range(rng.randint(0, 3))}


def test_compact_json_is_json_dumps() -> None:
    rng = random.Random(7)
    for _ in range(3000):
        value = _value(rng, 0)
        expected = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
        assert compact_json(value) == expected


@pytest.mark.parametrize("value", [10**5000, [10**5000]], ids=["huge-int", "huge-int-in-list"])
def test_compact_json_of_what_cannot_be_encoded_is_none(value: object) -> None:
    assert compact_json(value) is None


def test_compact_json_of_a_cycle_is_none() -> None:
    cycle: list[object] = []
    cycle.append(cycle)
    assert compact_json(cycle) is None


_LINE_BITS = ["a", " ", "  ", "\t", "\n", "\u00a0", "\u2028", "\x1c", "\x85", "é", "…", "x" * 50]


def test_one_line_is_split_and_join() -> None:
    rng = random.Random(3)
    for _ in range(5000):
        text = "".join(rng.choice(_LINE_BITS) for _ in range(rng.randint(0, 12)))
        flat = " ".join(text.split())
        expected = flat if len(flat) <= 240 else flat[:239] + "…"
        assert one_line(text) == expected


def _tried_as_json(text: str) -> bool:
    """What the answer check did before: every candidate goes to json.loads."""
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize(
    "text",
    [
        "",
        "  ",
        "\n",
        "Done.",
        " Done",
        "\x0b1",
        "\u00a01",
        "NaN",
        "Infinity",
        "-Infinity",
        "-1",
        "7",
        '"x"',
        "[1]",
        "{}",
        "true",
        "false",
        "null",
        " \t\r\n[1]",
        "tru",
        "$40",
        "+1",
        "٣",
    ],
)
def test_answers_refused_before_parsing_are_the_ones_json_refuses(text: str) -> None:
    ok, _ = _answer_json(text)
    assert ok == _tried_as_json(text)


def test_required_calls_without_expected_arguments_need_no_parsed_arguments() -> None:
    calls = [
        tool_call("lookup", arguments='{"id": 1}'),
        tool_call("lookup", arguments="not json"),
        tool_call("refund", arguments=None),
        tool_call("refund", arguments="[1]"),
    ]
    for expected in (ExpectedCall(name="lookup"), ExpectedCall(name="refund")):
        for call in calls:
            parsed, skipped = _actual(call), _actual(call, read_arguments=False)
            assert _fit(expected, parsed) is _fit(expected, skipped)
    with_arguments = ExpectedCall(name="lookup", arguments={"id": 1})
    assert _fit(with_arguments, _actual(calls[0])) is _Fit.YES
