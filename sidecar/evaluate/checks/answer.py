r"""Checks over the final answer text: ``answer_regex`` and ``answer_json_schema``.

``answer_regex`` patterns are RE2 syntax and match in time linear in the
answer (no backtracking): a pattern RE2 cannot compile, such as one with a
backreference or lookaround, is refused when the rubric is loaded. RE2's
``\d``, ``\w``, ``\s`` and ``\b`` are ASCII; ``\pL``, ``\p{Nd}`` match any script.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import re2
from pydantic import model_validator

from sidecar.evaluate.checks._common import (
    Finding,
    failed,
    no_answer,
    parse_json,
    passed,
    schema_violation,
)
from sidecar.evaluate.checks.base import CheckConfig, CheckType, Part, SchemaCheckConfig
from sidecar.evaluate.checks.schema import compile_linear, linear_regex_problem
from sidecar.model import Transcript


class AnswerRegex(CheckConfig):
    type: Literal["answer_regex"]
    must_match: str | None = None
    must_not_match: str | None = None
    ignore_case: bool = False

    @model_validator(mode="after")
    def _one_pattern(self) -> AnswerRegex:
        if self.must_match is None and self.must_not_match is None:
            raise ValueError("give must_match, must_not_match or both")
        for field, pattern in (
            ("must_match", self.must_match),
            ("must_not_match", self.must_not_match),
        ):
            problem = None if pattern is None else linear_regex_problem(pattern, field)
            if problem is not None:
                raise ValueError(problem)
        return self


class AnswerJsonSchema(SchemaCheckConfig):
    type: Literal["answer_json_schema"]


# A fenced block labelled json, or not labelled at all; models wrap JSON in one
# even when told not to.
_FENCE = re.compile(r"```[ \t]*(?:json)?[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)


# Text whose first character after JSON whitespace cannot begin a JSON value (or
# that is blank): json.loads rejects it there, so it is not tried.
_NOT_JSON_START = re.compile(r"[ \t\n\r]*+(?:[^\[{\"\-0-9tfnNI]|\Z)")


def _excerpt(text: str, match: re2._Match, width: int = 60) -> str:
    return repr(text[match.start() : match.end()][:width])


def answer_regex(spec: AnswerRegex, transcript: Transcript) -> Finding:
    """``must_match`` must be found somewhere (a search); ``must_not_match`` nowhere.

    Matching is RE2's, linear in the answer's length whatever the pattern.
    """
    answer = transcript.answer
    if answer is None:
        return no_answer(transcript)
    if (
        spec.must_match is not None
        and compile_linear(spec.must_match, spec.ignore_case).search(answer) is None
    ):
        return failed(f"answer does not match {spec.must_match!r}")
    if spec.must_not_match is not None:
        found = compile_linear(spec.must_not_match, spec.ignore_case).search(answer)
        if found is not None:
            return failed(f"answer matches {spec.must_not_match!r} at {_excerpt(answer, found)}")
    said = []
    if spec.must_match is not None:
        said.append(f"matches {spec.must_match!r}")
    if spec.must_not_match is not None:
        said.append(f"does not match {spec.must_not_match!r}")
    return passed(f"answer {' and '.join(said) or 'has no pattern to meet'}")


def _answer_json(answer: str) -> tuple[bool, Any]:
    """The answer as JSON: the whole text, else the first fenced block that parses."""
    candidates = [answer, *(m.group(1) for m in _FENCE.finditer(answer))]
    for candidate in candidates:
        if _NOT_JSON_START.match(candidate) is not None:
            continue  # json.loads would raise at its first character
        try:
            return True, parse_json(candidate)
        except ValueError:
            continue
    return False, None


def answer_json_schema(spec: AnswerJsonSchema, transcript: Transcript) -> Finding:
    answer = transcript.answer
    if answer is None:
        return no_answer(transcript)
    ok, document = _answer_json(answer)
    if not ok:
        return failed("answer is not JSON")
    problem = schema_violation(spec.schema_, document)
    if problem is not None:
        return failed(problem)
    return passed("answer is valid JSON for the schema")


# The answer; when it is missing, why (the root never came, or not captured).
_READS = frozenset({Part.ANSWER, Part.FLAGS, Part.CAPTURE})

# The answer is the root's or the last LLM call's: truncation does not touch it.
ANSWER_REGEX = CheckType(
    AnswerRegex, answer_regex, inconclusive_if_truncated=None, about_tools=False, reads=_READS
)
ANSWER_JSON_SCHEMA = CheckType(
    AnswerJsonSchema,
    answer_json_schema,
    inconclusive_if_truncated=None,
    about_tools=False,
    reads=_READS,
)
