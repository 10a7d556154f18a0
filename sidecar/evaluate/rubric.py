"""Rubric files: what to evaluate for which traces.

One YAML file per rubric (see README "Rubric format"). Files are validated at
start-up; every problem is reported with the file name and the field path, e.g.
``rubrics/refund.yaml: checks.1.schema: ...``. The check entries are the check
types' own models, registered in ``sidecar.evaluate.checks``.

Every rubric validated from a document knows its content hash
(``Rubric.content_hash``, :func:`sidecar.evaluate.rubric_hash.rubric_hash` of that
document); ``fingerprint:`` records the hash a version had.

Loading is bounded (:mod:`sidecar.safe_yaml`): a file whose aliases would
expand past a small bound, or that nests too deeply, is refused before any
value is built. Schemas may refer only to themselves and regexes must compile
with RE2 (:mod:`sidecar.evaluate.checks.schema`), so loading a rubric never fetches
anything and no pattern in it can backtrack.

``scope: conversation`` rubrics judge the turns of one
conversation together; ``conversation:`` says how turns are grouped and when
a conversation is decided (:class:`ConversationSpec`).
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from sidecar.errors import RubricError
from sidecar.evaluate.checks import CHECK_TYPES, CheckSpec, about_tools
from sidecar.evaluate.checks.base import Name
from sidecar.evaluate.rubric_hash import HASH_LENGTH, rubric_hash
from sidecar.safe_yaml import YamlLimitError
from sidecar.safe_yaml import describe as describe_yaml
from sidecar.safe_yaml import load as load_yaml


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class AlwaysJudge(enum.StrEnum):
    ERROR = "error"
    INJECTION_SUSPECTED = "injection_suspected"
    UNTRUSTED_CONTENT = "untrusted_content"
    CHECK_FAILED = "check_failed"


class Sampling(_Strict):
    judge_ratio: Annotated[float, Field(ge=0.0, le=1.0)] = 0.05
    always_judge: list[AlwaysJudge] = Field(default_factory=list)


class CriterionSpec(_Strict):
    name: Name
    definition: Annotated[str, Field(min_length=1)]
    pass_example: Annotated[str, Field(min_length=1)]
    fail_example: Annotated[str, Field(min_length=1)]
    gate: bool = True


class InjectionPolicy(enum.StrEnum):
    REVIEW = "review"
    FAIL = "fail"
    ERROR = "error"


class JudgeSpec(_Strict):
    model: Annotated[str, Field(min_length=1)]
    instructions: Annotated[str, Field(min_length=1)]
    criteria: Annotated[list[CriterionSpec], Field(min_length=1, max_length=8)]
    reference: str | None = None
    on_injection_suspected: InjectionPolicy = InjectionPolicy.REVIEW

    @field_validator("criteria")
    @classmethod
    def _unique(cls, value: list[CriterionSpec]) -> list[CriterionSpec]:
        seen: set[str] = set()
        for criterion in value:
            if criterion.name in seen:
                raise ValueError(f"duplicate criterion name {criterion.name!r}")
            seen.add(criterion.name)
        return value


class CanarySpec(_Strict):
    """A labelled set the service re-judges on a schedule (``sidecar.drift.canary_schedule``).

    ``traces`` (one path or a list) and ``labels`` are relative to the rubric
    folder and confined to it (or to ``canary_root``); the labels use the ``sidecar calibrate`` format with case_id = trace id.
    """

    traces: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
    labels: Annotated[str, Field(min_length=1)]
    every_s: Annotated[float, Field(gt=0)] = 3600.0
    cases_per_run: Annotated[int, Field(ge=1, le=10_000)] = 20

    @field_validator("traces", mode="before")
    @classmethod
    def _one_or_more(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    def paths(self, base: Path) -> tuple[list[Path], Path]:
        """(trace files, label file) resolved against ``base``, the rubric file's folder."""
        return [base / t for t in self.traces], base / self.labels


class Scope(enum.StrEnum):
    """What one verdict is about: one trace, or a conversation of traces."""

    TRACE = "trace"
    CONVERSATION = "conversation"


DEFAULT_CONVERSATION_KEY = ("gen_ai.conversation.id", "session.id")


class ConversationSpec(_Strict):
    """How turns make a conversation (``scope: conversation``; :mod:`sidecar.conversation`).

    ``key``: attribute names tried in order on the root/agent span, then the
    resource; the first present one is the conversation id. A conversation is
    decided ``idle_timeout_s`` after its last turn, at ``max_turns`` turns, or
    ``max_age_s`` after its first turn arrived.
    """

    key: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=256)]], Field(min_length=1, max_length=8)
    ] = Field(default_factory=lambda: list(DEFAULT_CONVERSATION_KEY))
    idle_timeout_s: Annotated[float, Field(gt=0)] = 900.0
    max_turns: Annotated[int, Field(ge=1, le=10_000)] = 200
    max_age_s: Annotated[float, Field(gt=0)] = 86_400.0


_DEFAULT_CONVERSATION = ConversationSpec()


class Fingerprint(_Strict):
    """The content hash a rubric version had (written by ``sidecar rubrics fingerprint``)."""

    version: Annotated[str, Field(min_length=1, max_length=32)]
    hash: Annotated[str, Field(pattern=f"^[0-9a-f]{{{HASH_LENGTH}}}$")]

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, value: object) -> object:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        return value


class Rubric(_Strict):
    """A validated rubric file."""

    id: Name
    version: Annotated[str, Field(min_length=1, max_length=32)]
    description: str = ""
    applies_to: dict[str, str] = Field(default_factory=dict)
    untrusted_tools: list[str] = Field(default_factory=list)
    sampling: Sampling = Field(default_factory=Sampling)
    checks: list[CheckSpec] = Field(default_factory=list)
    judge: JudgeSpec | None = None
    calibration: dict[str, Any] | None = None
    fingerprint: Fingerprint | None = None
    canary: CanarySpec | None = None
    # What a trace under this rubric is: "agent_run" (a whole run: agent span, tool
    # calls, answer) or "llm_call" (single model calls judged alone). Unset: an agent
    # run when a check is about tool calls, else either.
    expects: Literal["agent_run", "llm_call"] | None = None
    scope: Scope = Scope.TRACE
    conversation: ConversationSpec | None = None
    _content_hash: str = PrivateAttr(default="")

    @property
    def expects_agent_run(self) -> bool:
        """Traces that are one LLM call and nothing else are fragments under this rubric."""
        if self.expects is not None:
            return self.expects == "agent_run"
        return any(about_tools(check) for check in self.checks)

    @model_validator(mode="wrap")
    @classmethod
    def _hash_the_document(cls, data: Any, handler: ModelWrapValidatorHandler[Rubric]) -> Rubric:
        # Hashed as written (before defaults and coercion), so the hash does not move
        # when a sidecar release changes a default.
        rubric = handler(data)
        if isinstance(data, Mapping):
            rubric._content_hash = rubric_hash(data)
        return rubric

    @property
    def content_hash(self) -> str:
        """12 hex of SHA-256 over the normalised document (:mod:`sidecar.evaluate.rubric_hash`)."""
        # Read from the private-attribute dict: ``self._content_hash`` goes through
        # pydantic's __getattr__ (about 4 us), and this is read once per verdict.
        private = self.__pydantic_private__ or {}
        return private.get("_content_hash") or rubric_hash(
            self.model_dump(mode="json", by_alias=True, exclude_unset=True)
        )

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, value: object) -> object:
        # `version: 3` in YAML is an int; accept it but keep it as text.
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        return value

    @field_validator("checks")
    @classmethod
    def _unique_checks(cls, value: list[CheckSpec]) -> list[CheckSpec]:
        seen: set[str] = set()
        for check in value:
            if check.name in seen:
                raise ValueError(f"duplicate check name {check.name!r}")
            seen.add(check.name)
        return value

    @model_validator(mode="after")
    def _conversation_block(self) -> Rubric:
        if self.scope is Scope.TRACE and self.conversation is not None:
            raise ValueError("conversation: only for scope: conversation")
        return self

    @property
    def conversational(self) -> ConversationSpec | None:
        """The conversation settings of a ``scope: conversation`` rubric, else None."""
        if self.scope is not Scope.CONVERSATION:
            return None
        return self.conversation or _DEFAULT_CONVERSATION

    @property
    def judge_model(self) -> str:
        """Label value for metrics; ``none`` when the rubric has no judge."""
        return self.judge.model if self.judge else "none"

    def applies(self, resource: Mapping[str, Any], root_attributes: Mapping[str, Any]) -> bool:
        """True when every ``applies_to`` key matches a resource or root/agent span attribute."""
        for key, wanted in self.applies_to.items():
            value = resource.get(key, root_attributes.get(key))
            if value is None or str(value) != wanted:
                return False
        return True


def _format_error(path: Path, exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(part) for part in err["loc"]) or "(top level)"
        lines.append(f"{path}: {loc}: {_message(err)}")
    return "\n".join(lines)


def _message(err: Any) -> str:
    """pydantic's message, but an unknown check type in our words, with the nearest known one."""
    ctx = err.get("ctx") or {}
    if err["type"] == "union_tag_invalid" and ctx.get("discriminator") == "'type'":
        tag = str(ctx.get("tag"))
        known = [c.name for c in CHECK_TYPES]
        near = difflib.get_close_matches(tag, known, n=1)
        hint = f"did you mean {near[0]!r}?" if near else f"known types: {', '.join(known)}"
        return f"unknown check type {tag!r}; {hint}"
    return str(err["msg"])


def parse_rubric(text: str, path: Path) -> Rubric:
    """Parse one rubric document; raise RubricError naming file and field."""
    try:
        data = load_yaml(text)
    except YamlLimitError as exc:
        raise RubricError(f"{path}: (top level): refused: {exc}") from exc
    except yaml.YAMLError as exc:
        raise RubricError(f"{path}: not valid YAML: {describe_yaml(exc)}") from exc
    if not isinstance(data, dict):
        raise RubricError(f"{path}: (top level): expected a mapping with id, version, checks")
    try:
        return Rubric.model_validate(data)
    except ValidationError as exc:
        raise RubricError(_format_error(path, exc)) from exc


def load_rubric(path: Path) -> Rubric:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RubricError(f"{path}: cannot read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise RubricError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8") from exc
    return parse_rubric(text, path)


def rubric_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise RubricError(f"{directory}: not a directory of rubric files")
    return sorted(p for p in directory.iterdir() if p.suffix in {".yaml", ".yml"})


def load_rubrics(directory: Path) -> list[Rubric]:
    """Load every *.yaml/*.yml in ``directory``; all errors are reported together."""
    rubrics: list[Rubric] = []
    problems: list[str] = []
    paths: list[Path] = []
    for path in rubric_files(directory):
        try:
            rubrics.append(load_rubric(path))
            paths.append(path)
        except RubricError as exc:
            problems.append(str(exc))
    problems.extend(duplicate_ids(list(zip(paths, rubrics, strict=True))))
    if problems:
        raise RubricError("\n".join(problems))
    if not rubrics:
        raise RubricError(f"{directory}: no rubric files (*.yaml) found")
    return rubrics


def duplicate_ids(loaded: Sequence[tuple[Path, Rubric]]) -> list[str]:
    """One problem per rubric id that more than one file uses, naming the files."""
    files: dict[str, list[Path]] = {}
    for path, rubric in loaded:
        files.setdefault(rubric.id, []).append(path)
    return [
        f"rubric id {rid!r} is used by {len(used)} files: {', '.join(str(p) for p in used)}"
        for rid, used in files.items()
        if len(used) > 1
    ]


def route(
    rubrics: Iterable[Rubric], resource: Mapping[str, Any], root_attributes: Mapping[str, Any]
) -> list[Rubric]:
    """The rubrics whose ``applies_to`` selectors all match this trace."""
    return [r for r in rubrics if r.applies(resource, root_attributes)]


def by_scope(rubrics: Iterable[Rubric], scope: Scope) -> list[Rubric]:
    """The rubrics of one scope, in their order."""
    return [r for r in rubrics if r.scope is scope]
