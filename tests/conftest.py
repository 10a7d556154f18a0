"""Shared fixtures: the real Kafka broker started by scripts/test, and paths to shared data."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests import realparts

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
