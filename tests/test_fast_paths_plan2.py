"""The second round of planning fast paths gives what the general paths give (issue 14).

- the record builders (``new_message``, ``new_tool_request``, ``new_tool_response``,
  ``new_reading``, ``new_tool_call``, ``new_check_result`` and the transcript's and
  checks' private ones) build the very record the dataclass constructor builds:
  equal, same hash, same repr, still frozen, ``replace`` works on them;
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from sidecar.checks._common import Finding, _finding
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
    ToolCall,
    new_check_result,
    new_tool_call,
)
from sidecar.transcript import _new_step, _Step
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
