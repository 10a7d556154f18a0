"""Fixtures and builders shared by the judge tests (import what you use)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from sidecar.model import ToolCall, Transcript
from sidecar.rubric import Rubric
from tests.gemini_server import JudgeServer

CRITERIA = ("grounded", "polite")
JUDGE_MODEL = "gemini-2.5-flash"
ANSWER = "Your refund of 42.50 EUR for order A-1001 was approved and will arrive in 3 days."
TOOL_RESULT = '{"order": "A-1001", "refund": "approved", "amount": 42.5}'


@pytest.fixture
def judge_server() -> Iterator[JudgeServer]:
    server = JudgeServer().start()
    try:
        yield server
    finally:
        server.stop()


class FakeClock:
    """Monotonic time that only moves when told to, or when slept on."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


def make_rubric(
    model: str = JUDGE_MODEL,
    criteria: tuple[str, ...] = CRITERIA,
    on_injection_suspected: str = "review",
    **extra: Any,
) -> Rubric:
    return Rubric.model_validate(
        {
            "id": "refunds",
            "version": "3",
            "judge": {
                "model": model,
                "instructions": "Grade the support agent's refund answer.",
                "criteria": [
                    {
                        "name": name,
                        "definition": f"The answer is {name}.",
                        "pass_example": f"A {name} answer.",
                        "fail_example": f"An answer that is not {name}.",
                    }
                    for name in criteria
                ],
                "on_injection_suspected": on_injection_suspected,
            },
            **extra,
        }
    )


def make_transcript(
    answer: str = ANSWER,
    user_input: str = "Where is my refund for order A-1001?",
    tool_result: str = TOOL_RESULT,
    trace_id: str = "4bf92f3577b34da6a3ce929d0e0e4736",
) -> Transcript:
    return Transcript(
        trace_id=trace_id,
        root_span_id="00f067aa0ba902b7",
        agent_name="support",
        agent_version="1.4.0",
        user_input=user_input,
        tool_calls=(
            ToolCall(
                name="lookup_order",
                call_id="call-1",
                arguments='{"order": "A-1001"}',
                result=tool_result,
            ),
        ),
        answer=answer,
        models=("gemini-2.0-flash",),
    )


def verdicts(*entries: tuple[str, str, str]) -> dict[str, Any]:
    """``("grounded", "PASS", "quote")`` tuples as the judge's JSON answer."""
    return {
        "criteria": [
            {"criterion": name, "evidence": evidence, "verdict": verdict}
            for name, verdict, evidence in entries
        ]
    }


GOOD_VERDICTS = verdicts(
    ("grounded", "PASS", "refund of 42.50 EUR for order A-1001 was approved"),
    ("polite", "PASS", "NONE"),
)
