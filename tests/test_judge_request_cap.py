"""The cap on a conversation's judge request as a whole (``judge.max_request_chars``).

Over it the oldest turns are left out whole; the first user input and the most
recent turns stay whole, an empty OMITTED_TURNS block says which turns are not
shown, and the request's ``truncated`` names it so the criteria carry
``input_truncated``.
"""

from __future__ import annotations

import json

import pytest

from sidecar.conversation.merged import conversation_transcript
from sidecar.judge.config import DEFAULT_MAX_REQUEST_CHARS, JudgeSettings
from sidecar.judge.parse import INPUT_TRUNCATED, parse_answer
from sidecar.judge.prompt import OMITTED_TURNS, build_request
from sidecar.model import ToolCall, Transcript
from tests.builders import transcript
from tests.conversation_builders import conversation_rubric

JUDGE = {
    "model": "gemini-2.5-flash",
    "instructions": "Grade the support conversation.",
    "criteria": [
        {
            "name": "resolved",
            "definition": "The customer's problem is solved by the end.",
            "pass_example": "Refunded.",
            "fail_example": "Cannot help.",
        }
    ],
}
NONCE = "n0nce1234567"


def turns(count: int, size: int) -> list[Transcript]:
    return [
        transcript(
            ToolCall(name="lookup", arguments="{}", result=f"result {n} " + "r" * size),
            trace_id=f"{n:032x}",
            user_input=f"question {n} " + "q" * size,
            answer=f"answer {n} " + "a" * size,
        )
        for n in range(1, count + 1)
    ]


def test_a_short_conversation_is_shown_whole() -> None:
    r = conversation_rubric(judge=JUDGE)
    request = build_request(
        r, conversation_transcript(turns(3, 100)), NONCE, max_request_chars=50_000
    )
    assert [n for n, _ in request.blocks][:3] == [
        "TURN_1_USER_INPUT",
        "TURN_1_TOOL_CALLS",
        "TURN_1_RESPONSE",
    ]
    assert OMITTED_TURNS not in dict(request.blocks)
    assert request.truncated == ()


def test_over_the_cap_the_oldest_turns_are_left_out_and_the_cut_is_marked() -> None:
    r = conversation_rubric(judge=JUDGE)
    conversation = conversation_transcript(turns(200, 2_000))
    uncapped = build_request(r, conversation, NONCE, max_request_chars=10**9)
    assert len(uncapped.user_text) > 1_000_000  # 200 turns, 600 blocks
    request = build_request(r, conversation, NONCE, max_request_chars=60_000)
    assert len(request.user_text) <= 60_000
    blocks = dict(request.blocks)
    names = [n for n, _ in request.blocks]
    # The first user input, the note, then the most recent turns, each whole and in order.
    assert names[:2] == ["TURN_1_USER_INPUT", OMITTED_TURNS]
    assert "TURN_1_RESPONSE" not in blocks
    assert names[-3:] == ["TURN_200_USER_INPUT", "TURN_200_TOOL_CALLS", "TURN_200_RESPONSE"]
    kept = sorted({int(n.split("_")[1]) for n in names[2:]})
    assert kept == list(range(kept[0], 201))
    assert kept[0] > 2
    assert blocks["TURN_1_USER_INPUT"] == "question 1 " + "q" * 2_000
    assert blocks["TURN_200_RESPONSE"] == "answer 200 " + "a" * 2_000
    assert blocks[OMITTED_TURNS] == ""
    heading = f"{OMITTED_TURNS}: turns 2 to {kept[0] - 1} of 200 are not shown"
    assert heading in request.user_text
    assert f"<<<BEGIN {OMITTED_TURNS} {NONCE}>>>" in request.user_text
    assert "OMITTED_TURNS" in request.system_instruction
    assert request.truncated == (OMITTED_TURNS,)
    # The verdict's criteria say the judge saw only part of the data.
    answer = json.dumps(
        {
            "criteria": [{"criterion": "resolved", "evidence": "NONE", "verdict": "PASS"}],
            "data_tried_to_instruct": False,
        }
    )
    [criterion] = parse_answer(answer, request, r).criteria
    assert criterion.reason == INPUT_TRUNCATED


def test_the_last_turn_is_kept_even_when_it_alone_passes_the_cap() -> None:
    r = conversation_rubric(judge=JUDGE)
    request = build_request(
        r, conversation_transcript(turns(3, 20_000)), NONCE, max_request_chars=16_384
    )
    names = [n for n, _ in request.blocks]
    assert names == [
        "TURN_1_USER_INPUT",
        OMITTED_TURNS,
        "TURN_3_USER_INPUT",
        "TURN_3_TOOL_CALLS",
        "TURN_3_RESPONSE",
    ]
    assert "turn 2 of 3 is not shown" in request.user_text


def test_the_default_cap_bounds_a_conversation_at_the_turn_limit() -> None:
    r = conversation_rubric(judge=JUDGE)
    request = build_request(r, conversation_transcript(turns(200, 30_000)), NONCE)
    assert len(request.user_text) <= DEFAULT_MAX_REQUEST_CHARS
    assert request.truncated == (OMITTED_TURNS,)


def test_the_setting_is_validated() -> None:
    assert JudgeSettings().max_request_chars == DEFAULT_MAX_REQUEST_CHARS
    assert JudgeSettings(max_request_chars=100_000).max_request_chars == 100_000
    with pytest.raises(ValueError, match="max_request_chars"):
        JudgeSettings(max_request_chars=100)
