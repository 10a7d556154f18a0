"""Dependencies go one way: no import cycles, the wire records above the domain.

Imports are read with ``ast`` (``tests.imports``: every import statement,
also inside functions and ``TYPE_CHECKING`` blocks), so a cycle that exists
only for type checking counts as a cycle. Module file names are distinct too,
so a name in a traceback or a diff says which module it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from tests.imports import REPO, imports_of, module_name, within

PACKAGE = REPO / "sidecar"
MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}

# What sidecar.wire may not import: it reads the domain types (sidecar.model, the
# Verdict of sidecar.evaluate.verdict) and is read by the rest, never the reverse.
NOT_FOR_WIRE = (
    "sidecar.engine",
    "sidecar.adapters",
    "sidecar.commands",
    "sidecar.conversation",
    "sidecar.calibrate",
    "sidecar.drift",
    "sidecar.ingest",
    "sidecar.judge",
    "sidecar.evaluate.pipeline",
)
# The stages that make verdicts know no record format.
CORE = ("sidecar.model", "sidecar.evaluate", "sidecar.ingest", "sidecar.judge")
# Core modules that genuinely read a record (module -> why); none today.
WIRE_READERS: dict[str, str] = {}


def import_graph() -> dict[str, list[str]]:
    """Each sidecar module and the sidecar modules it imports (itself left out)."""
    return {
        name: sorted(n for n in imports_of(path) if n in MODULES and n != name)
        for name, path in MODULES.items()
    }


def find_cycle(graph: Mapping[str, Sequence[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a path that ends where it starts, or None."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path: list[str] = [start]
        on_path = {start}
        pending = [iter(graph.get(start, ()))]
        while pending:
            following = next(pending[-1], None)
            if following is None:
                done.add(path[-1])
                on_path.discard(path.pop())
                pending.pop()
            elif following in on_path:
                return [*path[path.index(following) :], following]
            elif following not in done:
                path.append(following)
                on_path.add(following)
                pending.append(iter(graph.get(following, ())))
    return None


@pytest.mark.parametrize(
    ("graph", "cycle"),
    [
        pytest.param({"a": ["b"], "b": ["a"]}, ["a", "b", "a"], id="two-modules"),
        pytest.param({"a": ["b"], "b": ["c"], "c": ["a"]}, ["a", "b", "c", "a"], id="three"),
        pytest.param({"a": ["b", "c"], "b": ["c"], "c": []}, None, id="diamond-is-no-cycle"),
        pytest.param({"x": ["y"], "y": ["z"], "z": ["y"]}, ["y", "z", "y"], id="below-the-start"),
        pytest.param({}, None, id="empty"),
    ],
)
def test_find_cycle(graph: dict[str, list[str]], cycle: list[str] | None) -> None:
    assert find_cycle(graph) == cycle


def test_the_graph_was_read() -> None:
    graph = import_graph()
    assert "sidecar.evaluate.verdict" in graph["sidecar.wire.verdicts"]
    assert "sidecar.evaluate.rubric" in graph["sidecar.drift.fingerprint"]


def test_no_module_imports_one_that_imports_it_back() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, id=n) for n, p in MODULES.items() if within(n, ("sidecar.wire",))],
)
def test_wire_depends_only_on_the_domain(path: Path) -> None:
    found = sorted(n for n in imports_of(path) if within(n, NOT_FOR_WIRE))
    assert found == [], f"{module_name(path)} imports {found}; records read the domain types only"


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, id=n)
        for n, p in MODULES.items()
        if within(n, CORE) and n not in WIRE_READERS
    ],
)
def test_the_core_knows_no_record_format(path: Path) -> None:
    found = sorted(n for n in imports_of(path) if within(n, ("sidecar.wire",)))
    assert found == [], (
        f"{module_name(path)} imports {found}; the emitter turns verdicts into records, "
        "or list the module in WIRE_READERS with the record it reads"
    )
