"""What the judge tests share besides records: a manual clock, the judge's answers, credentials.

Records (the refund rubric and transcript the judge grades) come from
``tests.builders``; the ``judge_server`` and ``no_judge_credentials`` fixtures
from ``tests/conftest.py``.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from sidecar.judge.config import JudgeSettings

# Every variable that lets a judge authenticate or chooses where it goes: google-genai's
# (Gemini API and Vertex AI, with google-auth's), the OpenAI-compatible backend's key, and
# sidecar's own judge settings (SIDECAR_JUDGE__*, cleared by prefix).
JUDGE_CREDENTIALS = (
    "GOOGLE_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_GEMINI_BASE_URL",
    "GOOGLE_GENAI_API_VERSION",
    "GOOGLE_GENAI_USE_VERTEXAI",
    "GOOGLE_GENAI_USE_ENTERPRISE",
    "GOOGLE_CLOUD_PROJECT",
    "GOOGLE_CLOUD_LOCATION",
    "GOOGLE_VERTEX_BASE_URL",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GCLOUD_PROJECT",
    JudgeSettings().openai_api_key_env,
)
JUDGE_SETTINGS_PREFIX = "SIDECAR_JUDGE__"


def clear_judge_credentials(env: pytest.MonkeyPatch) -> None:
    """Unset every judge credential for as long as ``env`` is not undone."""
    for name in (
        *JUDGE_CREDENTIALS,
        *(n for n in os.environ if n.startswith(JUDGE_SETTINGS_PREFIX)),
    ):
        env.delenv(name, raising=False)


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


def verdicts(*entries: tuple[str, str, str]) -> dict[str, Any]:
    """``("grounded", "PASS", "quote")`` tuples as the judge's JSON answer."""
    return {
        "criteria": [
            {"criterion": name, "evidence": evidence, "verdict": verdict}
            for name, verdict, evidence in entries
        ]
    }


# The judge's answer that passes ``refund_transcript()`` on ``refund_rubric()``.
GOOD_VERDICTS = verdicts(
    ("grounded", "PASS", "refund of 42.50 EUR for order A-1001 was approved"),
    ("polite", "PASS", "NONE"),
)
