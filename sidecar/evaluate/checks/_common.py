"""Small helpers shared by the check families: findings, JSON parsing and equality."""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
from jsonschema.exceptions import best_match

from sidecar.bounds import json_too_deep
from sidecar.evaluate.checks.schema import new_validator
from sidecar.fastrecord import record_builder
from sidecar.model import Captured, ContentField, Flag, Outcome, Transcript
from sidecar.text import loads as text_loads

_DETAIL_LIMIT = 240


@dataclass(frozen=True, slots=True)
class Finding:
    """What one check concluded, before the name and gate of its spec are attached."""

    outcome: Outcome
    detail: str


_finding = record_builder(Finding)  # one per check (sidecar.fastrecord)


def passed(detail: str) -> Finding:
    return _finding(Outcome.PASS, one_line(detail))


def failed(detail: str) -> Finding:
    return _finding(Outcome.FAIL, one_line(detail))


def errored(detail: str) -> Finding:
    return _finding(Outcome.ERROR, one_line(detail))


def no_answer(transcript: Transcript) -> Finding:
    """ERROR for a check that needs the answer and has none, saying why it is missing."""
    if Flag.INCOMPLETE in transcript.flags:
        # The answer is read from the root (or the last LLM call under it): not seen yet.
        return errored("answer unknown: the root span never arrived")
    if transcript.capture.answer is Captured.NOT_APPLICABLE:
        return errored("no answer: the trace holds no agent run, model call or tool call")
    return errored(transcript.capture.reason(ContentField.ANSWER))


_UNSEEN = (Captured.NOT_CAPTURED, Captured.UNREADABLE)


def calls_unseen(transcript: Transcript) -> bool:
    """The model asked for tool calls the trace does not show (capture off, or unreadable)."""
    return transcript.capture.tool_calls in _UNSEEN


def unseen_calls(transcript: Transcript) -> Finding:
    """ERROR: tool calls were requested but cannot be seen; the reason names the setting."""
    capture = transcript.capture
    count = capture.unseen_tool_calls
    asked = f" ({plural(count, 'model turn')} asked for tools)" if count else ""
    return errored(
        capture.reason(ContentField.TOOL_CALLS).replace(" not captured", f" not captured{asked}", 1)
    )


def one_line(text: str, limit: int = _DETAIL_LIMIT) -> str:
    """Collapse whitespace and cut to ``limit`` characters: details end up in metrics UIs."""
    # Printable text has no whitespace but the space: already one line when no space
    # starts, ends or doubles (what split and join would give).
    if text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " ":
        flat = text
    else:
        flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def parse_json(text: str) -> Any:
    """Parse JSON text; every way it can go wrong is a ValueError."""
    if json_too_deep(text):
        raise ValueError("JSON nested too deeply")
    try:
        return text_loads(text)
    except RecursionError as exc:
        # Deeply nested input must not escape as a RecursionError.
        raise ValueError("JSON nested too deeply") from exc


def plain(value: object) -> object:
    """Turn values YAML may produce into what the same text would be in JSON.

    An unquoted ``2024-05-20`` in a rubric file loads as a ``date``; the agent's
    arguments carry the string, and the rubric author meant the string.
    """
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def json_equal(expected: object, actual: object) -> bool:
    """Equality as JSON sees it: ``40 == 40.0`` but ``true != 1`` and ``"40" != 40``."""
    return _equal(plain(expected), actual)


def _equal(expected: object, actual: object) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(expected, bool) and isinstance(actual, bool) and expected == actual
    if isinstance(expected, int | float) and isinstance(actual, int | float):
        return expected == actual
    if isinstance(expected, str) and isinstance(actual, str):
        return expected == actual
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(
            _equal(e, a) for e, a in zip(expected, actual, strict=True)
        )
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(
            _equal(v, actual[k]) for k, v in expected.items()
        )
    return expected is None and actual is None


def compact(value: object, limit: int = 120) -> str:
    """Short JSON rendering for details."""
    text = json.dumps(plain(value), separators=(", ", ": "), ensure_ascii=False, default=str)
    return one_line(text, limit)


def schema_violation(schema: Mapping[str, Any], instance: object) -> str | None:
    """The most relevant JSON Schema (2020-12) violation as ``path: message``, or None.

    Formats (``date``, ``email`` ...) are asserted: a rubric author who writes
    ``format: date`` expects a wrong date to fail, not to be an annotation.
    """
    error = best_match(_validator(schema).iter_errors(instance))
    if error is None:
        return None
    return f"{error.json_path}: {error.message}"


# Validators by the identity of their schema: a rubric's schema lives as long as the rubric, and
# building a validator costs about half of using it. The schema is held next to its
# validator, so its id cannot be reused while cached. Rubric sets hold far fewer
# schemas than the bound; past it the cache starts over.
_VALIDATORS: dict[int, tuple[Mapping[str, Any], jsonschema.Draft202012Validator]] = {}
_MAX_VALIDATORS = 256


def _validator(schema: Mapping[str, Any]) -> jsonschema.Draft202012Validator:
    cached = _VALIDATORS.get(id(schema))
    if cached is not None and cached[0] is schema:
        return cached[1]
    validator = new_validator(schema)  # RE2 patterns, nothing fetched
    if len(_VALIDATORS) >= _MAX_VALIDATORS:
        _VALIDATORS.clear()
    _VALIDATORS[id(schema)] = (schema, validator)
    return validator
