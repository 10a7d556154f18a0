"""Live traces (and logs) of the OpenAI agent loop, for the tests.

The OpenAI client and its instrumentations run in an environment of their
own (``tests/agents/openai_env``, made by ``scripts/bootstrap openai``; its
pyproject notes the pins that keep them apart from the project's) as a
subprocess, ``python -m tests.agents.openai_agent MODE``, and hand over
OTLP/JSON lines, as a Collector's file exporter would. The interpreter is
``$SIDECAR_OPENAI_PYTHON`` (scripts/test sets it), else
``.venv-openai/bin/python``. Each mode runs once per test session; a missing
environment or a failed run fails the tests that need it, with the reason.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.agents.runner import REPO, run_agent

OPENAI_PYTHON_ENV = "SIDECAR_OPENAI_PYTHON"
DEFAULT_OPENAI_PYTHON = REPO / ".venv-openai" / "bin" / "python"


@dataclass(frozen=True)
class Run:
    """One scenario's recording: OTLP/JSON trace lines (one per trace) and logs lines."""

    scenario: str
    traces: tuple[str, ...]
    logs: tuple[str, ...]


def openai_python(environ: Mapping[str, str] = os.environ) -> Path:
    return Path(environ.get(OPENAI_PYTHON_ENV) or DEFAULT_OPENAI_PYTHON)


def openai_runs(mode: str, *, root: bool = True) -> dict[str, Run]:
    """Every scenario's recording in ``mode`` (see ``openai_agent.MODES``), cached per session."""
    runs = _run(mode, root, openai_python())
    if isinstance(runs, str):
        pytest.fail(runs, pytrace=False)
    return runs


@functools.cache
def _run(mode: str, root: bool, python: Path) -> dict[str, Run] | str:
    command = [str(python), "-m", "tests.agents.openai_agent", mode]
    if not root:
        command.append("--no-root")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENINFERENCE_"))}
    done = run_agent(
        "the OpenAI agent",
        "OpenAI agent environment",
        command,
        "run scripts/bootstrap openai, or set SIDECAR_OPENAI_PYTHON to its interpreter",
        env=env,
    )
    if isinstance(done, str):
        return done
    runs: dict[str, Run] = {}
    for line in done.stdout.splitlines():
        item = json.loads(line)
        runs[item["scenario"]] = Run(item["scenario"], tuple(item["traces"]), tuple(item["logs"]))
    return runs
