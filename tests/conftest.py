"""Shared fixtures: the real Kafka broker started by scripts/test, paths to shared data, the judge.

``judge_server`` is an in-process Gemini/OpenAI-compatible server
(``tests.gemini_server``); ``no_judge_credentials`` unsets every variable a
judge could authenticate with and returns the ``MonkeyPatch`` that did it, so a
test may set the one credential it means to use.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import realparts
from tests.gemini_server import JudgeServer
from tests.judge_fixtures import clear_judge_credentials

# Fixtures defined in helper modules, for every test module.
pytest_plugins = ["tests.canary_fixtures"]

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(
            f"public test data not present at {SHARED_DATA} (only in the development workspace)"
        )
    return SHARED_DATA


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    return realparts.kafka_bootstrap()


@pytest.fixture
def topic_prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def judge_server() -> Iterator[JudgeServer]:
    server = JudgeServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def no_judge_credentials(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    clear_judge_credentials(monkeypatch)
    return monkeypatch


@pytest.fixture
def no_sidecar_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """No SIDECAR_* variable of the machine (e.g. the test runner's) leaks into a test."""
    for name in list(os.environ):
        if name.startswith("SIDECAR_"):
            monkeypatch.delenv(name)
