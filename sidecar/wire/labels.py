"""Human labels: one per message on the labels topic, one per line in calibration files.

:class:`HumanLabel` is a person's PASS/FAIL on one case and criterion
(``review.labels_topic``, ``sidecar calibrate --labels``, canary sets);
:class:`Adjudication` settles an item the raters disagreed on
(``--adjudication``). People and labelling tools write them; sidecar only
reads them. ``v`` (:data:`LABEL_RECORD_VERSION`) is optional: a label
without one is version 1.

The label rule, one for the labels topic and for calibration files:

- the case is ``trace_id`` or ``case_id``; when both are given they must be
  equal (as text, hex ids in any letter case), and the first non-empty one is
  taken; a trace id is kept lower-cased (:func:`~sidecar.wire._base.normal_id`),
  the form every verdict record has, so labels pair whatever case they use;
- ``criterion`` is an id (a non-empty string, or an integer, kept as text,
  since hand-made files number their cases); ``label`` is PASS or FAIL, in
  any letter case;
- ``rater`` is an id as above, or absent; calibration files must name it
  (``context={"require_rater": True}``), since inter-rater agreement needs it;
- the judge echo (``rubric_id``, ``rubric_version``, ``judge_model``,
  ``judge_outcome``) is optional; a ``judge_outcome`` other than PASS, FAIL or
  ERROR is ignored, as the echo only helps match a label to a forgotten case.

Unknown keys are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, Field, ValidationInfo

from sidecar.errors import RecordError
from sidecar.model import Outcome
from sidecar.text import loads as text_loads
from sidecar.wire._base import Echo, Id, Record, as_id, at, normal_id, problem, validate

LABEL_RECORD_VERSION = 1


def _case_id(value: object) -> str:
    if (text := as_id(value)) is not None:
        return normal_id(text)
    raise problem("field 'case_id' (or 'trace_id') must be a non-empty string")


def _human_label(value: object) -> Outcome:
    if isinstance(value, str) and value.upper() in ("PASS", "FAIL"):
        return Outcome(value.upper())
    raise problem(f'field \'label\' must be "PASS" or "FAIL", got {value!r}')


def _rater(value: object, info: ValidationInfo) -> str | None:
    if value is None and not (info.context or {}).get("require_rater", False):
        return None
    if (text := as_id(value)) is not None:
        return text
    raise problem(f"field {info.field_name!r} must be a non-empty string")


def _echo_outcome(value: object) -> Outcome | None:
    return Outcome(value) if isinstance(value, str) and value in ("PASS", "FAIL", "ERROR") else None


Label = Annotated[Outcome, BeforeValidator(_human_label)]


class _LabelRecord(Record):
    FAMILY: ClassVar[str] = "label record"
    VERSION: ClassVar[int] = LABEL_RECORD_VERSION

    v: int = LABEL_RECORD_VERSION
    case_id: Annotated[str, BeforeValidator(_case_id)]
    criterion: Id

    @classmethod
    def _prepare(cls, data: Mapping[str, Any]) -> Mapping[str, Any]:
        trace_id, case_id = data.get("trace_id"), data.get("case_id")
        if trace_id and case_id and normal_id(str(trace_id)) != normal_id(str(case_id)):
            raise problem(
                f"fields 'trace_id' {trace_id!r} and 'case_id' {case_id!r} name different cases"
            )
        return {**data, "case_id": trace_id or case_id}


class HumanLabel(_LabelRecord):
    """One person's PASS/FAIL on one case and criterion (the label rule is in the module docstring)."""

    rater: Annotated[str | None, BeforeValidator(_rater)] = Field(
        default=None, validate_default=True
    )
    label: Label
    rubric_id: Echo = None
    rubric_version: Echo = None
    judge_model: Echo = None
    judge_outcome: Annotated[Outcome | None, BeforeValidator(_echo_outcome)] = None


class Adjudication(_LabelRecord):
    """The label that settles one (case, criterion) the raters disagreed on."""

    label: Label


def parse_label(payload: bytes, where: str | None = None) -> HumanLabel:
    """One label message from the labels topic; ``where`` (the topic) starts any error."""
    try:
        data = text_loads(payload)
    except json.JSONDecodeError as exc:
        raise RecordError(at(where, f"not valid JSON: {exc.msg} (column {exc.colno})")) from exc
    except UnicodeDecodeError as exc:
        raise RecordError(at(where, f"not UTF-8 text (byte {exc.start})")) from exc
    if not isinstance(data, dict):
        raise RecordError(at(where, "expected a JSON object"))
    return validate(HumanLabel, data, where)
