"""Hostile sizes and content at the judge: capped blocks, capped answers, the judge's own flag.

Real HTTP: the backends talk to the local Gemini/OpenAI-protocol server of
``tests.gemini_server``, which records exactly what was sent.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest

from sidecar.adapters.judge_backends import AnswerTooLarge, CappedTransport
from sidecar.evaluate.pipeline import Case, conclude
from sidecar.evaluate.sample import SampleDecision
from sidecar.judge import screen_case
from sidecar.judge.config import JudgeSettings
from sidecar.judge.parse import BAD_SHAPE, INPUT_TRUNCATED, parse_answer
from sidecar.judge.prompt import TOOL_CALLS, build_request
from sidecar.model import Outcome, Transcript
from tests.builders import JUDGE_MODEL, refund_rubric, refund_transcript
from tests.gemini_server import JudgeServer, gemini_json, gemini_text, openai_text
from tests.judge_fixtures import GOOD_VERDICTS
from tests.judge_rig import judged, service, value

MB = 1_000_000


# --- every block sent to the judge is capped -----------------------------------------


async def test_a_20mb_tool_result_is_capped_in_the_request_sent(judge_server: JudgeServer) -> None:
    rubric = refund_rubric()
    transcript = refund_transcript(
        tool_result='{"order": "A-1001", "log": "' + "x" * (20 * MB) + '"}'
    )
    judge_server.script(gemini_json(GOOD_VERDICTS))
    started = time.perf_counter()
    async with service(judge_server) as (judge, _):
        result = await judged(judge, rubric, transcript)
    seconds = time.perf_counter() - started

    [sent] = judge_server.requests
    text = sent.body["contents"][0]["parts"][0]["text"]
    limit = JudgeSettings().max_block_chars
    assert len(text) < 4 * (limit + 1000)
    assert (
        f"{TOOL_CALLS}: the tool calls the agent made, in order (cut to {limit} characters" in text
    )
    [omitted] = [int(n) for n in re.findall(r"…\[truncated (\d+) characters\]", text)]
    assert 20 * MB - limit < omitted < 20 * MB
    # The verdict says the judge saw only part of the data.
    assert [(c.outcome, c.reason) for c in result.criteria] == [(Outcome.PASS, INPUT_TRUNCATED)] * 2
    assert seconds < 15, f"{seconds:.1f}s"


async def test_the_block_cap_is_a_judge_setting(judge_server: JudgeServer) -> None:
    transcript = refund_transcript(
        answer="Your refund of 42.50 EUR for order A-1001 was approved" + "." * 5000
    )
    judge_server.script(gemini_json(GOOD_VERDICTS))
    async with service(judge_server, max_block_chars=2048) as (judge, _):
        result = await judged(judge, refund_rubric(), transcript)
    text = judge_server.requests[0].body["contents"][0]["parts"][0]["text"]
    assert (
        "RESPONSE: the agent's final answer (cut to 2048 characters; each cut is marked):" in text
    )
    assert "…[truncated 3046 characters]" in text  # 5054 - (2048 - 40 for the mark)
    assert {c.reason for c in result.criteria} == {INPUT_TRUNCATED}


def test_many_tool_calls_share_the_block_fairly() -> None:
    from sidecar.model import ToolCall

    calls = tuple(
        ToolCall(name=f"t{i}", arguments="{}", result=("r" * 100 if i % 2 else "R" * 100_000))
        for i in range(10)
    )
    transcript = Transcript(
        trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
        root_span_id=None,
        answer="ok",
        tool_calls=calls,
    )
    request = build_request(refund_rubric(), transcript, max_block_chars=8192)
    [tools] = [content for name, content in request.blocks if name == TOOL_CALLS]
    assert len(tools) <= 8192 + 100
    # Every call is still shown, short results whole; the long ones are cut alike.
    assert all(f"call {i + 1} of 10: t{i}" in tools for i in range(10))
    assert tools.count("r" * 100) == 5
    assert tools.count("characters]") == 5
    assert request.truncated == (TOOL_CALLS,)


def test_a_request_under_the_cap_is_unchanged() -> None:
    request = build_request(refund_rubric(), refund_transcript())
    assert request.truncated == ()
    assert "truncated" not in request.user_text
    assert "cut to" not in request.user_text


# --- judge answers are capped --------------------------------------------------------


@pytest.mark.parametrize("backend", ["gemini", "openai"])
async def test_a_50mb_answer_becomes_error_quickly(judge_server: JudgeServer, backend: str) -> None:
    huge = "x" * (50 * MB)
    judge_server.script(gemini_text(huge) if backend == "gemini" else openai_text(huge))
    started = time.perf_counter()
    async with service(judge_server, backend) as (judge, metrics):
        result = await judged(judge, refund_rubric(), refund_transcript())
    assert time.perf_counter() - started < 15
    assert result.error_reason == "answer_too_large"
    assert {(c.outcome, c.reason) for c in result.criteria} == {(Outcome.ERROR, "answer_too_large")}
    assert result.raw_output is None
    reason = {"judge_model": JUDGE_MODEL, "reason": "answer_too_large"}
    assert value(metrics, "sidecar_judge_errors_total", **reason) == 1


async def test_an_answer_without_a_length_is_cut_while_streaming() -> None:
    pulled = 0
    limit = 64 * 1024

    async def endless() -> AsyncIterator[bytes]:
        nonlocal pulled
        while pulled < 50 * MB:
            pulled += 16 * 1024
            yield b"x" * (16 * 1024)

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=endless())

    transport = CappedTransport(limit, httpx2.MockTransport(handler))
    async with httpx2.AsyncClient(transport=transport) as client:
        with pytest.raises(AnswerTooLarge):
            await client.post("http://judge.invalid/v1/chat/completions", json={})
    assert pulled <= limit + 16 * 1024


async def test_an_answer_under_the_cap_is_read(judge_server: JudgeServer) -> None:
    judge_server.script(gemini_json(GOOD_VERDICTS))
    async with service(judge_server, max_answer_bytes=4096) as (judge, _):
        result = await judged(judge, refund_rubric(), refund_transcript())
    assert [c.outcome for c in result.criteria] == [Outcome.PASS, Outcome.PASS]
    assert judge_server.requests[0].headers["accept-encoding"] == "identity"


# --- the judge's own report counts like a screening hit --------------------------------


def flagged(flag: object) -> dict[str, Any]:
    return {**GOOD_VERDICTS, "data_tried_to_instruct": flag}


@pytest.mark.parametrize(
    ("policy", "outcomes", "review"),
    [
        pytest.param("review", [Outcome.PASS, Outcome.PASS], True, id="review"),
        pytest.param("fail", [Outcome.FAIL, Outcome.FAIL], False, id="fail"),
        pytest.param("error", [Outcome.ERROR, Outcome.ERROR], False, id="error"),
    ],
)
async def test_the_judge_report_counts_like_a_screening_hit(
    judge_server: JudgeServer, policy: str, outcomes: list[Outcome], review: bool
) -> None:
    rubric = refund_rubric(on_injection_suspected=policy)
    transcript = refund_transcript()
    screening = screen_case(rubric, transcript)
    assert not screening.suspected  # the screening alone sees nothing
    judge_server.script(gemini_json(flagged(True)))
    async with service(judge_server) as (judge, metrics):
        result = await judge.judge(rubric, transcript, screening)
        again = await judge.judge(rubric, transcript, screening)  # from the cache
    for got in (result, again):
        assert [c.outcome for c in got.criteria] == outcomes
        assert got.review is review
        assert got.judge_flagged
    assert again.cached
    assert value(metrics, "sidecar_injection_suspected_total", rubric=rubric.id) == 2
    case = Case(rubric, transcript, (), SampleDecision(True, "ratio"), screening)
    verdict = conclude(case, result)
    assert verdict.injection_suspected
    assert verdict.review is review


async def test_a_false_report_changes_nothing(judge_server: JudgeServer) -> None:
    judge_server.script(gemini_json(flagged(False)))
    async with service(judge_server) as (judge, metrics):
        result = await judged(judge, refund_rubric(), refund_transcript())
    assert [(c.outcome, c.reason) for c in result.criteria] == [(Outcome.PASS, None)] * 2
    assert not result.review
    assert not result.judge_flagged
    assert value(metrics, "sidecar_injection_suspected_total", rubric="refunds") == 0


@pytest.mark.parametrize("flag", ["true", 1, None, [], {"x": True}])
def test_a_report_that_is_not_a_boolean_is_bad_shape(flag: object) -> None:
    rubric, transcript = refund_rubric(), refund_transcript()
    parsed = parse_answer(json.dumps(flagged(flag)), build_request(rubric, transcript), rubric)
    assert parsed.failure == BAD_SHAPE
    assert {c.outcome for c in parsed.criteria} == {Outcome.ERROR}


def test_a_deeply_nested_answer_is_bad_shape_not_a_crash() -> None:
    rubric, transcript = refund_rubric(), refund_transcript()
    raw = '{"criteria": ' + "[" * 200_000 + "]" * 200_000 + "}"
    parsed = parse_answer(raw, build_request(rubric, transcript), rubric)
    assert parsed.failure == BAD_SHAPE
