"""Fuzz: the judge's answer parser reports every criterion and never PASS on a malformed answer.

:func:`~sidecar.judge.parse.parse_verdicts` is called, not changed, here.
Contract for any raw answer (nested within reason): one result per rubric
criterion, in rubric order, each PASS, FAIL or ERROR; a PASS only for an
entry that says exactly ``"verdict": "PASS"``; within the per-example deadline.

A deeply nested answer makes the parser raise ``RecursionError`` (reported;
the answer caps belong to the parser's own work): ``test_deep_answer`` holds
the input, marked as expected to fail until that lands.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sidecar.judge.parse import parse_verdicts
from sidecar.judge.prompt import build_request
from sidecar.model import Outcome
from tests.builders import CRITERIA, refund_rubric, refund_transcript
from tests.fuzz_strategies import FUZZ, json_values, shallow_json_texts, texts

RUBRIC = refund_rubric()
TRANSCRIPT = refund_transcript()
REQUEST = build_request(RUBRIC, TRANSCRIPT, nonce="0123456789abcdef0123")
NAMES = [c.name for c in RUBRIC.judge.criteria] if RUBRIC.judge else []

entries = st.fixed_dictionaries(
    {},
    optional={
        "criterion": st.sampled_from(NAMES) | texts | json_values,
        "verdict": st.sampled_from(["PASS", "FAIL", "pass", "Pass", "ERROR", ""]) | json_values,
        "evidence": st.sampled_from(["NONE", " NONE ", "", "not in the data"])
        | texts
        | json_values,
    },
)
answers = st.one_of(
    st.none(),
    texts,
    shallow_json_texts,
    st.builds(
        lambda items: json.dumps({"criteria": items}, default=str),
        st.lists(entries | json_values, max_size=6),
    ),
    st.builds(
        lambda items: "```json\n" + json.dumps({"criteria": items}, default=str) + "\n```",
        st.lists(entries, max_size=4),
    ),
    st.builds(lambda v: json.dumps({"criteria": v}, default=str), json_values),
)


def honest_pass(entry: Any) -> bool:
    return isinstance(entry, dict) and entry.get("verdict") == "PASS"


@FUZZ
@given(answers)
def test_parse_any_answer(raw: str | None) -> None:
    criteria, _ = parse_verdicts(raw, REQUEST, RUBRIC)
    assert [c.name for c in criteria] == NAMES
    assert all(c.outcome in (Outcome.PASS, Outcome.FAIL, Outcome.ERROR) for c in criteria)
    passed = {c.name for c in criteria if c.outcome is Outcome.PASS}
    if not passed:
        return
    data = json.loads(raw.strip().removeprefix("```json").removesuffix("```")) if raw else None
    said_pass = {
        e["criterion"]
        for e in (data.get("criteria") or [] if isinstance(data, dict) else [])
        if honest_pass(e) and isinstance(e.get("criterion"), str)
    }
    assert passed <= said_pass


def test_deep_answer() -> None:
    parse_verdicts('{"criteria": ' + "[" * 100_000 + "]" * 100_000 + "}", REQUEST, RUBRIC)


def test_the_suite_knows_the_rubrics_criteria() -> None:
    assert tuple(NAMES) == CRITERIA
