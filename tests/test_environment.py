"""The environment is what the lock says, and the runtime declares only what it uses."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.imports import REPO as ROOT
from tests.imports import imports_of, within

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))

# Distribution name -> the import it provides. A new runtime dependency needs an entry.
IMPORTS = {
    "aiokafka": "aiokafka",
    "google-genai": "google.genai",
    "google-re2": "re2",
    "httpx2": "httpx2",
    "jsonschema": "jsonschema",
    "opentelemetry-api": "opentelemetry.trace",
    "opentelemetry-sdk": "opentelemetry.sdk",
    "opentelemetry-exporter-otlp": "opentelemetry.exporter.otlp",
    "opentelemetry-proto": "opentelemetry.proto",
    "prometheus-client": "prometheus_client",
    "protobuf": "google.protobuf",
    "pydantic": "pydantic",
    "pydantic-settings": "pydantic_settings",
    "pyyaml": "yaml",
    "rich": "rich",
}


def _imported_modules() -> set[str]:
    return {name for path in (ROOT / "sidecar").rglob("*.py") for name in imports_of(path)}


@pytest.mark.parametrize(
    "requirement", PYPROJECT["project"]["dependencies"], ids=lambda r: Requirement(r).name
)
def test_runtime_dependency_is_imported(requirement: str) -> None:
    name = Requirement(requirement).name.lower()
    assert name in IMPORTS, f"{name}: add the module it provides to IMPORTS"
    module = IMPORTS[name]
    imported = _imported_modules()
    assert any(within(m, (module,)) for m in imported), (
        f"{name} is declared but sidecar/ never imports {module}: drop it or move it to an extra"
    )


def test_matplotlib_is_an_optional_extra() -> None:
    runtime = {Requirement(r).name for r in PYPROJECT["project"]["dependencies"]}
    report = {Requirement(r).name for r in PYPROJECT["project"]["optional-dependencies"]["report"]}
    assert "matplotlib" not in runtime
    assert report == {"matplotlib"}


def _uv() -> str:
    uv = Path(sys.executable).with_name("uv")
    assert uv.is_file(), f"no uv beside {sys.executable}: scripts/bootstrap dev installs it"
    return str(uv)


AGENT_ENVS = sorted((ROOT / "tests" / "agents").glob("*_env"))


@pytest.mark.parametrize(
    "project", [ROOT, *AGENT_ENVS], ids=["sidecar", *(p.name for p in AGENT_ENVS)]
)
def test_lock_matches_pyproject(project: Path) -> None:
    # Resolution reads package metadata from the index (or uv's cache); writes nothing.
    result = subprocess.run(
        [_uv(), "lock", "--check", "--project", str(project)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1"},
        check=False,
    )
    assert result.returncode == 0, (
        f"{project / 'uv.lock'} does not match its pyproject.toml: run `uv lock` there and "
        f"commit both\n{result.stderr}"
    )
