"""What a check type declares: its rubric config model and one ``CheckType`` record.

A check type is declared once, in its family module, as

    TOOL_ALLOWLIST = CheckType(
        ToolAllowlist, tool_allowlist, inconclusive_if_truncated=PASS, about_tools=True,
        reads=frozenset({Part.TOOL_CALLS, Part.CAPTURE}),
    )

that is: the pydantic model of its rubric entry (whose ``type`` field is a
one-value ``Literal``, the type's name), the pure function that evaluates it,
the per-type facts the runner needs, and what it reads of the trace
(:class:`Part`): a rubric compiles into a plan (``sidecar.evaluate.plan``)
that knows from these which parts of the trace its checks need. The registry
in ``sidecar.evaluate.checks`` lists the declarations; the rubric's tagged union and the dispatch of
``run_check`` are derived from it, so no other file names a check type.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Generic, Literal, TypeVar, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from sidecar.evaluate.checks._common import Finding
from sidecar.evaluate.checks.schema import check_json_schema
from sidecar.model import Outcome, Transcript

__all__ = ["CheckConfig", "CheckType", "Limit", "Name", "Part", "SchemaCheckConfig"]

# Names of rubrics, checks and criteria: they become metric labels and span attributes.
Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$", max_length=64)]


def _number(value: object) -> object:
    # pydantic reads true as 1: a YAML true or false given for a number is a mistake.
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {str(value).lower()}")
    return value


# A check's numeric limit: a number, never true/false (the bounds are each field's own).
Limit = BeforeValidator(_number)


class CheckConfig(BaseModel):
    """A check entry of a rubric file; each type adds ``type: Literal[...]`` and its fields."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: Name
    gate: bool = True


class SchemaCheckConfig(CheckConfig):
    """A check that carries a JSON Schema (``schema:`` in YAML), validated at load time.

    The schema must be self-contained: ``$ref`` only to ``#/$defs/...`` (or
    another fragment of the same schema), and every ``pattern`` one that RE2
    compiles (see :mod:`sidecar.evaluate.checks.schema`).
    """

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False
    )

    schema_: Annotated[dict[str, Any], Field(alias="schema")]

    @field_validator("schema_")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        return check_json_schema(value)


Config = TypeVar("Config", bound=CheckConfig)


class Part(enum.StrEnum):
    """A part of the transcript a check reads, and the spans it comes from.

    Every check also reads ``truncated`` (the trace lost spans, or was decided
    by an earlier owner): the runner decides from it, not the check.
    """

    # Tool execution spans (execute_tool, OpenInference TOOL, ...) completed by the
    # tool calls the chat/LLM spans' messages request, with the arguments and results
    # the model saw; calls seen only in the messages count too.
    TOOL_CALLS = "tool_calls"
    # The agent (root) span's output text, else the last chat/LLM span's answer.
    ANSWER = "answer"
    # The agent (root) span's input text, else the first chat/LLM span's user message.
    USER_INPUT = "user_input"
    # What the producer captured: every chat/LLM span's messages, finish reasons and
    # offered tools, every tool span, and the instrumentation scopes (for the advice).
    CAPTURE = "capture"
    # Root span: its start and end, whether it arrived, whether its id is shared.
    LATENCY = "latency"
    # Every span's status code and message, exception events and error.type.
    ERROR_SPANS = "error_spans"
    # Trace flags: incomplete (the root span's parent and role), partial,
    # unreadable values, and the others (:class:`sidecar.model.Flag`).
    FLAGS = "flags"
    # A conversation's turns (conversation scope only).
    TURNS = "turns"


@dataclass(frozen=True, slots=True)
class CheckType(Generic[Config]):
    """One check type: its config model, its evaluation, and how truncation affects it.

    ``evaluate`` is a pure function of the config and the transcript; it may
    raise on hostile input (the runner turns that into ERROR).

    ``inconclusive_if_truncated``: a truncated trace lost spans that will never
    be seen. A check claiming that nothing bad happened can only lose its PASS
    to them, one claiming that something needed happened only its FAIL; that
    outcome becomes ERROR. ``None`` for checks on the answer or the root span,
    which truncation does not touch. Required, so every type decides.

    ``about_tools``: the check judges the tool calls of an agent run, so a
    rubric that has it expects agent runs (``Rubric.expects_agent_run``).

    ``reads``: the parts of the transcript ``evaluate`` reads (:class:`Part`),
    including those its ERROR details name (what was not captured, and why).
    """

    config: type[Config]
    evaluate: Callable[[Config, Transcript], Finding]
    inconclusive_if_truncated: Outcome | None
    about_tools: bool
    reads: frozenset[Part]
    name: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", _type_name(self.config))


def _type_name(config: type[CheckConfig]) -> str:
    """The check type's name: the one value of the config's ``type: Literal[...]``."""
    declared = config.model_fields.get("type")
    annotation = declared.annotation if declared is not None else None
    values = get_args(annotation)
    if get_origin(annotation) is not Literal or len(values) != 1 or not isinstance(values[0], str):
        raise TypeError(f"{config.__name__} needs a field type: Literal['<check type name>']")
    return values[0]
