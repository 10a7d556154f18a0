"""The second round of planning fast paths gives what the general paths give (issue 14).

- the record builders (``new_message``, ``new_tool_request``, ``new_tool_response``,
  ``new_reading``, ``new_tool_call``, ``new_check_result`` and the transcript's and
  checks' private ones) build the very record the dataclass constructor builds:
  equal, same hash, same repr, still frozen, ``replace`` works on them;
- ``read_span`` skips the readers whose ``Convention.claims`` a span does not
  show: each such reader returns ``None`` for it, and the reading is the one
  trying every reader in precedence gives;
- ``schema_violation`` skips the JSON Schema validator when a simple schema's
  compiled test (``certainly_valid``) says the instance is valid: that test is
  never wrong (the validator finds no error), and the violation text is the
  validator's own, for any simple schema and instance.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.evaluate.checks._common import Finding, _finding, schema_violation
from sidecar.evaluate.checks.schema import certainly_valid, new_validator
from sidecar.evaluate.conventions import CONVENTIONS, READERS, Claims, read_span
from sidecar.evaluate.conventions.messages import (
    Message,
    ToolRequest,
    ToolResponse,
    new_message,
    new_tool_request,
    new_tool_response,
)
from sidecar.evaluate.conventions.reading import Reading, Role, new_reading
from sidecar.evaluate.transcript import _new_step, _Step
from sidecar.model import (
    CheckResult,
    Outcome,
    Span,
    ToolCall,
    new_check_result,
    new_tool_call,
)
from tests.builders import span
from tests.fuzz_shapes import CONVENTION_SHAPES, spans_of
from tests.fuzz_strategies import FUZZ_WIDE, texts

_REQUEST = ToolRequest("lookup", "c1", '{"a": 1}')
_RESPONSE = ToolResponse("c1", "lookup", "42")
_MESSAGE = Message("assistant", "hi", (_REQUEST,), (_RESPONSE,))
_CALL = ToolCall("lookup", "c1", "{}", "42", None, True, "s1")

_CASES: list[tuple[object, object]] = [
    (new_message("user"), Message("user")),
    (new_message("user", "hi"), Message("user", "hi")),
    (
        new_message("assistant", None, (_REQUEST,), (_RESPONSE,)),
        Message("assistant", None, (_REQUEST,), (_RESPONSE,)),
    ),
    (new_tool_request("lookup", None, None), ToolRequest("lookup")),
    (new_tool_request("lookup", "c1", '{"a": 1}'), _REQUEST),
    (new_tool_response(None, None, None), ToolResponse()),
    (new_tool_response("c1", "lookup", "42"), _RESPONSE),
    (new_reading("otel_genai", Role.OTHER), Reading("otel_genai", Role.OTHER)),
    (
        new_reading(
            "adk_v1",
            Role.LLM,
            strong=False,
            agent_name="a",
            input_text="i",
            output_text="o",
            inputs=(_MESSAGE,),
            outputs=(),
            tool=_CALL,
            models=("m",),
        ),
        Reading("adk_v1", Role.LLM, False, "a", "i", "o", (_MESSAGE,), (), _CALL, ("m",)),
    ),
    (new_tool_call("lookup"), ToolCall("lookup")),
    (new_tool_call("lookup", "c1", "{}", "42", None, True, "s1"), _CALL),
    (new_tool_call("x", result="r", span_id="s"), ToolCall("x", result="r", span_id="s")),
    (new_check_result("c", Outcome.FAIL, False, "d"), CheckResult("c", Outcome.FAIL, False, "d")),
    (_finding(Outcome.PASS, "ok"), Finding(Outcome.PASS, "ok")),
]


@pytest.mark.parametrize(("built", "constructed"), _CASES)
def test_builders_build_the_constructors_record(built: Any, constructed: Any) -> None:
    assert type(built) is type(constructed)
    assert built == constructed
    assert hash(built) == hash(constructed)
    assert repr(built) == repr(constructed)
    assert dataclasses.astuple(built) == dataclasses.astuple(constructed)
    field = dataclasses.fields(built)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(built, field, None)
    assert dataclasses.replace(built) == constructed


def test_step_builder_builds_the_constructors_record() -> None:
    s = span("chat", span_id="0000000000000001")
    reading = Reading("otel_genai", Role.LLM)
    built, constructed = _new_step(s, reading, 2), _Step(s, reading, 2)
    assert type(built) is _Step
    assert built == constructed
    assert repr(built) == repr(constructed)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.depth = 3  # type: ignore[misc]


# --- reader dispatch ---------------------------------------------------------------------

# Keys near the claimed ones: prefixes without their dot, keys with a newline before or
# inside a claimed prefix (the joined-keys test must not be fooled), and exact keys.
_NEAR_KEYS = [
    "gen_ai.prompt",
    "gen_ai.prompt.",
    "gen_ai.prompt.0.content",
    "gen_ai.completion.0.role",
    "x\ngen_ai.prompt.0",
    "\ngen_ai.completion.1",
    "gen_ai.promptx",
    "traceloop.span.kind",
    "llm.request.type",
    "openinference.span.kind",
    "gcp.vertex.agent.llm_request",
    "gcp.vertex.agent.",
    "gcp.vertex.agent",
]


def _every_reader(s: Span, memo: None) -> object:
    for reader in READERS:
        reading = reader(s, memo)
        if reading is not None:
            return reading
    return None


def _outcome(read: Any, s: Span) -> object:
    try:
        return read(s, None)
    except Exception as exc:  # both paths must raise alike
        return type(exc)


@st.composite
def _spans(draw: st.DrawFn) -> Span:
    base = draw(spans_of(draw(st.sampled_from(sorted(CONVENTION_SHAPES)))))
    extra = draw(st.dictionaries(st.sampled_from(_NEAR_KEYS) | texts, texts, max_size=3))
    scope = draw(st.sampled_from([base.scope_name, "gcp.vertex.agent", "other"]))
    return dataclasses.replace(base, attributes={**base.attributes, **extra}, scope_name=scope)


@FUZZ_WIDE
@given(_spans())
def test_a_reader_reads_nothing_its_claims_do_not_show(s: Span) -> None:
    for convention in CONVENTIONS:
        if convention.claims is not None and not convention.claims.shown_by(s):
            assert _outcome(convention.read, s) is None, convention.name


@FUZZ_WIDE
@given(_spans())
def test_read_span_is_the_first_reading_of_every_reader(s: Span) -> None:
    assert _outcome(read_span, s) == _outcome(_every_reader, s)


@pytest.mark.parametrize(
    ("keys", "shown"),
    [
        pytest.param(["gen_ai.prompt.0.content"], True, id="prefix"),
        pytest.param(["a", "gen_ai.completion.2.role"], True, id="prefix-not-first"),
        pytest.param(["x\ngen_ai.prompt.0"], False, id="newline-before-prefix"),
        pytest.param(["gen_ai.prompt", "gen_ai.promptx"], False, id="no-dot"),
        pytest.param(["llm.request.type"], True, id="key"),
        pytest.param([], False, id="none"),
    ],
)
def test_claims_shown_by_keys(keys: list[str], shown: bool) -> None:
    claims = Claims(
        keys=frozenset({"llm.request.type"}),
        key_prefixes=("gen_ai.prompt.", "gen_ai.completion."),
    )
    s = span("x", attrs=dict.fromkeys(keys, "v"))
    assert claims.shown_by(s) is shown


def test_claims_shown_by_scope() -> None:
    claims = Claims(scopes=frozenset({"gcp.vertex.agent"}))
    assert claims.shown_by(span("x", scope="gcp.vertex.agent"))
    assert not claims.shown_by(span("x", scope="gcp.vertex.agent.other"))


def test_the_genai_reader_claims_any_span() -> None:
    # Without claims of its own it is the reader every unclaimed span goes to.
    assert [c.name for c in CONVENTIONS if c.claims is None] == ["otel_genai"]
    reading = read_span(span("chat m", attrs={"gen_ai.operation.name": "chat"}))
    assert reading is not None
    assert reading.convention == "otel_genai"


# --- JSON Schema: certainly valid --------------------------------------------------------

_KEYS = ["a", "b", "order_id", "amount"]
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-3, 600)
    | st.sampled_from([0.0, 1.0, 2.5, -1.5, 500.0, 500.5, float("inf"), float("nan"), 10**30])
    | st.sampled_from(["", "x", "A1", "abc", "日本"])
)
_instances = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(_KEYS), inner),
    max_leaves=8,
)
_TYPE_NAMES = ["object", "array", "string", "number", "integer", "boolean", "null"]
_numbers = st.integers(-2, 501) | st.sampled_from([0.5, 500.0, 1e3])


def _schemas(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    keyword = st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(_TYPE_NAMES)
            | st.lists(st.sampled_from(_TYPE_NAMES), min_size=1, max_size=3),
            "required": st.lists(st.sampled_from(_KEYS), max_size=2, unique=True),
            "properties": st.dictionaries(st.sampled_from(_KEYS), inner, max_size=3),
            "additionalProperties": st.booleans() | inner,
            "items": st.booleans() | inner,
            "minimum": _numbers,
            "maximum": _numbers,
            "exclusiveMinimum": _numbers,
            "exclusiveMaximum": _numbers,
            "minLength": st.integers(0, 3),
            "maxLength": st.integers(0, 3),
            "enum": st.lists(_scalars, max_size=4),
            "const": _scalars,
            "title": st.just("t"),
        },
    )
    return keyword | st.booleans()


_simple_schemas = st.recursive(_schemas(st.just({})), _schemas, max_leaves=6)


def _validator_only(schema: Any, instance: object) -> str | None:
    from jsonschema.exceptions import best_match

    error = best_match(new_validator(schema).iter_errors(instance))
    return None if error is None else f"{error.json_path}: {error.message}"


@FUZZ_WIDE
@given(_simple_schemas, _instances)
def test_certainly_valid_is_never_wrong(schema: Any, instance: object) -> None:
    certain = certainly_valid(schema)
    if certain is not None and certain(instance):
        assert _validator_only(schema, instance) is None


@FUZZ_WIDE
@given(_simple_schemas, _instances)
def test_schema_violation_is_the_validators(schema: Any, instance: object) -> None:
    assert schema_violation(schema, instance) == _validator_only(schema, instance)


_BENCH_SCHEMA = {
    "type": "object",
    "required": ["order_id", "amount"],
    "properties": {"amount": {"type": "number", "maximum": 500}},
}


@pytest.mark.parametrize(
    ("schema", "instance", "certain"),
    [
        pytest.param(_BENCH_SCHEMA, {"order_id": "A1", "amount": 41.65}, True, id="valid-args"),
        pytest.param(_BENCH_SCHEMA, {"order_id": "A1", "amount": 600}, False, id="over-maximum"),
        pytest.param(_BENCH_SCHEMA, {"order_id": "A1"}, False, id="missing-required"),
        pytest.param(_BENCH_SCHEMA, {"order_id": "A1", "amount": True}, False, id="bool-number"),
        pytest.param({"type": "string"}, "Done: $41.65 refunded.", True, id="text"),
        pytest.param({"type": "integer"}, 1.0, False, id="float-integer-not-certain"),
        pytest.param({"enum": [1, "a"]}, True, False, id="bool-is-not-1"),
        pytest.param({"enum": [1, "a"]}, "a", True, id="enum"),
        pytest.param({"maximum": 5}, float("nan"), False, id="nan-not-certain"),
    ],
)
def test_certainly_valid_examples(schema: Any, instance: object, certain: bool) -> None:
    test = certainly_valid(schema)
    assert test is not None
    assert test(instance) is certain


@pytest.mark.parametrize(
    "schema",
    [
        pytest.param({"type": "string", "format": "date"}, id="format-asserted"),
        pytest.param({"pattern": "^a"}, id="pattern"),
        pytest.param({"$ref": "#/$defs/x", "$defs": {"x": {}}}, id="ref"),
        pytest.param({"properties": {"a": {"anyOf": [{}]}}}, id="nested-combinator"),
        pytest.param({"type": "strings"}, id="unknown-type"),
        pytest.param({"maximum": "5"}, id="bound-not-a-number"),
        pytest.param({"required": "a"}, id="required-not-a-list"),
        pytest.param({"items": [{}]}, id="items-list"),
        pytest.param({"enum": [1], "const": 1}, id="enum-and-const"),
    ],
)
def test_certainly_valid_leaves_other_schemas_to_the_validator(schema: Any) -> None:
    assert certainly_valid(schema) is None


def test_read_span_remembers_claims_by_keys_not_by_scope() -> None:
    attrs = {"gen_ai.operation.name": "chat"}
    first = read_span(span("call_llm", scope="other", attrs=attrs))
    in_adk = read_span(span("call_llm", scope="gcp.vertex.agent", attrs=attrs))
    again = read_span(span("call_llm", scope="other", attrs=attrs))
    assert first is not None
    assert in_adk is not None
    assert again is not None
    assert (first.convention, in_adk.convention, again.convention) == (
        "otel_genai",
        "adk_v1",
        "otel_genai",
    )


def test_read_span_reads_claimed_keys_after_unclaimed_ones() -> None:
    # Same keys in another order, then one more key: each key tuple is decided anew.
    plain = read_span(span("x", attrs={"a": "1", "gen_ai.operation.name": "chat"}))
    legacy = read_span(
        span(
            "x", attrs={"a": "1", "gen_ai.operation.name": "chat", "gen_ai.prompt.0.content": "hi"}
        )
    )
    assert plain is not None
    assert legacy is not None
    assert (plain.convention, legacy.convention) == ("otel_genai", "openllmetry")
