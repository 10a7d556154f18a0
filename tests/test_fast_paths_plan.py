"""The planning fast paths give what the general paths give (issue 14, planning).

- ``grounded_numbers`` decides from the digit runs of the evidence when they
  ground every claim, and from the whole evidence otherwise: the finding is the
  one the whole evidence gives, for any answer and evidence;
- ``compact_json`` encodes with one C encoder built once: the text is
  ``json.dumps``'s with the same options.
"""

from __future__ import annotations

import json
import random
from decimal import Decimal

import pytest

from sidecar.checks import grounding
from sidecar.checks.grounding import GroundedNumbers, grounded_numbers
from sidecar.conventions.attributes import compact_json
from sidecar.model import Outcome
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


def _full(spec: GroundedNumbers, seen: object) -> object:
    """The general path: the finding against the whole evidence, without the digit-run pass."""
    assert isinstance(seen, type(transcript()))
    answer = seen.answer
    assert answer is not None
    claims = grounding._claims(answer)
    if not claims:
        return grounded_numbers(spec, seen)
    texts: list[str] = []
    for call in seen.tool_calls:
        texts.extend(t for t in (call.result, call.arguments) if t is not None)
    if seen.user_input is not None:
        texts.append(seen.user_input)
    return grounding._decided(claims, texts, list(grounding._allowed(spec.allow)), seen)


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
        assert finding == _full(spec, seen)
        outcomes.add(finding.outcome)
    assert len(outcomes) == 3  # PASS, FAIL and ERROR were all reached


def test_digit_runs_of_the_evidence_ground_a_plain_amount() -> None:
    # The first pass: the digit runs of the evidence alone ground the amount.
    spec = GroundedNumbers(name="n", type="grounded_numbers")
    seen = transcript(tool_call("t", result='{"amount": 562.51}'), answer="Refunded $562.51.")
    assert grounding._digit_run_numbers(['{"amount": 562.51}']) == {Decimal("562.51")}
    assert grounded_numbers(spec, seen).outcome is Outcome.PASS


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
