"""Fuzz: loading a rubric gives a Rubric or a RubricError naming the file, nothing else.

Rubric files are edited by people and may be anything: random text, YAML of
the wrong shape, fields of the wrong type, numbers out of range, unknown
check types. Contract: :func:`~sidecar.evaluate.rubric.parse_rubric` returns a
``Rubric`` or raises ``RubricError`` whose message starts with the file's
path, within the per-example deadline; a rubric that loads can be run on a
trace without an exception.

Deeply nested YAML is a known defect of the loader (``RecursionError``; the
YAML bounds belong to the loader's own work): ``test_deep_yaml`` holds the
inputs, marked as expected to fail until that lands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from sidecar.errors import RubricError
from sidecar.evaluate.checks import CHECK_TYPES
from sidecar.evaluate.pipeline import judge_cases, plan
from sidecar.evaluate.rubric import Rubric, parse_rubric
from sidecar.evaluate.sample import Sampler
from tests.builders import genai_trace
from tests.fuzz_strategies import FUZZ, json_values, texts

PATH = Path("rubrics/fuzz.yaml")

CHECK_FIELDS = [
    "tools",
    "tool",
    "calls",
    "order",
    "schema",
    "limit",
    "must_match",
    "must_not_match",
    "allow",
    "gate",
    "ignore_case",
]

field_values = json_values | st.sampled_from(
    [[], {}, "", -1, 0, 10**400, float("nan"), [{"name": "x"}], {"type": "object"}, "in_order"]
)


@st.composite
def rubric_documents(draw: st.DrawFn) -> dict[str, Any]:
    checks = [
        {
            "name": draw(st.sampled_from(["ok", "bad name", "", "x" * 100]) | texts),
            "type": draw(st.sampled_from([t.name for t in CHECK_TYPES]) | texts),
            **{
                key: draw(field_values)
                for key in draw(st.lists(st.sampled_from(CHECK_FIELDS), max_size=4, unique=True))
            },
        }
        for _ in range(draw(st.integers(0, 3)))
    ]
    document: dict[str, Any] = {
        "id": draw(st.sampled_from(["shop"]) | texts | field_values),
        "version": draw(st.sampled_from(["1"]) | field_values),
        "checks": checks,
    }
    if draw(st.booleans()):
        document["applies_to"] = draw(field_values)
    if draw(st.booleans()):
        document["sampling"] = draw(
            st.fixed_dictionaries({"judge_ratio": field_values, "always_judge": field_values})
        )
    if draw(st.booleans()):
        document["judge"] = {
            "model": draw(texts),
            "instructions": draw(texts),
            "criteria": draw(
                st.lists(
                    st.fixed_dictionaries({"name": texts, "definition": field_values}), max_size=3
                )
            ),
        }
    for key in draw(st.lists(texts, max_size=2)):
        document[key] = draw(field_values)
    return document


def load(text: str) -> Rubric | None:
    try:
        rubric, problem = parse_rubric(text, PATH), ""
    except RubricError as exc:
        rubric, problem = None, str(exc)
    assert rubric is not None or problem.startswith(str(PATH)), problem
    return rubric


@FUZZ
@given(rubric_documents())
async def test_rubric_documents(document: dict[str, Any]) -> None:
    rubric = load(yaml.safe_dump(document, allow_unicode=True))
    if rubric is None:
        return
    trace = genai_trace("Refund order 7", [("lookup", {"id": 7}, '{"amount": 40}')], "Refund: $40")
    _, cases = plan(trace, [rubric], Sampler(judge_enabled=False), 0.0)
    for verdict in await judge_cases(cases, None):
        assert verdict.rubric_id == rubric.id


@FUZZ
@given(texts | st.binary(max_size=200).map(lambda b: b.decode("latin-1")))
def test_rubric_text(text: str) -> None:
    load(text)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("a: " + "[" * 5000 + "]" * 5000, id="deep-flow-sequence"),
        pytest.param("{a: " * 3000 + "1" + "}" * 3000, id="deep-flow-mapping"),
        pytest.param(
            "id: x\nversion: '1'\nchecks:\n  - {name: a, type: answer_json_schema, schema: "
            + "{items: " * 500
            + "{}"
            + "}" * 500
            + "}",
            id="deep-schema",
        ),
    ],
)
def test_deep_yaml(text: str) -> None:
    load(text)
