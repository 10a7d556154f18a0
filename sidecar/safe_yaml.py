"""YAML loading with bounds: rubric files are edited by people and may be hostile.

PyYAML's ``safe_load`` builds shared objects for aliases, so an 894-byte file
of nested aliases ("billion laughs") loads quickly but expands to billions of
values the moment anything walks it (validation, hashing, rendering). And its
composer recurses once per nesting level, so deep nesting raises
``RecursionError``.

:func:`load` composes the document first and refuses it, before any value is
built, when

- it nests deeper than ``max_depth`` levels, counted through aliases;
- fully expanded (every alias replaced by a copy of its anchor) it would have
  more than ``max_nodes`` nodes;
- an alias refers to a node that contains it (a cycle);

and a mapping that gives one key twice is refused as a YAML error (the
loader would keep the last value without a word); keys merged in with
``<<`` may be overridden, as YAML means them to be.

A few anchors for shared defaults (``<<: *defaults``) stay far below the
bounds. The walk is linear in the size of the text.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_DEPTH = 64
MAX_NODES = 100_000
_MERGE = "tag:yaml.org,2002:merge"


class YamlLimitError(ValueError):
    """The document exceeds a bound; the message says which."""


class _BoundedLoader(yaml.SafeLoader):
    max_depth = MAX_DEPTH

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        # The composer recurses per nesting level: stop before Python's stack does.
        self._depth += 1
        try:
            if self._depth > self.max_depth:
                raise YamlLimitError(f"nested deeper than {self.max_depth} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        # A key written twice would silently keep its last value (a whole settings block
        # lost); keys merged in with "<<" are defaults, overridden on purpose.
        first: dict[object, Node] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE:
                continue
            key = self.construct_object(key_node)
            if key in first:
                raise ConstructorError(
                    None,
                    None,
                    f"key {key!r} given twice (first on line {first[key].start_mark.line + 1}); "
                    "keep one",
                    key_node.start_mark,
                )
            first[key] = key_node
        return super().construct_mapping(node, deep=deep)


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_expansion(root: Node, max_depth: int, max_nodes: int) -> None:
    """Expanded size and depth of the node graph, each node visited once (iteratively)."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            kids = _children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            if size[key] > max_nodes:
                raise YamlLimitError(
                    f"aliases expand to more than {max_nodes} values (an alias bomb?);"
                    " write shared parts out or use fewer nested aliases"
                )
            if depth[key] > max_depth:
                raise YamlLimitError(f"aliases nest deeper than {max_depth} levels")
            continue
        if key in size:
            continue
        if key in on_path:
            raise YamlLimitError("an alias refers to a node that contains it (a cycle)")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in size)


def load(text: str, *, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_NODES) -> Any:
    """Parse one YAML document like ``yaml.safe_load``, within the bounds.

    Raises :class:`YamlLimitError` when a bound is exceeded, ``yaml.YAMLError``
    when the text is not YAML.
    """
    loader = _BoundedLoader(text)
    loader.max_depth = max_depth
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node, max_depth, max_nodes)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def describe(exc: yaml.YAMLError) -> str:
    """One line for a YAML syntax error: where it is and what is wrong (never a code excerpt)."""

    def at(mark: Any) -> str:
        return f"line {mark.line + 1}, column {mark.column + 1}"

    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    context_mark = getattr(exc, "context_mark", None)
    text = f"{at(mark)}: {problem}" if mark is not None else problem
    if context:
        started = f" started at {at(context_mark)}" if context_mark is not None else ""
        text += f" ({context}{started})"
    return text
