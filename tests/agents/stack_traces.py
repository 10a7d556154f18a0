"""Live recordings of the agent stacks, for the tests.

Each stack runs in a locked environment of its own (``tests/agents/<stack>_env``,
made by ``scripts/bootstrap <stack>``), as a subprocess,
``python -m tests.agents.<module> MODE``, which prints one recording per
scenario (``tests.agents.recording``). The interpreter is
``$SIDECAR_<STACK>_PYTHON`` (scripts/test sets it), else
``.venv-<stack>/bin/python``. Each (stack, mode) runs once per test session; a
missing environment or a failed run fails the tests that need it, with the
reason.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from sidecar.ingest.decode import decode
from tests.agents.openai_traces import Run
from tests.agents.runner import REPO, run_agent


@dataclass(frozen=True, slots=True)
class Stack:
    """One agent stack: its script, its environment, and what its capture modes do."""

    name: str  # as scripts/bootstrap spells it
    module: str  # tests.agents.<module>
    title: str  # as the failure messages name it
    # Modes whose recordings carry content, and modes that withhold it, each with
    # a phrase the ERROR details must contain (the setting to change).
    content: tuple[str, ...]
    withheld: Mapping[str, str]

    @property
    def python_env(self) -> str:
        return f"SIDECAR_{self.name.upper().replace('-', '_')}_PYTHON"

    def python(self, environ: Mapping[str, str] = os.environ) -> Path:
        default = REPO / f".venv-{self.name}" / "bin" / "python"
        return Path(environ.get(self.python_env) or default)


STACKS = {
    stack.name: stack
    for stack in (
        Stack(
            "pydantic-ai",
            "pydantic_ai_agent",
            "the pydantic-ai agent",
            content=("v5", "v6", "structured"),
            withheld={"no-content": "include_content=True"},
        ),
        Stack(
            "strands",
            "strands_agent",
            "the Strands agent",
            content=("events", "latest", "latest-attributes"),
            withheld={"redacted": "gen_ai_unredacted_attributes"},
        ),
        Stack(
            "openai-agents",
            "openai_agents_agent",
            "the OpenAI Agents SDK agent",
            content=("oi",),
            withheld={"oi-hidden": "OPENINFERENCE_HIDE_INPUTS"},
        ),
        Stack(
            "langgraph",
            "langgraph_agent",
            "the LangGraph agent",
            content=("traceloop", "traceloop-events", "oi"),
            withheld={
                "traceloop-off": "TRACELOOP_TRACE_CONTENT=true",
                "oi-hidden": "OPENINFERENCE_HIDE_INPUTS",
            },
        ),
    )
}


def stack_runs(stack: str, mode: str) -> dict[str, Run]:
    """Every live scenario's recording of ``stack`` in ``mode``, cached per session."""
    found = STACKS[stack]
    runs = _run(found.name, mode, found.python())
    if isinstance(runs, str):
        pytest.fail(runs, pytrace=False)
    return runs


@functools.cache
def _run(name: str, mode: str, python: Path) -> dict[str, Run] | str:
    stack = STACKS[name]
    # The recording sets each mode's variables itself; none leak in from the test run.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OTEL_", "OPENINFERENCE_", "TRACELOOP_"))
    }
    done = run_agent(
        stack.title,
        f"{stack.name} environment",
        [str(python), "-m", f"tests.agents.{stack.module}", mode],
        f"run scripts/bootstrap {stack.name}, or set {stack.python_env} to its interpreter",
        env=env,
    )
    if isinstance(done, str):
        return done
    runs: dict[str, Run] = {}
    for line in done.stdout.splitlines():
        item = json.loads(line)
        runs[item["scenario"]] = Run(item["scenario"], tuple(item["traces"]), tuple(item["logs"]))
    return runs


def run_trace_id(run: Run) -> str:
    """The trace of the agent run: the one with the most spans.

    LangGraph under OpenLLMetry also records building the graph
    (``create_agent``) as a trace of its own.
    """
    traces = [decode(line.encode()) for line in run.traces]
    return max(traces, key=len)[0].trace_id
