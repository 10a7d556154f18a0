"""Google ADK traces for the tests: live ADK 2 runs, and recorded ADK 1.14 runs.

ADK 2 needs google-genai 2.x and sidecar google-genai 3, so the agent runs in
an environment of its own (``tests/agents/adk_env``, made by ``scripts/bootstrap
adk``) as a subprocess, ``python -m tests.agents.adk_agent``, and hands over
OTLP/JSON lines, as a Collector's file exporter would. The interpreter is
``$SIDECAR_ADK_PYTHON`` (scripts/test sets it), else ``.venv-adk/bin/python``.
Each set of scenarios runs once per test session and capture mode
(:func:`adk2_run`: ``SPAN_ONLY``, the default, ``EVENT_ONLY``,
``SPAN_AND_EVENT`` or ``default``, ADK's no-content default; see
``adk_agent.CAPTURE_MODES``), and hands over the log records ADK emitted too;
a missing environment or a failed run fails the tests that need it, with the
reason.

ADK 1.x is no longer installable next to ADK 2, so its traces are the ones
recorded from ADK 1.14 in ``tests/data/adk1`` (see the README there).
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from sidecar.ingest.decode import decode
from sidecar.ingest.decode_logs import decode_logs
from sidecar.model import LogRecord, Span
from tests.agents.refund_shop import SCENARIOS, SESSIONS
from tests.agents.runner import REPO, run_agent

ADK_PYTHON_ENV = "SIDECAR_ADK_PYTHON"
DEFAULT_ADK_PYTHON = REPO / ".venv-adk" / "bin" / "python"
ADK1_DATA = REPO / "tests" / "data" / "adk1"
ALL = tuple(s.name for s in SCENARIOS)


def adk_python(environ: Mapping[str, str] = os.environ) -> Path:
    return Path(environ.get(ADK_PYTHON_ENV) or DEFAULT_ADK_PYTHON)


CAPTURE_MODES = ("SPAN_ONLY", "EVENT_ONLY", "SPAN_AND_EVENT", "default")


@dataclass(frozen=True, slots=True)
class AdkRun:
    """One scenario's live run: its trace and its log records, each one OTLP/JSON line.

    ``logs_line`` is ``{}`` when ADK emitted no log record.
    """

    trace_line: str
    logs_line: str

    def spans(self) -> list[Span]:
        return decode(self.trace_line.encode())

    def logs(self) -> list[LogRecord]:
        return [] if self.logs_line == "{}" else decode_logs(self.logs_line.encode())


def adk2_run(
    names: tuple[str, ...] = ALL, capture: str = "SPAN_ONLY", schema: str = "2"
) -> dict[str, AdkRun]:
    """Traces and logs of a live ADK 2 run of ``names`` in content-capture mode ``capture`` (cached).

    ``schema`` is ADK's telemetry schema: "2" (its default) or "1" (the legacy one).
    """
    runs = _run_adk2(names, adk_python(), capture, schema)
    if isinstance(runs, str):
        pytest.fail(runs, pytrace=False)
    return runs


def adk2_lines(names: tuple[str, ...] = ALL) -> dict[str, str]:
    """One OTLP/JSON line per scenario, from a live ADK 2 run of ``names`` (cached)."""
    return {name: run.trace_line for name, run in adk2_run(names).items()}


def adk2_session_lines(names: tuple[str, ...]) -> list[str]:
    """One OTLP/JSON line per turn of each named ``refund_shop.SESSIONS`` session (cached)."""
    runs = _run_adk2(("--sessions", *names), adk_python(), "SPAN_ONLY", "2")
    if isinstance(runs, str):
        pytest.fail(runs, pytrace=False)
    return [run.trace_line for run in runs.values()]


def adk2_spans(name: str) -> list[Span]:
    """The decoded spans of scenario ``name``'s ADK 2 run, in finish order (root last)."""
    return decode(adk2_lines()[name].encode())


def adk1_line(name: str) -> str:
    """The recorded ADK 1.14 trace of scenario ``name``: one OTLP/JSON line."""
    return (ADK1_DATA / f"{name}.jsonl").read_text(encoding="utf-8").strip()


def adk1_spans(name: str) -> list[Span]:
    return decode(adk1_line(name).encode())


@functools.cache
def _run_adk2(
    names: tuple[str, ...], python: Path, capture: str, schema: str
) -> dict[str, AdkRun] | str:
    # A failure is cached as its message too: the run would only fail again.
    with tempfile.TemporaryDirectory(prefix="sidecar-adk-") as tmp:
        logs_out = Path(tmp) / "logs.jsonl"
        done = run_agent(
            "the ADK 2 agent",
            "ADK 2 environment",
            [str(python), "-m", "tests.agents.adk_agent", "--capture", capture, "--schema", schema],
            "run scripts/bootstrap adk, or set SIDECAR_ADK_PYTHON to its interpreter",
            extra=["--logs-out", str(logs_out), *names],
        )
        if isinstance(done, str):
            return done
        log_lines = logs_out.read_text(encoding="utf-8").splitlines()
    lines = done.stdout.splitlines()
    if names[:1] == ("--sessions",):
        expected = sum(len(SESSIONS[name]) for name in names[1:])
        keys = [turn.name for name in names[1:] for turn in SESSIONS[name]]
    else:
        expected, keys = len(names), list(names)
    if len(lines) != expected or len(log_lines) != expected:
        return (
            f"the ADK 2 agent wrote {len(lines)} trace lines and {len(log_lines)} log lines "
            f"for {expected} runs"
        )
    return {key: AdkRun(line, logs) for key, line, logs in zip(keys, lines, log_lines, strict=True)}
