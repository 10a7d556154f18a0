"""The record builders (``sidecar.fastrecord``) build what the dataclass constructors build.

``new_message``, ``new_tool_request``, ``new_tool_response``, ``new_reading``,
``new_tool_call``, ``new_check_result`` and the transcript's and checks' private
builders give the very record the constructor gives: equal, same hash, same
repr, still frozen, ``replace`` works on them. Also here: ``read_span`` picks
the convention by scope and attribute keys, whatever was read before.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from sidecar.evaluate.checks._common import Finding, _finding
from sidecar.evaluate.conventions import read_span
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
    ToolCall,
    new_check_result,
    new_tool_call,
)
from tests.builders import span

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


def test_read_span_decides_by_scope_and_keys_each_time() -> None:
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


def test_read_span_reads_legacy_keys_beside_genai_ones() -> None:
    plain = read_span(span("x", attrs={"a": "1", "gen_ai.operation.name": "chat"}))
    legacy = read_span(
        span(
            "x", attrs={"a": "1", "gen_ai.operation.name": "chat", "gen_ai.prompt.0.content": "hi"}
        )
    )
    assert plain is not None
    assert legacy is not None
    assert (plain.convention, legacy.convention) == ("otel_genai", "openllmetry")
