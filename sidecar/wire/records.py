"""Every record sidecar writes or reads, one pydantic model each.

    VerdictRecord      the verdict of one (trace, rubric), DESIGN 7: ``sidecar replay`` and
                       ``demo`` output, the verdict topic; read back by ``calibrate`` and ``gate``
      CheckRecord      one check result in it
      CriterionRecord  one criterion verdict in it
    ReviewRecord       a case sent to people (the review topic): reasons, verdict, transcript
      TranscriptRecord, ToolCallRecord
    HumanLabel         a person's PASS/FAIL on one case and criterion (labels topic, ``--labels``)
    Adjudication       the settled label of an item the raters disagreed on (``--adjudication``)
    PairRecord         one candidate/baseline pair of ``sidecar compare --pairs``

Writing: ``to_json()`` is one compact line, non-ASCII kept; the verdict and
review records are byte for byte what sidecar wrote before these models. Their
content fields pass through a :class:`~sidecar.wire.redact.Redaction` (``of(...,
redaction)``, default :data:`~sidecar.wire.redact.DEFAULT_REDACTION`); a record with
nothing to redact is written as before, and one whose content was hashed or
dropped carries ``"redacted": "hash"`` or ``"drop"``.

Reading: :func:`read_records` (JSON lines), :func:`parse_label` (one Kafka
message) and :func:`parse_pairs` turn input into records and any problem into
a :class:`~sidecar.errors.RecordError` that starts with where the record came
from (``file:line``, or the topic) and names the field. A missing field gets
the same message as a wrong one, and unknown keys are ignored. Ids
(``trace_id``, ``case_id``, names, versions) may be non-empty strings or
integers, since hand-made files number their cases; integers are kept as text.

The label rule, one for the labels topic and for calibration files:

- the case is ``trace_id`` or ``case_id``; when both are given they must be
  equal (as text), and the first non-empty one is taken;
- ``criterion`` is an id as above; ``label`` is PASS or FAIL, in any letter case;
- ``rater`` is an id as above, or absent; calibration files must name it
  (``context={"require_rater": True}``), since inter-rater agreement needs it;
- the judge echo (``rubric_id``, ``rubric_version``, ``judge_model``,
  ``judge_outcome``) is optional; a ``judge_outcome`` other than PASS, FAIL or
  ERROR is ignored, as the echo only helps match a label to a forgotten case.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from sidecar.errors import InputFileError, RecordError
from sidecar.model import CaseOutcome, CriterionResult, Outcome, Transcript
from sidecar.wire.redact import DEFAULT_REDACTION, Redaction

if TYPE_CHECKING:
    from sidecar.evaluate.verdict import Verdict

R = TypeVar("R", bound="_Record")


# -- field rules ---------------------------------------------------------------------


def _problem(message: str) -> PydanticCustomError:
    # The message is passed as context so that braces in it are not read as a template.
    return PydanticCustomError("record", "{message}", {"message": message})


def _as_id(value: object) -> str | None:
    # Ids may come as numbers from hand-made files; anything else is a mistake.
    if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
        return str(value)
    return None


def _id(value: object, info: ValidationInfo) -> str:
    if (text := _as_id(value)) is not None:
        return text
    raise _problem(f"field {info.field_name!r} must be a non-empty string")


def _list(value: object, info: ValidationInfo) -> object:
    if isinstance(value, list | tuple):
        return value
    raise _problem(f"field {info.field_name!r} must be a list")


def _result_outcome(value: object) -> Outcome:
    if isinstance(value, str) and value in Outcome.__members__:
        return Outcome(value)
    raise _problem(f"outcome must be PASS, FAIL, ERROR or SKIPPED, got {value!r}")


def _gate(value: object) -> bool:
    if isinstance(value, bool):
        return value
    raise _problem("gate must be true or false")


def _record_id(value: object) -> str | None:
    # Hand-made files may lack the idempotency key; VerdictRecord.key stands in for it.
    return str(value) if value else None


def _case_id(value: object) -> str:
    if (text := _as_id(value)) is not None:
        return text
    raise _problem("field 'case_id' (or 'trace_id') must be a non-empty string")


def _human_label(value: object) -> Outcome:
    if isinstance(value, str) and value.upper() in ("PASS", "FAIL"):
        return Outcome(value.upper())
    raise _problem(f'field \'label\' must be "PASS" or "FAIL", got {value!r}')


def _rater(value: object, info: ValidationInfo) -> str | None:
    if value is None and not (info.context or {}).get("require_rater", False):
        return None
    return _id(value, info)


def _echo(value: object) -> str | None:
    return None if value is None else str(value)


def _echo_outcome(value: object) -> Outcome | None:
    return Outcome(value) if isinstance(value, str) and value in ("PASS", "FAIL", "ERROR") else None


def _pair_id(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, str) and value:
        return value
    raise _problem('"id" must be a non-empty string')


def _pair_text(value: object, info: ValidationInfo) -> str:
    if isinstance(value, str):
        return value
    raise _problem(f'"{info.field_name}" must be a string')


def _is_none(value: object) -> bool:
    return value is None


Id = Annotated[str, BeforeValidator(_id)]
ResultOutcome = Annotated[Outcome, BeforeValidator(_result_outcome)]
Gate = Annotated[bool, BeforeValidator(_gate)]
PairText = Annotated[str, BeforeValidator(_pair_text)]


def _left_out_when_none() -> Any:
    # The verdict record leaves these keys out rather than write null.
    return Field(default=None, exclude_if=_is_none)


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    @model_validator(mode="before")
    @classmethod
    def _an_object(cls, data: Any) -> Any:
        if isinstance(data, cls):
            return data
        if not isinstance(data, Mapping):
            raise _problem("expected an object")
        data = cls._prepare(data)
        # A missing field is validated as null, so its own rule words the message.
        missing = {
            name: None
            for name, field in cls.model_fields.items()
            if field.is_required() and name not in data
        }
        return {**data, **missing} if missing else data

    @classmethod
    def _prepare(cls, data: Mapping[str, Any]) -> Mapping[str, Any]:
        return data

    def to_json(self) -> str:
        """One compact JSON line (the form every topic and ``replay`` carry)."""
        return record_json(self.model_dump(mode="json"))


# What ``json.dumps(value, ensure_ascii=False, separators=(",", ":"))`` builds per call.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def record_json(value: Mapping[str, Any]) -> str:
    """One compact JSON line, non-ASCII kept: the form of every record sidecar writes."""
    return _ENCODER.encode(value)


def _construct(model: type[R], source: object, **given: Any) -> R:
    """``model`` from ``source``'s attributes of the same names, and ``given``.

    The pipeline's records (Verdict, Transcript) are typed and checked already;
    building without validation keeps the hot path cheap and never rejects what
    the pipeline produced.
    """
    values = {name: getattr(source, name) for name in model.model_fields if name not in given}
    return model.model_construct(**values, **given)


# -- the verdict record (DESIGN 7) ------------------------------------------------------


class CheckRecord(_Record):
    name: Id
    outcome: ResultOutcome
    gate: Gate = True
    detail: str | None = ""


class CriterionRecord(_Record):
    name: Id
    outcome: ResultOutcome
    gate: Gate = True
    evidence: str | None = _left_out_when_none()
    reason: str | None = _left_out_when_none()


class VerdictRecord(_Record):
    """One verdict as written (DESIGN 7) and as read back by ``calibrate`` and ``gate``.

    Read back, only ``trace_id``, ``rubric_id``, ``rubric_version`` and
    ``judge_model`` are required, so hand-made files may leave the rest out.
    ``rubric_hash`` and ``judge_model_version`` (provenance, DESIGN 13; when
    each is present: :mod:`sidecar.evaluate.verdict`) are left out when absent, and
    records written before them read with both ``None``. ``backfill`` is
    written only when true (a verdict of ``sidecar backfill``). The
    conversation fields (``scope: conversation``, ``conversation_id``,
    ``turns``, ``trace_ids``, ``revision``; DESIGN 12) are left out on trace
    verdicts.
    """

    id: Annotated[str | None, BeforeValidator(_record_id)] = None
    trace_id: Id
    root_span_id: str | None = None
    rubric_id: Id
    rubric_version: Id
    judge_model: Id
    agent: str | None = None
    agent_version: str | None = None
    outcome: CaseOutcome | None = None
    judged: bool | None = None
    sample_reason: str | None = None
    injection_suspected: bool | None = None
    review: bool | None = None
    checks: Annotated[tuple[CheckRecord, ...], BeforeValidator(_list)] = ()
    criteria: Annotated[tuple[CriterionRecord, ...], BeforeValidator(_list)] = ()
    truncated: bool | None = None
    # Left out when empty, so unflagged verdicts are written as before.
    flags: tuple[str, ...] = Field(default=(), exclude_if=lambda flags: not flags)
    sidecar_version: str | None = None
    rubric_hash: Annotated[str | None, BeforeValidator(_echo)] = _left_out_when_none()
    judge_model_version: Annotated[str | None, BeforeValidator(_echo)] = _left_out_when_none()
    judge_error: str | None = _left_out_when_none()
    raw_output: str | None = _left_out_when_none()
    redacted: str | None = _left_out_when_none()
    # True on verdicts of ``sidecar backfill``; left out (read as False) on live ones.
    backfill: bool = Field(default=False, exclude_if=lambda backfill: not backfill)
    # Conversation verdicts only (DESIGN 12); a trace verdict's record has none of these.
    scope: str | None = _left_out_when_none()
    conversation_id: str | None = _left_out_when_none()
    turns: int | None = _left_out_when_none()
    trace_ids: tuple[str, ...] = Field(default=(), exclude_if=lambda ids: not ids)
    revision: int | None = _left_out_when_none()

    @property
    def key(self) -> str:
        """The idempotency key; a stand-in made of the provenance when the record has none."""
        return (
            self.id or f"{self.trace_id}/{self.rubric_id}/{self.rubric_version}/{self.judge_model}"
        )

    @staticmethod
    def dump(v: Verdict, redaction: Redaction = DEFAULT_REDACTION) -> dict[str, Any]:
        """``VerdictRecord.of(v, redaction).model_dump(mode="json")``, built directly.

        The service writes one of these per verdict, so it skips the model: the
        same keys in the same order, the same left-out keys, the same values
        (``tests/test_fast_paths.py`` holds the two equal).
        """
        r = redaction.text
        record: dict[str, Any] = {
            "id": v.id,
            "trace_id": v.trace_id,
            "root_span_id": v.root_span_id,
            "rubric_id": v.rubric_id,
            "rubric_version": v.rubric_version,
            "judge_model": v.judge_model,
            "agent": v.agent,
            "agent_version": v.agent_version,
            "outcome": v.outcome.value,
            "judged": v.judged,
            "sample_reason": v.sample_reason,
            "injection_suspected": v.injection_suspected,
            "review": v.review,
            "checks": [
                {"name": c.name, "outcome": c.outcome.value, "gate": c.gate, "detail": r(c.detail)}
                for c in v.checks
            ],
            "criteria": [_criterion(c, r(c.evidence)) for c in v.criteria],
            "truncated": v.truncated,
        }
        if v.flags:
            record["flags"] = list(v.flags)
        record["sidecar_version"] = v.sidecar_version
        optional = (
            ("rubric_hash", v.rubric_hash),
            ("judge_model_version", v.judge_model_version),
            ("judge_error", v.judge_error),
            ("raw_output", r(v.raw_output)),
            ("redacted", redaction.marker),
        )
        for key, value in optional:
            if value is not None:
                record[key] = value
        if v.backfill:
            record["backfill"] = True
        if v.scope != "trace":
            record["scope"] = v.scope
        if v.conversation_id is not None:
            record["conversation_id"] = v.conversation_id
        if v.turns is not None:
            record["turns"] = v.turns
        if v.trace_ids:
            record["trace_ids"] = list(v.trace_ids)
        if v.revision is not None:
            record["revision"] = v.revision
        return record

    @classmethod
    def of(cls, v: Verdict, redaction: Redaction = DEFAULT_REDACTION) -> VerdictRecord:
        r = redaction.text
        return _construct(
            cls,
            v,
            checks=tuple(_construct(CheckRecord, c, detail=r(c.detail)) for c in v.checks),
            criteria=tuple(
                _construct(CriterionRecord, c, evidence=r(c.evidence)) for c in v.criteria
            ),
            raw_output=r(v.raw_output),
            redacted=redaction.marker,
            # A trace verdict's record reads back without a scope; keep the two equal.
            scope=None if v.scope == "trace" else v.scope,
        )


def _criterion(c: CriterionResult, evidence: str | None) -> dict[str, Any]:
    criterion: dict[str, Any] = {"name": c.name, "outcome": c.outcome.value, "gate": c.gate}
    if evidence is not None:
        criterion["evidence"] = evidence
    if c.reason is not None:
        criterion["reason"] = c.reason
    return criterion


# -- the review record ------------------------------------------------------------------


class ToolCallRecord(_Record):
    name: str
    call_id: str | None = None
    arguments: str | None = None
    result: str | None = None
    error: str | None = None
    untrusted: bool = False


class TranscriptRecord(_Record):
    agent: str | None = None
    agent_version: str | None = None
    user_input: str | None = None
    tool_calls: tuple[ToolCallRecord, ...] = ()
    answer: str | None = None
    models: tuple[str, ...] = ()
    latency_ms: float | None = None
    redacted: str | None = _left_out_when_none()

    @classmethod
    def of(cls, t: Transcript, redaction: Redaction = DEFAULT_REDACTION) -> TranscriptRecord:
        r = redaction.text
        return _construct(
            cls,
            t,
            agent=t.agent_name,
            user_input=r(t.user_input),
            tool_calls=tuple(
                _construct(
                    ToolCallRecord,
                    c,
                    arguments=r(c.arguments),
                    result=r(c.result),
                    error=r(c.error),
                )
                for c in t.tool_calls
            ),
            answer=r(t.answer),
            models=tuple(t.models),
            redacted=redaction.marker,
        )


class ReviewRecord(_Record):
    """A case routed to human review: why, the verdict, and what the agent did."""

    trace_id: str
    reasons: tuple[str, ...]
    verdict: VerdictRecord
    transcript: TranscriptRecord

    @classmethod
    def of(
        cls,
        verdict: Verdict,
        transcript: Transcript,
        reasons: Iterable[str],
        redaction: Redaction = DEFAULT_REDACTION,
    ) -> ReviewRecord:
        return cls.model_construct(
            trace_id=verdict.trace_id,
            reasons=tuple(reasons),
            verdict=VerdictRecord.of(verdict, redaction),
            transcript=TranscriptRecord.of(transcript, redaction),
        )


# -- human labels -------------------------------------------------------------------------


class _LabelRecord(_Record):
    case_id: Annotated[str, BeforeValidator(_case_id)]
    criterion: Id

    @classmethod
    def _prepare(cls, data: Mapping[str, Any]) -> Mapping[str, Any]:
        trace_id, case_id = data.get("trace_id"), data.get("case_id")
        if trace_id and case_id and str(trace_id) != str(case_id):
            raise _problem(
                f"fields 'trace_id' {trace_id!r} and 'case_id' {case_id!r} name different cases"
            )
        return {**data, "case_id": trace_id or case_id}


class HumanLabel(_LabelRecord):
    """One person's PASS/FAIL on one case and criterion (the label rule is in the module docstring)."""

    rater: Annotated[str | None, BeforeValidator(_rater)] = Field(
        default=None, validate_default=True
    )
    label: Annotated[Outcome, BeforeValidator(_human_label)]
    rubric_id: Annotated[str | None, BeforeValidator(_echo)] = None
    rubric_version: Annotated[str | None, BeforeValidator(_echo)] = None
    judge_model: Annotated[str | None, BeforeValidator(_echo)] = None
    judge_outcome: Annotated[Outcome | None, BeforeValidator(_echo_outcome)] = None


class Adjudication(_LabelRecord):
    """The label that settles one (case, criterion) the raters disagreed on."""

    label: Annotated[Outcome, BeforeValidator(_human_label)]


# -- pairs of sidecar compare ----------------------------------------------------------------


class PairRecord(_Record):
    """``{"id", "prompt", "candidate", "baseline"}``; the texts may be empty, never absent."""

    id: Annotated[str, BeforeValidator(_pair_id)]
    prompt: PairText
    candidate: PairText
    baseline: PairText


# -- reading ----------------------------------------------------------------------------


def _at(where: str | None, message: str) -> str:
    return f"{where}: {message}" if where else message


def _describe(error: ErrorDetails) -> str:
    loc = error["loc"]
    if error["type"] == "record":
        # Our messages name their own field; the path leads to the object holding it.
        path = loc[:-1] if loc and isinstance(loc[-1], str) else loc
    else:
        path = loc
    return _at(".".join(str(part) for part in path), error["msg"])


def validate(
    model: type[R],
    data: object,
    where: str | None = None,
    *,
    context: Mapping[str, object] | None = None,
) -> R:
    """``model`` from parsed JSON; the first problem as a RecordError naming ``where``."""
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        raise RecordError(_at(where, _describe(exc.errors(include_url=False)[0]))) from exc


def read_records(
    lines: Iterable[str],
    source: str,
    model: type[R],
    *,
    context: Mapping[str, object] | None = None,
) -> Iterator[tuple[int, R]]:
    """(line number, record) for each non-blank line of a JSON-lines file named ``source``."""
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        where = f"{source}:{number}"
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise RecordError(f"{where}: not valid JSON: {exc.msg}") from exc
        if not isinstance(value, dict):
            raise RecordError(f"{where}: expected a JSON object")
        yield number, validate(model, value, where, context=context)


def parse_label(payload: bytes, where: str | None = None) -> HumanLabel:
    """One label message from the labels topic; ``where`` (the topic) starts any error."""
    try:
        data = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise RecordError(_at(where, f"not valid JSON: {exc.msg}")) from exc
    except UnicodeDecodeError as exc:
        raise RecordError(_at(where, f"not UTF-8 text (byte {exc.start})")) from exc
    if not isinstance(data, dict):
        raise RecordError(_at(where, "expected a JSON object"))
    return validate(HumanLabel, data, where)


def parse_pairs(lines: Iterable[str], source: str) -> list[PairRecord]:
    """Pairs from JSON lines; blank lines are skipped, anything else malformed is an error.

    The wording of these messages predates the other readers and is kept.
    """
    pairs: list[PairRecord] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise RecordError(f"{where}: not JSON: {exc}") from exc
        if not isinstance(item, dict):
            raise RecordError(f"{where}: expected a JSON object")
        pair = validate(PairRecord, item, where)
        if pair.id in seen:
            raise RecordError(f"{where}: duplicate id {pair.id!r}")
        seen.add(pair.id)
        pairs.append(pair)
    if not pairs:
        raise InputFileError(f"{source}: no pairs")
    return pairs
