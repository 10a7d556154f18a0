"""Content capture is known, never guessed (sidecar.evaluate.capture, the checks and the pipeline).

Traces as instrumentations emit them with content on and off; what the
transcript records of them; what the tool checks say when the model asked for
tool calls the trace does not show; fragments (one LLM call under a rubric
that expects an agent run); criteria when the judge would see missing content;
the once-per-agent warning.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from sidecar.evaluate.capture import GENERIC_ADVICE, CaptureWarnings, advice_for, read_capture
from sidecar.evaluate.checks import run_checks
from sidecar.evaluate.pipeline import NO_JUDGE, Case, judge_case, plan
from sidecar.evaluate.sample import SampleDecision, Sampler
from sidecar.evaluate.transcript import build_transcript
from sidecar.model import Capture, Captured, ContentField, Flag, Outcome, Span
from tests.builders import refund_rubric, rubric, span, tool_call, trace, transcript

C, N, NA = Captured.CAPTURED, Captured.NOT_CAPTURED, Captured.NOT_APPLICABLE
OPENAI_SCOPE = "opentelemetry.util.genai.handler"
OI_SCOPE = "openinference.instrumentation.openai"


def _chat(n: int, finish: str, *, content: dict[str, Any] | None = None, **attrs: Any) -> Span:
    return span(
        "chat gpt-4o-mini",
        span_id=f"{n:016x}",
        parent="a" * 16,
        start=n * 10,
        end=n * 10 + 5,
        scope=OPENAI_SCOPE,
        attrs={
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.response.finish_reasons": [finish],
            **(content or {}),
            **attrs,
        },
    )


def _agent(*children: Span) -> tuple[Span, ...]:
    root = span(
        "invoke_agent refund-agent",
        span_id="a" * 16,
        start=0,
        end=1000,
        attrs={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "refund-agent"},
    )
    return (root, *children)


def _tool_span(n: int, name: str) -> Span:
    return span(
        f"execute_tool {name}",
        span_id=f"{n:016x}",
        parent="a" * 16,
        start=n * 10,
        end=n * 10 + 2,
        attrs={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name},
    )


def _messages(*items: dict[str, Any]) -> str:
    return json.dumps(list(items))


_USER = {"role": "user", "parts": [{"type": "text", "content": "Refund A1001"}]}
_CALL = {
    "role": "assistant",
    "parts": [{"type": "tool_call", "id": "c1", "name": "lookup_order", "arguments": {"id": 1}}],
}
_RESULT = {
    "role": "tool",
    "parts": [{"type": "tool_call_response", "id": "c1", "response": "amount 40"}],
}
_ANSWER = {"role": "assistant", "parts": [{"type": "text", "content": "Refunded $40."}]}

CAPTURE_CASES = [
    pytest.param(
        _agent(_chat(1, "tool_calls"), _chat(2, "stop")),
        {
            "input": N,
            "answer": N,
            "tool_calls": N,
            "tool_call_arguments": N,
            "tool_call_results": N,
        },
        1,
        id="content-off-calls-requested-unseen",
    ),
    pytest.param(
        _agent(_chat(1, "tool_calls"), _tool_span(2, "lookup_order"), _chat(3, "stop")),
        {
            "input": N,
            "answer": N,
            "tool_calls": C,
            "tool_call_arguments": N,
            "tool_call_results": N,
        },
        0,
        id="content-off-tool-spans-show-the-calls",
    ),
    pytest.param(
        _agent(
            _chat(
                1,
                "tool_calls",
                content={
                    "gen_ai.input.messages": _messages(_USER),
                    "gen_ai.output.messages": _messages(_CALL),
                },
            ),
            _chat(
                2,
                "stop",
                content={
                    "gen_ai.input.messages": _messages(_USER, _CALL, _RESULT),
                    "gen_ai.output.messages": _messages(_ANSWER),
                },
            ),
        ),
        {
            "input": C,
            "answer": C,
            "tool_calls": C,
            "tool_call_arguments": C,
            "tool_call_results": C,
        },
        0,
        id="content-on-calls-from-messages",
    ),
    pytest.param(
        _agent(
            _chat(1, "tool_calls", content={"gen_ai.input.messages": _messages(_USER)}),
            _chat(
                2,
                "stop",
                content={"gen_ai.input.messages": _messages(_USER, _CALL, _RESULT)},
            ),
        ),
        {
            "input": C,
            "answer": N,
            "tool_calls": C,
            "tool_call_arguments": C,
            "tool_call_results": C,
        },
        0,
        id="outputs-off-next-input-repeats-the-request",
    ),
    pytest.param(
        _agent(
            _chat(1, "", **{"gen_ai.tool.definitions": '[{"name": "lookup_order"}]'}),
        ),
        {
            "input": N,
            "answer": N,
            "tool_calls": N,
            "tool_call_arguments": N,
            "tool_call_results": N,
        },
        0,
        id="tools-offered-no-finish-reason-unknown",
    ),
    pytest.param(
        _agent(_chat(1, "stop")),
        {
            "input": N,
            "answer": N,
            "tool_calls": NA,
            "tool_call_arguments": NA,
            "tool_call_results": NA,
        },
        0,
        id="content-off-no-tools",
    ),
]


@pytest.mark.parametrize(("spans", "states", "unseen"), CAPTURE_CASES)
def test_capture_is_read_from_the_trace(
    spans: tuple[Span, ...], states: dict[str, Captured], unseen: int
) -> None:
    capture = build_transcript(trace(*spans)).capture
    assert {f.value: capture.state(f) for f in ContentField} == states
    assert capture.unseen_tool_calls == unseen
    assert bool(capture.advice) == bool(capture.missing)


def test_calls_seen_only_in_messages_are_counted_as_requested() -> None:
    case = CAPTURE_CASES[2].values[0]
    built = build_transcript(trace(*case))
    assert [c.name for c in built.tool_calls] == ["lookup_order"]
    assert built.capture.requested_tool_calls == 1


def test_openinference_redacted_values_are_not_content() -> None:
    llm = span(
        "ChatCompletion",
        span_id="1" * 16,
        parent="a" * 16,
        start=10,
        end=15,
        scope=OI_SCOPE,
        attrs={
            "openinference.span.kind": "LLM",
            "input.value": "__REDACTED__",
            "output.value": "__REDACTED__",
            "llm.finish_reason": "tool_calls",
        },
    )
    built = build_transcript(trace(*_agent(llm)))
    assert (built.user_input, built.answer) == (None, None)
    assert built.capture.unseen_tool_calls == 1
    assert "OPENINFERENCE_HIDE_INPUTS" in built.capture.advice


@pytest.mark.parametrize(
    ("scopes", "needle"),
    [
        pytest.param(["gcp.vertex.agent"], "=SPAN_ONLY in the ADK agent", id="adk"),
        pytest.param([OPENAI_SCOPE], "=span_only", id="openai-v2-util-genai"),
        pytest.param(["opentelemetry.instrumentation.openai_v2"], "=span_only", id="openai-v2"),
        pytest.param([OI_SCOPE], "OPENINFERENCE_HIDE_OUTPUTS", id="openinference"),
        pytest.param(["opentelemetry.instrumentation.langchain"], "TRACELOOP", id="openllmetry"),
        pytest.param(["my.own"], GENERIC_ADVICE, id="unknown"),
    ],
)
def test_advice_names_the_setting_of_the_instrumentation(scopes: list[str], needle: str) -> None:
    assert needle in advice_for(scopes)


def test_read_capture_answer_of_a_rootless_trace_is_not_a_capture_gap() -> None:
    capture = read_capture([], user_input="hi", answer=None, answer_unknown=True, tool_calls=())
    assert capture.answer is NA
    assert capture.missing == ()


# --- checks over unseen calls -------------------------------------------------------------

UNSEEN = Capture(
    tool_calls=N,
    tool_call_arguments=N,
    tool_call_results=N,
    unseen_tool_calls=2,
    advice="set X=1 in the agent",
)


def _checks(*checks: dict[str, Any]) -> Any:
    return rubric(id="r", version="1", checks=list(checks))


CHECK_CASES = [
    ({"type": "tool_allowlist", "tools": ["lookup_order"]}, (), Outcome.ERROR),
    ({"type": "tool_allowlist", "tools": ["lookup_order"]}, ("delete",), Outcome.FAIL),
    ({"type": "tool_denylist", "tools": ["delete"]}, (), Outcome.ERROR),
    ({"type": "tool_denylist", "tools": ["delete"]}, ("delete",), Outcome.FAIL),
    ({"type": "max_tool_calls", "limit": 5}, (), Outcome.ERROR),
    ({"type": "max_tool_calls", "limit": 2}, ("a",), Outcome.FAIL),  # 1 seen + 2 turns
    ({"type": "max_tool_calls", "limit": 0, "tool": "a"}, ("a",), Outcome.FAIL),
    ({"type": "max_tool_calls", "limit": 3, "tool": "a"}, ("a",), Outcome.ERROR),
    ({"type": "required_tool_calls", "calls": [{"name": "a"}]}, ("a",), Outcome.PASS),
    ({"type": "required_tool_calls", "calls": [{"name": "a"}]}, (), Outcome.ERROR),
    (
        {
            "type": "required_tool_calls",
            "calls": [{"name": "a"}, {"name": "b"}],
            "order": "in_order",
        },
        ("b",),
        Outcome.ERROR,
    ),
    ({"type": "tool_arguments", "tool": "a", "schema": {"type": "object"}}, (), Outcome.ERROR),
    ({"type": "grounded_numbers"}, (), Outcome.ERROR),
]


@pytest.mark.parametrize(
    ("check", "seen", "outcome"),
    CHECK_CASES,
    ids=[f"{c['type']}-{'+'.join(s) or 'none'}-{o.value}" for c, s, o in CHECK_CASES],
)
def test_requested_but_unseen_calls_never_pass_a_tool_check(
    check: dict[str, Any], seen: tuple[str, ...], outcome: Outcome
) -> None:
    calls = [tool_call(name, {"x": 1}, "done 12") for name in seen]
    unseen = transcript(*calls, answer="You get 40.", capture=UNSEEN)
    (result,) = run_checks(_checks({"name": "c", **check}), unseen)
    assert result.outcome is outcome, result.detail
    if outcome is Outcome.ERROR:
        assert "set X=1 in the agent" in result.detail
    # With every call seen, the same check is decided.
    (seen_all,) = run_checks(
        _checks({"name": "c", **check}), transcript(*calls, answer="You get 12.")
    )
    assert seen_all.outcome is not Outcome.ERROR


def test_answer_checks_name_the_setting() -> None:
    off = transcript(answer=None, capture=Capture(answer=N, advice="set Y in the agent"))
    (result,) = run_checks(_checks({"name": "c", "type": "answer_regex", "must_match": "x"}), off)
    assert (result.outcome, result.detail) == (
        Outcome.ERROR,
        "answer not captured; set Y in the agent",
    )


# --- fragments: one LLM call under a rubric that expects an agent run -----------------------


def _lone_chat() -> tuple[Span, ...]:
    chat = span(
        "chat gpt-4o-mini",
        span_id="1" * 16,
        start=0,
        end=5_000_000,
        scope=OPENAI_SCOPE,
        kind=3,
        attrs={
            "gen_ai.operation.name": "chat",
            "gen_ai.response.finish_reasons": ["stop"],
            "gen_ai.input.messages": _messages(_USER),
            "gen_ai.output.messages": _messages(_ANSWER),
        },
    )
    return (chat,)


FRAGMENT_RUBRICS = [
    pytest.param(
        {"checks": [{"name": "c", "type": "tool_allowlist", "tools": ["a"]}]}, True, id="tool-check"
    ),
    pytest.param(
        {"checks": [{"name": "c", "type": "required_tool_calls", "calls": [{"name": "a"}]}]},
        True,
        id="required-calls",
    ),
    pytest.param(
        {"expects": "agent_run", "checks": [{"name": "c", "type": "max_latency_ms", "limit": 9}]},
        True,
        id="explicit-agent-run",
    ),
    pytest.param(
        {
            "expects": "llm_call",
            "checks": [{"name": "c", "type": "tool_allowlist", "tools": ["a"]}],
        },
        False,
        id="explicit-llm-call",
    ),
    pytest.param(
        {"checks": [{"name": "c", "type": "max_latency_ms", "limit": 9}]}, False, id="no-tool-check"
    ),
]


@pytest.mark.parametrize(("fields", "fragment"), FRAGMENT_RUBRICS)
def test_a_lone_llm_call_is_an_incomplete_fragment_under_an_agent_rubric(
    fields: dict[str, Any], fragment: bool
) -> None:
    r = rubric(id="r", version="1", **fields)
    base, (case,) = plan(trace(*_lone_chat()), [r], Sampler(judge_enabled=False), 0.0)
    assert base.llm_only
    assert Flag.INCOMPLETE not in base.flags
    assert (Flag.INCOMPLETE in case.transcript.flags) is fragment
    (check,) = case.checks
    if fragment:
        assert check.outcome is Outcome.ERROR
        assert "one LLM call without an agent span" in check.detail


def test_an_agent_run_is_no_fragment() -> None:
    spans = _agent(_chat(1, "stop"))
    r = rubric(
        id="r", version="1", checks=[{"name": "c", "type": "tool_allowlist", "tools": ["a"]}]
    )
    base, (case,) = plan(trace(*spans), [r], Sampler(judge_enabled=False), 0.0)
    assert not base.llm_only
    assert Flag.INCOMPLETE not in case.transcript.flags


# --- criteria --------------------------------------------------------------------------------


class _CountingJudge:
    def __init__(self) -> None:
        self.calls = 0

    async def judge(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        raise AssertionError("the judge must not be asked")


@pytest.mark.parametrize(
    ("capture", "answer", "missing"),
    [
        pytest.param(
            Capture(input=N, advice="set Z"), "ok", "input not captured; set Z", id="input"
        ),
        pytest.param(
            Capture(tool_calls=N, unseen_tool_calls=1, advice="set Z"),
            "ok",
            "tool calls not captured; set Z",
            id="tool-calls",
        ),
        pytest.param(
            Capture(answer=N, advice="set Z"), None, "answer not captured; set Z", id="answer"
        ),
    ],
)
async def test_criteria_are_error_when_the_judge_would_see_missing_content(
    capture: Capture, answer: str | None, missing: str
) -> None:
    r = refund_rubric()
    t = transcript(answer=answer, capture=capture)
    judge = _CountingJudge()
    case = Case(r, t, (), SampleDecision(True, "ratio"), NO_JUDGE)
    verdict = await judge_case(case, judge)  # type: ignore[arg-type]
    assert judge.calls == 0
    assert verdict.outcome.value == "errored"
    assert verdict.judge_error == "not_captured"
    assert all(c.outcome is Outcome.ERROR and c.reason == "not_captured" for c in verdict.criteria)
    assert all(c.evidence == missing for c in verdict.criteria)


# --- the warning -------------------------------------------------------------------------------


def test_the_warning_is_logged_once_per_agent_and_field(caplog: pytest.LogCaptureFixture) -> None:
    warnings = CaptureWarnings(limit=3)
    off = Capture(input=N, answer=N, advice="set Q")
    first = transcript(agent_name="a", capture=off)
    with caplog.at_level(logging.WARNING):
        assert warnings.note(first) == [ContentField.INPUT, ContentField.ANSWER]
        assert warnings.note(first) == []
        assert warnings.note(transcript(agent_name="b", capture=off)) == [ContentField.INPUT]
        assert warnings.note(transcript(agent_name="c", capture=off)) == []  # bound reached
    assert len(caplog.records) == 3
    assert all("set Q" in r.getMessage() for r in caplog.records)


async def test_a_fragment_is_not_judged() -> None:
    lone = build_transcript(trace(*_lone_chat()))
    r = rubric(refund_rubric().model_dump(by_alias=True, exclude_unset=True), expects="agent_run")
    case = Case(r, lone, (), SampleDecision(True, "ratio"), NO_JUDGE)
    judge = _CountingJudge()
    verdict = await judge_case(case, judge)  # type: ignore[arg-type]
    assert judge.calls == 0
    assert verdict.judge_error == "incomplete"
    assert all("invoke_agent" in (c.evidence or "") for c in verdict.criteria)


@pytest.mark.parametrize("field", list(ContentField), ids=lambda f: f.value)
@pytest.mark.parametrize("state", [Captured.NOT_CAPTURED, Captured.UNREADABLE], ids=str)
def test_missing_and_unreadable_name_exactly_the_field_in_that_state(
    field: ContentField, state: Captured
) -> None:
    capture = Capture(**{field.value: state})
    assert capture.state(field) is state
    found = capture.missing if state is Captured.NOT_CAPTURED else capture.unreadable_fields
    other = capture.unreadable_fields if state is Captured.NOT_CAPTURED else capture.missing
    assert (found, other) == ((field,), ())
