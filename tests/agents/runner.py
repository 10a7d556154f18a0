"""Running an agent script in its own environment, as ``adk_traces`` and ``openai_traces`` do.

The agent's interpreter runs ``python -m tests.agents.<agent> ...`` from the
repository root; its stdout is the recording. Whatever goes wrong (no such
interpreter, a timeout, a non-zero exit) comes back as a message that says
how to set the environment up, for the tests that need it to fail with.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 300


def run_agent(
    agent: str,
    environment: str,
    command: Sequence[str],
    setup: str,
    *,
    extra: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str] | str:
    """Run ``command`` (its interpreter first) with ``extra`` arguments; why not, if it failed.

    ``agent`` and ``environment`` name them in the message ("the ADK 2 agent",
    "ADK 2 environment"); ``setup`` says how to make the environment.
    """
    python = Path(command[0])
    if not python.is_file():
        return f"no {environment}: {python} does not exist; {setup}"
    try:
        done = subprocess.run(
            [*command, *extra],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
            env=None if env is None else dict(env),
        )
    except subprocess.TimeoutExpired:
        return f"{agent} ({python}) did not finish within {RUN_TIMEOUT_S}s"
    if done.returncode != 0:
        return (
            f"{agent} ({' '.join(command)}) exited with {done.returncode}; {setup}. "
            f"Its stderr ends:\n{done.stderr[-3000:]}"
        )
    return done
