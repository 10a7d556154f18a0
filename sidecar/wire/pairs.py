"""The pairs of ``sidecar compare --pairs``: one candidate/baseline pair per line.

``{"id", "prompt", "candidate", "baseline"}``, written by people or scripts,
read by :func:`parse_pairs`; ``v`` (:data:`PAIR_RECORD_VERSION`) is optional.
The id may be an integer (kept as text); the texts may be empty, never absent.
Unknown keys are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Annotated, ClassVar

from pydantic import BeforeValidator, ValidationInfo

from sidecar.errors import InputFileError, RecordError
from sidecar.wire._base import Record, problem, validate

PAIR_RECORD_VERSION = 1


def _pair_id(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, str) and value:
        return value
    raise problem('"id" must be a non-empty string')


def _pair_text(value: object, info: ValidationInfo) -> str:
    if isinstance(value, str):
        return value
    raise problem(f'"{info.field_name}" must be a string')


PairText = Annotated[str, BeforeValidator(_pair_text)]


class PairRecord(Record):
    """One pair (see the module docstring)."""

    FAMILY: ClassVar[str] = "pair record"
    VERSION: ClassVar[int] = PAIR_RECORD_VERSION

    v: int = PAIR_RECORD_VERSION
    id: Annotated[str, BeforeValidator(_pair_id)]
    prompt: PairText
    candidate: PairText
    baseline: PairText


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
