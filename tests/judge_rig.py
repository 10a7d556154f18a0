"""A judge service on the local Gemini-protocol server, for tests that drive the real client.

``service`` yields a started :class:`JudgeService` (one attempt, a fake clock) and its
metrics; ``judged`` screens and judges one case; ``value`` reads one metric sample.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sidecar.adapters.judge_backends import make_backend
from sidecar.adapters.prometheus import Metrics
from sidecar.evaluate.rubric import Rubric
from sidecar.judge import JudgeResult, screen_case
from sidecar.judge.config import JudgeSettings
from sidecar.judge.service import JudgeService
from sidecar.model import Transcript
from tests.gemini_server import JudgeServer
from tests.judge_fixtures import FakeClock


@asynccontextmanager
async def service(
    server: JudgeServer, backend: str = "gemini", **settings: Any
) -> AsyncIterator[tuple[JudgeService, Metrics]]:
    config = JudgeSettings.model_validate(
        {
            "backend": backend,
            "base_url": server.base_url,
            "openai_base_url": server.openai_base_url,
            "timeout_s": 20.0,
            "max_attempts": 1,
            **settings,
        }
    )
    metrics = Metrics()
    clock = FakeClock()
    environ = {"OPENAI_API_KEY": "sk-test"}
    judge = JudgeService(
        make_backend(config, environ) if backend == "openai" else _gemini(config),
        config,
        metrics,
        clock=clock,
        sleep=clock.sleep,
    )
    async with judge:
        yield judge, metrics


def _gemini(config: JudgeSettings) -> Any:
    # make_backend with an explicit key: google-genai reads no environment in tests.
    from sidecar.adapters.judge_backends import GeminiBackend

    return GeminiBackend(
        base_url=config.base_url,
        api_key="test-key",
        timeout_s=config.timeout_s,
        max_answer_bytes=config.max_answer_bytes,
    )


async def judged(judge: JudgeService, rubric: Rubric, transcript: Transcript) -> JudgeResult:
    return await judge.judge(rubric, transcript, screen_case(rubric, transcript))


def value(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0
