"""JSON Schemas from rubric files: checked when loaded, used without fetching or backtracking.

A rubric's schema (``tool_arguments``, ``answer_json_schema``) may refer only
to itself. At load time :func:`check_json_schema` refuses, naming the place
in the schema:

- a ``$ref`` (or ``$dynamicRef``, ``$recursiveRef``) anywhere that is not a
  fragment of this schema: ``#``, a JSON pointer (``#/$defs/amount``,
  ``#/definitions/x``) that resolves here, or an ``#anchor`` declared here.
  ``http:``, ``https:``, ``file:``, ``urn:`` and relative file names are all
  refused;
- a ``$id`` or ``$schema`` below the root: the first moves the base that
  fragments resolve against, the second switches the validator;
- a ``pattern`` or ``patternProperties`` key that RE2 cannot compile
  (backreferences, lookaround).

At evaluation, :func:`new_validator` builds a 2020-12 validator whose
registry cannot retrieve anything (a reference that slipped through fails to
resolve, which the check runner turns into ERROR) and whose ``pattern`` and
``patternProperties`` match with RE2, in time linear in the text.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from typing import Any, cast
from urllib.parse import unquote

import jsonschema
import re2
import referencing
import referencing.jsonschema
from referencing.exceptions import NoSuchResource

__all__ = [
    "check_json_schema",
    "compile_linear",
    "linear_regex_problem",
    "new_validator",
]

_REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")
_ROOT_ONLY = ("$id", "$schema")
# Keywords whose value is one schema, a list of schemas, or a map of schemas.
_ONE = frozenset(
    {
        "additionalItems",
        "additionalProperties",
        "contains",
        "contentSchema",
        "else",
        "if",
        "items",
        "not",
        "propertyNames",
        "then",
        "unevaluatedItems",
        "unevaluatedProperties",
    }
)
_LIST = frozenset({"allOf", "anyOf", "oneOf", "prefixItems", "items"})
_MAP = frozenset(
    {"$defs", "definitions", "dependentSchemas", "dependencies", "patternProperties", "properties"}
)


# --- regular expressions -----------------------------------------------------------


def _options(ignore_case: bool) -> re2.Options:
    options = re2.Options()
    options.case_sensitive = not ignore_case
    options.log_errors = False  # the error is raised to the caller, not printed by RE2
    return options


def _reason(exc: re2.error) -> str:
    reason = exc.args[0] if exc.args else "cannot compile"
    return reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)


@functools.lru_cache(maxsize=512)
def compile_linear(pattern: str, ignore_case: bool = False) -> re2._Regexp:
    """``pattern`` compiled by RE2 (linear-time matching).

    Raises ``re.error`` (the regular-expression error the check runner already
    turns into ERROR) when RE2 cannot compile it.
    """
    try:
        return re2.compile(pattern, _options(ignore_case))
    except re2.error as exc:
        raise re.error(f"RE2 cannot compile {pattern!r}: {_reason(exc)}") from exc


def linear_regex_problem(pattern: str, field: str = "") -> str | None:
    """Why ``pattern`` (of rubric field ``field``) is refused, or None when RE2 compiles it."""
    try:
        re2.compile(pattern, _options(False))
    except re2.error as exc:
        where = f" in {field}" if field else ""
        try:
            re.compile(pattern)
        except (re.error, RecursionError, OverflowError) as syntax:
            return f"bad regular expression {pattern!r}{where}: {syntax}"
        return (
            f"regular expression {pattern!r}{where} is not supported by the linear-time engine"
            f" (RE2: {_reason(exc)}); backreferences and lookaround cannot run in linear time"
        )
    return None


# --- load-time checks ----------------------------------------------------------------


def _where(path: tuple[str, ...]) -> str:
    # As a JSON pointer into the schema, e.g. #/properties/amount/$ref.
    return "#" + "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in path)


def _everywhere(
    value: object, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], Mapping[str, Any]]]:
    """Every mapping in ``value``, with its path; data values included, since a pointer may reach them."""
    stack: list[tuple[tuple[str, ...], object]] = [(path, value)]
    while stack:
        at, item = stack.pop()
        if isinstance(item, Mapping):
            yield at, item
            stack.extend(((*at, str(k)), v) for k, v in item.items())
        elif isinstance(item, list | tuple):
            stack.extend(((*at, str(i)), v) for i, v in enumerate(item))


def _subschemas(
    schema: object, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], Mapping[str, Any]]]:
    """Every schema object reached through the keywords that hold schemas."""
    stack: list[tuple[tuple[str, ...], object]] = [(path, schema)]
    while stack:
        at, item = stack.pop()
        if not isinstance(item, Mapping):
            continue
        yield at, item
        for key, value in item.items():
            if key in _ONE and isinstance(value, Mapping):
                stack.append(((*at, key), value))
            if key in _LIST and isinstance(value, list):
                stack.extend(((*at, key, str(i)), v) for i, v in enumerate(value))
            if key in _MAP and isinstance(value, Mapping):
                stack.extend(((*at, key, str(k)), v) for k, v in value.items())


def _resolve_pointer(schema: object, pointer: str) -> bool:
    node = schema
    for raw in pointer.split("/")[1:]:
        token = unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return False
    return True


def _reference_problem(ref: str, schema: Mapping[str, Any], anchors: set[str]) -> str | None:
    if not ref.startswith("#"):
        return "only references inside the schema are allowed (#/$defs/NAME); nothing is fetched"
    fragment = ref[1:]
    if fragment == "" or (fragment.startswith("/") and _resolve_pointer(schema, fragment)):
        return None
    if not fragment.startswith("/") and unquote(fragment) in anchors:
        return None
    return "does not resolve inside the schema"


def schema_problems(schema: Mapping[str, Any]) -> list[str]:
    """What makes ``schema`` unsafe to use: fetching references, foreign ids, non-RE2 patterns."""
    problems: list[str] = []
    anchors = {
        str(node[key])
        for _, node in _subschemas(schema)
        for key in ("$anchor", "$dynamicAnchor")
        if isinstance(node.get(key), str)
    }
    for path, node in _everywhere(schema):
        for key in _REFERENCES:
            ref = node.get(key)
            if isinstance(ref, str):
                problem = _reference_problem(ref, schema, anchors)
                if problem is not None:
                    problems.append(f"{key} {ref!r} at {_where(path)}: {problem}")
        if path:
            problems.extend(
                f"{key} at {_where(path)}: allowed only at the top of the schema"
                for key in _ROOT_ONLY
                if isinstance(node.get(key), str)
            )
    for path, node in _subschemas(schema):
        patterns: list[tuple[tuple[str, ...], str]] = []
        if isinstance(node.get("pattern"), str):
            patterns.append(((*path, "pattern"), node["pattern"]))
        if isinstance(node.get("patternProperties"), Mapping):
            patterns.extend(
                ((*path, "patternProperties"), str(k)) for k in node["patternProperties"]
            )
        for at, pattern in patterns:
            problem = linear_regex_problem(pattern, _where(at))
            if problem is not None:
                problems.append(problem)
    return sorted(problems)


def check_json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` when it is a valid, self-contained 2020-12 schema; else ValueError saying where."""
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"not a valid JSON Schema: {exc.message}") from exc
    problems = schema_problems(schema)
    if problems:
        raise ValueError("; ".join(problems))
    return schema


# --- evaluation ----------------------------------------------------------------------


def _refuse(uri: str) -> referencing.Resource[Any]:
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]


# Knows the bundled meta-schemas and nothing else; never reads a file or the network.
_NO_FETCH: referencing.jsonschema.SchemaRegistry = referencing.Registry(retrieve=_refuse)  # type: ignore[call-arg]


def _search(pattern: str, text: str) -> bool:
    return compile_linear(pattern).search(text) is not None


def _pattern(
    validator: Any, pattern: str, instance: object, schema: object
) -> Iterator[jsonschema.ValidationError]:
    if validator.is_type(instance, "string") and not _search(pattern, str(instance)):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: object, schema: object
) -> Iterator[jsonschema.ValidationError]:
    if not validator.is_type(instance, "object") or not isinstance(instance, Mapping):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, str(key)):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


_Validator = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator,
    validators={"pattern": _pattern, "patternProperties": _pattern_properties},
)


def new_validator(schema: Mapping[str, Any]) -> jsonschema.Draft202012Validator:
    """A 2020-12 validator (formats asserted) that matches with RE2 and fetches nothing."""
    validator = _Validator(
        schema,
        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER,
        registry=_NO_FETCH,
    )
    # An extension of Draft202012Validator: the same interface, two keywords replaced.
    return cast("jsonschema.Draft202012Validator", validator)
