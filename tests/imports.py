"""What a module imports, read with ``ast`` so nothing is executed.

Every import statement counts, also inside functions and ``TYPE_CHECKING``
blocks. ``from a import b`` may load module ``a.b``, so both ``a`` and ``a.b``
are reported; relative imports are resolved against the module's package.
The layering, dependency, cycle and test-isolation tests all read imports here.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def module_name(path: Path, root: Path = REPO) -> str:
    """The dotted name of the module at ``path``, for a top-level package under ``root``."""
    parts = path.resolve().relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, package: str = "") -> set[str]:
    """Every module name an import statement in ``source`` may load, in absolute form.

    ``package`` is the package the source belongs to (the module's own name
    for an ``__init__``); without it relative imports are left out.
    """
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            if base is None:
                continue
            names.add(base)
            # `from google import genai` loads google.genai.
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def imports_of(path: Path, root: Path = REPO) -> set[str]:
    """``imported_modules`` of the file at ``path``, relative imports resolved."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return imported_modules(path.read_text(encoding="utf-8"), package)


def within(name: str, prefixes: tuple[str, ...]) -> bool:
    """``name`` is one of the modules ``prefixes`` or inside one of them."""
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _absolute(node: ast.ImportFrom, package: str) -> str | None:
    if node.level == 0:
        return node.module
    if not package:
        return None
    parts = package.split(".")
    if node.level > len(parts):
        return None
    anchor = ".".join(parts[: len(parts) - node.level + 1])
    return f"{anchor}.{node.module}" if node.module else anchor
