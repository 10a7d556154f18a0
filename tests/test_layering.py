"""The core is pure: only adapters import the I/O libraries.

Test modules stand alone too: none imports another, so what tests share lives
in helper modules (``tests/builders.py``, ``tests/judge_fixtures.py``, ...).
Imports are read with ``ast`` (``tests.imports``: every ``import`` anywhere in
the module, also inside functions and ``TYPE_CHECKING`` blocks), so nothing is
executed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.imports import REPO, imported_modules, imports_of, module_name, within

PACKAGE = REPO / "sidecar"
TESTS = REPO / "tests"

# Libraries that do I/O or hold process-wide state: adapters only.
ADAPTER_ONLY = (
    "aiokafka",
    "google.genai",
    "opentelemetry.sdk",
    "opentelemetry.exporter",
    "prometheus_client",
    "httpx",
    "httpx2",
    "grpc",
)

# Composition roots wire adapters to the core; nothing else may import sidecar.adapters.
COMPOSITION_ROOTS = (
    "sidecar.engine.replica",
    "sidecar.commands._wiring",
    "sidecar.cli",
    "sidecar.commands",
)

# Known departures, listed so they stay visible; strict xfail flags them once fixed.
KNOWN_ADAPTER_IMPORTS: dict[str, str] = {}


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_the_package_was_found() -> None:
    assert len(MODULES) > 10
    assert {"sidecar.ingest.decode", "sidecar.adapters.kafka"} <= {module_name(p) for p in MODULES}


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, id=module_name(p))
        for p in MODULES
        if not within(module_name(p), ("sidecar.adapters",))
    ],
)
def test_only_adapters_import_io_libraries(path: Path) -> None:
    forbidden = sorted(n for n in imports_of(path) if within(n, ADAPTER_ONLY))
    assert forbidden == [], (
        f"{module_name(path)} imports {forbidden}; move that into sidecar/adapters/"
    )


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(
            p,
            id=module_name(p),
            marks=[pytest.mark.xfail(reason=KNOWN_ADAPTER_IMPORTS[module_name(p)], strict=True)]
            if module_name(p) in KNOWN_ADAPTER_IMPORTS
            else [],
        )
        for p in MODULES
        if not within(module_name(p), ("sidecar.adapters", *COMPOSITION_ROOTS))
    ],
)
def test_only_composition_roots_import_adapters(path: Path) -> None:
    adapters = sorted(n for n in imports_of(path) if within(n, ("sidecar.adapters",)))
    assert adapters == [], f"{module_name(path)} is core but imports {adapters}"


@pytest.mark.parametrize(
    ("source", "offending"),
    [
        pytest.param("import aiokafka", True, id="plain-import"),
        pytest.param("from google import genai", True, id="from-package-import-module"),
        pytest.param("from google.genai import types", True, id="from-module-import-name"),
        pytest.param("import opentelemetry.sdk.trace as t", True, id="import-as"),
        pytest.param("def f():\n    import prometheus_client", True, id="inside-function"),
        pytest.param(
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import httpx",
            True,
            id="type-checking-block",
        ),
        pytest.param("import grpc.aio", True, id="submodule"),
        pytest.param(
            "from opentelemetry.proto.trace.v1 import trace_pb2", False, id="otlp-proto-ok"
        ),
        pytest.param("from opentelemetry import trace", False, id="otel-api-ok"),
        pytest.param("import grpcio_tools", False, id="prefix-is-not-a-package"),
        pytest.param("from google.protobuf import message", False, id="protobuf-ok"),
    ],
)
def test_import_reader(source: str, offending: bool) -> None:
    assert any(within(n, ADAPTER_ONLY) for n in imported_modules(source)) is offending


# --- test modules stand alone ------------------------------------------------------------

TEST_FILES = sorted(TESTS.rglob("*.py"))
TEST_MODULES = tuple(module_name(p) for p in TEST_FILES if p.name.startswith("test_"))


def test_the_test_modules_were_found() -> None:
    assert len(TEST_MODULES) > 30
    assert {"tests.test_layering", "tests.integration.test_kafka_pipeline"} <= set(TEST_MODULES)


def test_no_test_module_imports_another() -> None:
    # What tests share goes into a helper module; a test module imported by another
    # would also run its tests' module-level set-up there, and hide who uses what.
    offending = {
        module_name(path): found
        for path in TEST_FILES
        if (found := sorted(n for n in imports_of(path) if within(n, TEST_MODULES)))
    }
    assert offending == {}, "move what they share into a helper module (e.g. tests/builders.py)"


@pytest.mark.parametrize(
    ("source", "package", "expected"),
    [
        pytest.param("from tests.test_x import y", "tests", True, id="from-test-module"),
        pytest.param("import tests.test_x", "tests", True, id="import-test-module"),
        pytest.param("from tests import test_x", "tests", True, id="from-package-import-module"),
        pytest.param("from .test_x import y", "tests", True, id="relative"),
        pytest.param("from . import test_x", "tests", True, id="relative-package"),
        pytest.param(
            "from ..test_x import y", "tests.integration", True, id="relative-parent-package"
        ),
        pytest.param(
            "from tests.integration.test_x import y", "tests", True, id="nested-test-module"
        ),
        pytest.param("from tests.builders import transcript", "tests", False, id="helper-module"),
        pytest.param("from tests import builders", "tests", False, id="helper-from-package"),
        pytest.param("from .harness import free_port", "tests.integration", False, id="helper-rel"),
        pytest.param("import test_x", "tests", False, id="top-level-name-is-not-ours"),
    ],
)
def test_test_import_reader(source: str, package: str, expected: bool) -> None:
    test_modules = ("tests.test_x", "tests.integration.test_x")
    found = [n for n in imported_modules(source, package) if within(n, test_modules)]
    assert bool(found) is expected


# -- the layout ---------------------------------------------------------------------------

# File names that two modules share, listed so they stay visible (a name says what a module is).
KNOWN_SHARED_NAMES: dict[str, str] = {}


def test_module_file_names_are_distinct() -> None:
    seen: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name != "__init__.py":
            seen.setdefault(path.name, []).append(str(path.relative_to(REPO)))
    shared = {name: sorted(paths) for name, paths in seen.items() if len(paths) > 1}
    assert set(shared) == set(KNOWN_SHARED_NAMES), shared
