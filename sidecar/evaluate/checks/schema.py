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

The validator is pure Python and slow; most instances are valid. For a schema
written only with the simple keywords (``type``, ``required``, ``properties``,
``additionalProperties``, ``items``, the numeric bounds, ``minLength``/
``maxLength``, ``enum``, ``const``, annotations), :func:`certainly_valid`
compiles a test that says ``True`` only for an instance the validator finds
valid; ``False`` means "not certain", and the validator decides (and words
every violation) as before.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast
from urllib.parse import unquote

import jsonschema
import re2
import referencing
import referencing.jsonschema
from referencing.exceptions import NoSuchResource

__all__ = [
    "certainly_valid",
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


# --- certainly valid: the simple keywords, compiled ------------------------------------

# A test of an instance: True only when the schema's validator finds it valid.
Certain = Callable[[object], bool]

# JSON types as json.loads builds them; "integer" only as int (a float such as 1.0 is
# an integer to the validator, but not certainly here).
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "null": (type(None),),
}
_ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "$comment",
        "examples",
        "default",
        "deprecated",
        "readOnly",
        "writeOnly",
    }
)
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_SIMPLE = _ANNOTATIONS | {
    "type",
    "required",
    "properties",
    "additionalProperties",
    "items",
    "minLength",
    "maxLength",
    "enum",
    "const",
    *_BOUNDS,
}
# Scalars whose equality the validator and Python agree on when the types are the same.
_PLAIN_SCALARS = (str, int, bool, type(None))
_MAX_DEPTH = 16  # deeper schemas are left to the validator


def _never(instance: object) -> bool:
    return False


def _always(instance: object) -> bool:
    return True


def certainly_valid(schema: object) -> Certain | None:
    """A test saying ``True`` only for instances valid under ``schema``; None if not simple.

    ``schema`` is simple when it uses only the keywords named in the module
    docstring, each with a well-formed value, nested at most 16 deep. The test
    answers ``False`` whenever it is not certain (a violation, a float where an
    integer is asked for, a non-finite number, an ``enum`` value of another type).
    """
    return _compile(schema, 0)


def _compile(schema: object, depth: int) -> Certain | None:
    if schema is True:
        return _always
    if schema is False:
        return _never
    if not isinstance(schema, Mapping) or depth > _MAX_DEPTH:
        return None
    if not all(isinstance(key, str) and key in _SIMPLE for key in schema):
        return None
    tests: list[Certain] = []
    for build in (_type, _bounds, _lengths, _enum, _object, _array):
        test = build(schema, depth)
        if test is None:
            return None
        if test is not _always:
            tests.append(test)
    if not tests:
        return _always
    if len(tests) == 1:
        return tests[0]
    every = tuple(tests)
    return lambda instance: all(test(instance) for test in every)


def _type(schema: Mapping[str, Any], depth: int) -> Certain | None:
    if "type" not in schema:
        return _always
    names = schema["type"]
    names = [names] if isinstance(names, str) else names
    if not isinstance(names, list) or not names:
        return None
    if not all(isinstance(name, str) and name in _TYPES for name in names):
        return None
    # Exact types: a bool is an int to Python, never a number to the validator.
    allowed = frozenset(kind for name in names for kind in _TYPES[name])
    return lambda instance: type(instance) in allowed


def _number(value: object) -> bool:
    return type(value) in (int, float) and math.isfinite(value)  # type: ignore[arg-type]


def _bounds(schema: Mapping[str, Any], depth: int) -> Certain | None:
    bounds = [(key, schema[key]) for key in _BOUNDS if key in schema]
    if not bounds:
        return _always
    if not all(_number(limit) for _, limit in bounds):
        return None
    low = [limit for key, limit in bounds if key == "minimum"]
    high = [limit for key, limit in bounds if key == "maximum"]
    above = [limit for key, limit in bounds if key == "exclusiveMinimum"]
    below = [limit for key, limit in bounds if key == "exclusiveMaximum"]

    def test(instance: object) -> bool:
        if type(instance) is bool or not isinstance(instance, int | float):
            return True  # the bounds apply to numbers only
        if not math.isfinite(instance):
            return False
        return (
            all(instance >= limit for limit in low)
            and all(instance <= limit for limit in high)
            and all(instance > limit for limit in above)
            and all(instance < limit for limit in below)
        )

    return test


def _lengths(schema: Mapping[str, Any], depth: int) -> Certain | None:
    if "minLength" not in schema and "maxLength" not in schema:
        return _always
    shortest, longest = schema.get("minLength", 0), schema.get("maxLength")
    if not (type(shortest) is int and shortest >= 0):
        return None
    if longest is not None and not (type(longest) is int and longest >= 0):
        return None

    def test(instance: object) -> bool:
        if not isinstance(instance, str):
            return True  # the lengths apply to strings only
        return len(instance) >= shortest and (longest is None or len(instance) <= longest)

    return test


def _enum(schema: Mapping[str, Any], depth: int) -> Certain | None:
    choices: list[object] = []
    if "enum" in schema:
        if not isinstance(schema["enum"], list):
            return None
        choices.extend(schema["enum"])
    if "const" in schema:
        choices.append(schema["const"])
    if "enum" not in schema and "const" not in schema:
        return _always
    if "enum" in schema and "const" in schema:
        return None  # both must hold: left to the validator
    # Only plain scalars of the same type are certainly equal; anything else is left over.
    plain = {(type(c), c) for c in choices if type(c) in _PLAIN_SCALARS}

    def test(instance: object) -> bool:
        return type(instance) in _PLAIN_SCALARS and (type(instance), instance) in plain

    return test


def _object(schema: Mapping[str, Any], depth: int) -> Certain | None:
    required = schema.get("required", [])
    properties = schema.get("properties", {})
    additional = schema.get("additionalProperties", True)
    if not isinstance(required, list) or not all(isinstance(k, str) for k in required):
        return None
    if not isinstance(properties, Mapping):
        return None
    if not required and not properties and additional is True:
        return _always
    tests: dict[str, Certain] = {}
    for key, subschema in properties.items():
        test = _compile(subschema, depth + 1)
        if not isinstance(key, str) or test is None:
            return None
        if test is not _always:
            tests[key] = test
    other = _compile(additional, depth + 1)
    if other is None:
        return None
    names = frozenset(properties)
    needed = tuple(required)

    def check(instance: object) -> bool:
        if not isinstance(instance, dict):
            return True  # the object keywords apply to objects only
        for key in needed:
            if key not in instance:
                return False
        for key, value in instance.items():
            test = tests.get(key)
            if test is not None:
                if not test(value):
                    return False
            elif other is not _always and key not in names and not other(value):
                return False
        return True

    return check


def _array(schema: Mapping[str, Any], depth: int) -> Certain | None:
    if "items" not in schema:
        return _always
    each = _compile(schema["items"], depth + 1)
    if each is None or isinstance(schema["items"], list):
        return None
    if each is _always:
        return _always

    def check(instance: object) -> bool:
        if not isinstance(instance, list):
            return True  # items applies to arrays only
        return all(each(item) for item in instance)

    return check
