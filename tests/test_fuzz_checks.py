"""Fuzz: every check type, on hostile transcripts, gives PASS/FAIL/ERROR and never PASS on what it could not read.

Each registered check type (``sidecar.evaluate.checks.CHECK_TYPES``) has here a
strategy for valid configs; transcripts carry random, deep, huge and
ill-typed tool arguments and results, answers full of number forms, and
latencies that are missing, negative, NaN or infinite. Contract: one
``CheckResult`` with a one-line detail, no exception, within the deadline,
and never PASS when the evidence the check needs could not be read:

- no answer (not captured, or the root never came): the answer checks;
- no latency, or not a finite number: ``max_latency_ms``;
- uncaptured arguments of the checked tool: ``tool_arguments``;
- a truncated trace: every check that truncation makes inconclusive on PASS.

A test fails when a check type is registered without a strategy here.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sidecar.evaluate.checks import CHECK_TYPES, run_check
from sidecar.evaluate.checks.base import CheckConfig
from sidecar.model import ErrorSpan, Flag, Outcome, ToolCall, Transcript
from tests.fuzz_strategies import FUZZ_WIDE, embeddable, json_texts, json_values, texts

TOOLS = ["lookup", "refund", "delete_account"]
names = st.sampled_from(TOOLS)
schemas = st.sampled_from(
    [
        {"type": "object"},
        {
            "type": "object",
            "required": ["amount"],
            "properties": {"amount": {"type": "number", "maximum": 500}},
        },
        {"type": "array", "items": {"type": "string", "format": "date"}},
        {
            "$defs": {"n": {"type": "number"}},
            "type": "object",
            "additionalProperties": {"$ref": "#/$defs/n"},
        },
    ]
)
patterns = st.sampled_from([r"\brefund\b", r"^\s*$", r"[0-9]+", r"(?i)sorry", r"\$\d+(\.\d\d)?"])

CONFIGS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "tool_allowlist": st.fixed_dictionaries({"tools": st.lists(names)}),
    "tool_denylist": st.fixed_dictionaries({"tools": st.lists(names)}),
    "required_tool_calls": st.fixed_dictionaries(
        {
            "calls": st.lists(
                st.fixed_dictionaries(
                    {"name": names},
                    optional={"arguments": st.dictionaries(texts, json_values, max_size=3)},
                ),
                min_size=1,
                max_size=3,
            ),
            "order": st.sampled_from(["in_order", "any_order"]),
        }
    ),
    "tool_arguments": st.fixed_dictionaries({"tool": names, "schema": schemas}),
    "max_tool_calls": st.fixed_dictionaries({"limit": st.integers(0, 5)}, optional={"tool": names}),
    "answer_regex": st.one_of(
        st.fixed_dictionaries({"must_match": patterns}),
        st.fixed_dictionaries(
            {"must_not_match": patterns}, optional={"ignore_case": st.booleans()}
        ),
    ),
    "answer_json_schema": st.fixed_dictionaries({"schema": schemas}),
    "max_latency_ms": st.fixed_dictionaries({"limit": st.floats(0.001, 7 * 86_400_000)}),
    "no_error_spans": st.just({}),
    "grounded_numbers": st.fixed_dictionaries(
        {"allow": st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=3)}
    ),
    "max_turns": st.fixed_dictionaries({"limit": st.integers(1, 300)}),
}

# Checks that cannot be decided without the answer.
NEEDS_ANSWER = {"answer_regex", "answer_json_schema", "grounded_numbers"}


def test_every_check_type_has_a_fuzz_strategy() -> None:
    assert set(CONFIGS) == {t.name for t in CHECK_TYPES}


@st.composite
def check_configs(draw: st.DrawFn) -> tuple[str, CheckConfig]:
    check_type = draw(st.sampled_from(CHECK_TYPES))
    fields = draw(CONFIGS[check_type.name])
    spec = check_type.config.model_validate(
        {"name": "c", "type": check_type.name, "gate": draw(st.booleans()), **fields}
    )
    return check_type.name, spec


ANSWER_NUMBERS = [
    "Refund of $1,299.00",
    "1 299,00 €",
    "USD40",
    "−45",
    "４０",
    "1.2k",
    "9" * 3000,
    "0." + "0" * 500 + "1",
    "12%",
    "1e400",
    "5,7",
]
answers = (
    st.none()
    | texts
    | json_texts
    | st.sampled_from(ANSWER_NUMBERS)
    | st.lists(st.sampled_from(ANSWER_NUMBERS) | texts, max_size=4).map(" ".join)
)
evidence = (
    st.none()
    | texts
    | json_texts
    | st.sampled_from(
        [
            '{"amount": 1e999999999, "price": 40}',
            '{"n": ' + "9" * 5000 + "}",
            "[" * 5000,
            "1,299.00",
        ]
    )
)
latencies = st.none() | st.floats(allow_nan=True, allow_infinity=True)


@st.composite
def transcripts(draw: st.DrawFn) -> Transcript:
    calls = tuple(
        ToolCall(
            name=draw(names | texts),
            call_id=draw(st.none() | texts),
            arguments=draw(evidence | embeddable.map(str)),
            result=draw(evidence),
            error=draw(st.none() | texts),
            untrusted=draw(st.booleans()),
        )
        for _ in range(draw(st.integers(0, 4)))
    )
    flags = tuple(draw(st.lists(st.sampled_from(list(Flag)), unique=True, max_size=3)))
    incomplete = Flag.INCOMPLETE in flags
    return Transcript(
        trace_id="5b8efff798038103d269b633813fc60c",
        root_span_id=draw(st.none() | st.just("eee19b7ec3c1b174")),
        user_input=draw(evidence),
        tool_calls=calls,
        answer=None if incomplete else draw(answers),
        latency_ms=None if incomplete else draw(latencies),
        latency_error=draw(st.none() | texts),
        error_spans=tuple(
            ErrorSpan("x", draw(texts), draw(texts)) for _ in range(draw(st.integers(0, 2)))
        ),
        truncated=draw(st.booleans()),
        flags=flags,
    )


@FUZZ_WIDE
@given(check_configs(), transcripts())
def test_every_check_on_hostile_transcripts(
    config: tuple[str, CheckConfig], transcript: Transcript
) -> None:
    type_name, spec = config
    result = run_check(spec, transcript)
    assert result.outcome in (Outcome.PASS, Outcome.FAIL, Outcome.ERROR)
    assert (result.name, result.gate) == (spec.name, spec.gate)
    assert "\n" not in result.detail
    assert len(result.detail) <= 240
    if result.outcome is not Outcome.PASS:
        return
    # Never PASS on what could not be read.
    if type_name in NEEDS_ANSWER:
        assert transcript.answer is not None
    if type_name == "max_latency_ms":
        assert transcript.latency_ms is not None
        assert transcript.latency_ms == transcript.latency_ms  # not NaN
    if type_name == "tool_arguments":
        checked = [c for c in transcript.tool_calls if c.name == getattr(spec, "tool", None)]
        assert all(c.arguments is not None for c in checked)
    check_type = next(t for t in CHECK_TYPES if t.name == type_name)
    if transcript.truncated:
        assert check_type.inconclusive_if_truncated is not Outcome.PASS
