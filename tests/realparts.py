"""The real services and tools the suite runs against, each found or failed for.

scripts/test installs or starts every one of them and says where they are
(``SIDECAR_TEST_KAFKA``, ``SIDECAR_OTELCOL``, ``SIDECAR_ADK_PYTHON``; promtool
and prometheus on PATH). A missing part fails the test that needs it with the
reason and the command that provides it: a skip would hide a broken set-up.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("SIDECAR_CACHE", Path.home() / ".cache" / "sidecar"))


def kafka_bootstrap() -> str:
    bootstrap = os.environ.get("SIDECAR_TEST_KAFKA")
    if not bootstrap:
        pytest.fail(
            "no Kafka broker (SIDECAR_TEST_KAFKA is unset): run the suite with scripts/test, "
            "which starts Apache Kafka",
            pytrace=False,
        )
    return bootstrap


def otelcol() -> Path:
    binary = Path(os.environ.get("SIDECAR_OTELCOL", CACHE / "otelcol" / "otelcol-sidecar"))
    if not binary.is_file():
        pytest.fail(
            f"no OpenTelemetry Collector at {binary}: scripts/build-collector builds it "
            "(scripts/test does)",
            pytrace=False,
        )
    return binary


def tool(name: str) -> str:
    """A binary from Debian's prometheus package (``prometheus``, ``promtool``)."""
    found = shutil.which(name)
    if found is None:
        pytest.fail(
            f"{name} not on PATH: scripts/install-prometheus installs it (scripts/test does)",
            pytrace=False,
        )
    return found
