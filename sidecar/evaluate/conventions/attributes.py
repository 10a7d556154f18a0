"""Reading OTLP attribute values: text, JSON strings, kvlists and arrays, numbers.

An attribute holds a string, a number, a bool, bytes, or (from an OTLP kvlist
or array) a mapping or list. Conventions put structured content in either
form, so these helpers take both: ``parse_json`` parses JSON text and passes
structured values through; ``text_of`` turns anything into text, structured
values as compact JSON. Text that is blank is missing (``None``).

Nesting is bounded (:data:`sidecar.bounds.MAX_NESTING`) before anything
recurses: JSON text nested deeper is unreadable, so ``parse_json`` gives
``None`` for it (missing, never the text read as something else), and a
structured value nested deeper has no text (``text_of`` gives ``None``).
Numbers are read only within 64-bit range.
"""

from __future__ import annotations

import json
import json.encoder
import math
from collections.abc import Callable, Iterable, Mapping

from sidecar.bounds import INT64_MAX, MAX_INT_DIGITS, MAX_NESTING, json_too_deep, value_depth
from sidecar.model import Attributes, AttrValue, Span
from sidecar.text import loads as text_loads

# isinstance with a tuple built once: a union in the call is built on every call (slower).
_STRUCTURED = (dict, list)
_SCALAR = (bool, int, float)


def text_of(value: AttrValue | object) -> str | None:
    """Plain text of a value; structured values become compact JSON."""
    if value is None:
        return None
    if isinstance(value, str):
        return value if value.strip() else None
    if isinstance(value, bytes):
        return text_of(value.decode("utf-8", errors="replace"))
    if isinstance(value, _STRUCTURED):
        return compact_json(value)
    if isinstance(value, _SCALAR):
        return compact_json(value)
    return text_of(str(value))


def json_text(value: AttrValue | object) -> str | None:
    """JSON text of tool arguments: strings are kept as recorded."""
    if isinstance(value, _STRUCTURED):
        return compact_json(value)
    return text_of(value)


# What json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
# would build on every call.
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str)
# The C encoder that _COMPACT.encode builds for every value that is not a string,
# built once. Without circular-reference markers: a cycle measures past the
# nesting bound and never reaches it (and markers would be shared across threads).
_MAKE_ENCODER: Callable[..., Callable[[object, int], Iterable[str]]] | None = getattr(
    json.encoder, "c_make_encoder", None
)
_ENCODE = (
    _MAKE_ENCODER(None, str, json.encoder.encode_basestring, None, ":", ",", False, False, True)
    if _MAKE_ENCODER is not None
    else None
)


def compact_json(value: object) -> str | None:
    """Compact JSON text of ``value``; None when it nests too deeply to be read."""
    if isinstance(value, _STRUCTURED) and value_depth(value) > MAX_NESTING:
        return None
    try:
        if _ENCODE is not None and not isinstance(value, str):
            return "".join(_ENCODE(value, 0))
        return _COMPACT.encode(value)
    except (ValueError, RecursionError):
        # A huge int past the int-string conversion limit, or a self-referencing value.
        return None


def parse_json(value: AttrValue | object) -> object:
    """Structured form of a value: JSON text is parsed, other values pass through.

    Text that is not JSON stays text; JSON text nested too deeply to read is
    ``None`` (unreadable content is missing content).
    """
    if isinstance(value, str):
        stripped = value.strip()
        if stripped[:1] in ("{", "[", '"'):
            if json_too_deep(stripped):
                return None
            try:
                return text_loads(stripped)
            except (ValueError, RecursionError):
                # ValueError covers JSON errors and ints past the conversion limit.
                return value
    return value


def as_int(value: AttrValue | object) -> int | None:
    """A 64-bit count (tokens); None for anything else (floats out of range, NaN, text)."""
    number: int | None = None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, float):
        number = int(value) if math.isfinite(value) and abs(value) <= INT64_MAX else None
    elif isinstance(value, str):
        text = value.strip()
        # ASCII digits only: str.isdigit() also takes superscripts, which int() refuses.
        if text.isascii() and text.isdigit() and len(text) <= MAX_INT_DIGITS:
            number = int(text)
    if number is None or abs(number) > INT64_MAX:
        return None
    return number


def str_attr(attrs: Attributes, *keys: str) -> str | None:
    for key in keys:
        value = attrs.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


def indexed(attrs: Mapping[str, AttrValue], prefix: str) -> list[dict[str, AttrValue]]:
    """Group flattened ``prefix.N.rest`` keys into one mapping per N, in N order."""
    groups: dict[int, dict[str, AttrValue]] = {}
    head = prefix + "."
    for key, value in attrs.items():
        if not key.startswith(head):
            continue
        index, _, rest = key[len(head) :].partition(".")
        if index.isdigit() and rest:
            groups.setdefault(int(index), {})[rest] = value
    return [groups[n] for n in sorted(groups)]


def usage(span: Span) -> tuple[int | None, int | None]:
    """Token usage a span reports, whatever convention named it."""
    attrs = span.attributes
    spent_in = _first_int(
        attrs,
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.prompt_tokens",
        "llm.token_count.prompt",
        "llm.usage.prompt_tokens",
    )
    spent_out = _first_int(
        attrs,
        "gen_ai.usage.output_tokens",
        "gen_ai.usage.completion_tokens",
        "llm.token_count.completion",
        "llm.usage.completion_tokens",
    )
    return spent_in, spent_out


def _first_int(attrs: Attributes, *keys: str) -> int | None:
    for key in keys:
        value = attrs.get(key)
        if value is not None and (number := as_int(value)) is not None:
            return number
    return None


def models_of(attrs: Attributes, *keys: str) -> tuple[str, ...]:
    # The response model is what actually ran; the request model is only a wish.
    model = str_attr(attrs, *keys)
    return (model,) if model else ()


def list_of(value: object) -> list[object]:
    value = parse_json(value)
    return value if isinstance(value, list) else []
