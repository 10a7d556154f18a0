"""The second round of planning fast paths gives what the general paths give (issue 14).

- the record builders (``new_message``, ``new_tool_request``, ``new_tool_response``,
  ``new_reading``, ``new_tool_call``, ``new_check_result`` and the transcript's and
  checks' private ones) build the very record the dataclass constructor builds:
  equal, same hash, same repr, still frozen, ``replace`` works on them;
- ``read_span`` skips the readers whose ``Convention.claims`` a span does not
  show: each such reader returns ``None`` for it, and the reading is the one
  trying every reader in precedence gives;
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.checks._common import Finding, _finding
from sidecar.conventions import CONVENTIONS, READERS, Claims, read_span
from sidecar.conventions.messages import (
    Message,
    ToolRequest,
    ToolResponse,
    new_message,
    new_tool_request,
    new_tool_response,
)
from sidecar.conventions.reading import Reading, Role, new_reading
from sidecar.model import (
    CheckResult,
    Outcome,
    Span,
    ToolCall,
    new_check_result,
    new_tool_call,
)
from sidecar.transcript import _new_step, _Step
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
