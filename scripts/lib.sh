# Shared settings for the project's scripts (sourced, not run).
#
# Where things go, each overridable from the environment:
#   SIDECAR_CACHE     test infrastructure: Kafka jars, the Collector, uv   (~/.cache/sidecar)
#   SIDECAR_VENV      the project's virtualenv                           (<repo>/.venv)
#   SIDECAR_ADK_VENV  google-adk's own virtualenv for the agent tests    (<repo>/.venv-adk)
#   SIDECAR_OPENAI_VENV  openai + instrumentations, for the agent tests  (<repo>/.venv-openai)
#   SIDECAR_PYDANTIC_AI_VENV, SIDECAR_STRANDS_VENV, SIDECAR_OPENAI_AGENTS_VENV,
#   SIDECAR_LANGGRAPH_VENV  one per further agent stack       (<repo>/.venv-<stack>)
# Nothing here writes inside the repository except the virtualenvs.

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export SIDECAR_CACHE="${SIDECAR_CACHE:-$HOME/.cache/sidecar}"
export SIDECAR_VENV="${SIDECAR_VENV:-$root/.venv}"
export SIDECAR_ADK_VENV="${SIDECAR_ADK_VENV:-$root/.venv-adk}"
export SIDECAR_OPENAI_VENV="${SIDECAR_OPENAI_VENV:-$root/.venv-openai}"
export SIDECAR_PYDANTIC_AI_VENV="${SIDECAR_PYDANTIC_AI_VENV:-$root/.venv-pydantic-ai}"
export SIDECAR_STRANDS_VENV="${SIDECAR_STRANDS_VENV:-$root/.venv-strands}"
export SIDECAR_OPENAI_AGENTS_VENV="${SIDECAR_OPENAI_AGENTS_VENV:-$root/.venv-openai-agents}"
export SIDECAR_LANGGRAPH_VENV="${SIDECAR_LANGGRAPH_VENV:-$root/.venv-langgraph}"
# The agent stacks of tests/test_live_stacks.py (scripts/bootstrap names).
agent_stacks="pydantic-ai strands openai-agents langgraph"

# The uv release that installs the locked environments (uv.lock).
uv_version="0.13.8"

say() { echo "$(basename "$0"): $*" >&2; }

# Run one long step, saying what it is before and how long it took after.
step() {
    local what="$1"; shift
    local started=$SECONDS
    say "$what ..."
    "$@"
    say "$what: done in $((SECONDS - started)) s"
}

# The Python that the virtualenvs are made from: $PYTHON, else python3 (3.11+).
base_python() {
    local python="${PYTHON:-python3}"
    if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        say "Python 3.11+ is needed (set PYTHON=/path/to/python3.11 or newer)"
        exit 2
    fi
    # The interpreter itself, not a shim in front of it: uv recreates an
    # environment whose interpreter path differs from the one it is asked for.
    "$python" -c 'import sys; print(sys.executable)'
}

# Path of a uv binary of $uv_version, installed from PyPI into the cache on first use.
ensure_uv() {
    local home="$SIDECAR_CACHE/uv-$uv_version"
    if [ ! -x "$home/bin/uv" ]; then
        say "installing uv $uv_version into $home"
        rm -rf "$home"
        "$(base_python)" -m venv "$home"
        "$home/bin/python" -m pip install -q --disable-pip-version-check "uv==$uv_version" >&2
    fi
    echo "$home/bin/uv"
}
