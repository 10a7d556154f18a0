"""What every record of :mod:`sidecar.wire` shares: the strict base models, field rules, readers.

Two bases, both frozen and in pydantic's strict mode (no coercion: a string is
not a number, ``1`` is not ``true``, a list becomes a tuple only where a rule
below says so):

- :class:`Record`, for records that people also write (verdict files made by
  hand, labels, pairs): unknown keys are ignored, ids may be integers, and the
  field rules word their own messages;
- :class:`InternalRecord`, for records only sidecar writes and reads (the
  turn and state topics): unknown keys are refused, pydantic's messages name
  the field.

Versions: a record family with a version (``FAMILY``, ``VERSION`` and a
field ``v``) is read when its ``v`` is that version, or absent (written before
records carried one). Any other ``v`` is refused, a newer one with a message
naming it and the version this release reads.

Reading (:func:`validate`, :func:`read_records`, :func:`parse_json_record`)
turns any problem into a :class:`~sidecar.errors.RecordError` that starts
with where the record came from (``file:line``, or the topic) and names the
field. A missing field gets the same message as a wrong one.

Writing: :func:`record_json` is the one form of every record sidecar writes:
one compact JSON line, non-ASCII kept.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from sidecar.errors import RecordError
from sidecar.text import loads as text_loads
from sidecar.text import valid

M = TypeVar("M", bound=BaseModel)

# The key of the schema version on every record family that has one.
VERSION_KEY = "v"


# -- field rules ---------------------------------------------------------------------


def problem(message: str) -> PydanticCustomError:
    """A validation error with ``message`` as it stands (the field rules word their own)."""
    # The message is passed as context so that braces in it are not read as a template.
    return PydanticCustomError("record", "{message}", {"message": message})


def as_id(value: object) -> str | None:
    """``value`` as an id, or None: ids may come as numbers from hand-made files."""
    if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
        return str(value)
    return None


# A trace id (32 hex digits) or a span id (16), in any letter case.
_HEX_ID = re.compile(r"[0-9A-Fa-f]{32}|[0-9A-Fa-f]{16}")


def normal_id(text: str) -> str:
    """The one form ids are compared in: trace and span ids as lower-case hex.

    OTLP/JSON and people's files may spell them in capitals (``0AF7...``);
    sidecar writes lower case. Other ids (hand-made case names) are kept as
    they are.
    """
    stripped = text.strip()
    if _HEX_ID.fullmatch(stripped):
        return stripped.lower()
    return text


def _trace_id(value: object, info: ValidationInfo) -> str:
    return normal_id(_id(value, info))


def _span_id(value: object) -> object:
    return normal_id(value) if isinstance(value, str) else value


def _id(value: object, info: ValidationInfo) -> str:
    if (text := as_id(value)) is not None:
        return text
    raise problem(f"field {info.field_name!r} must be a non-empty string")


def _items(value: object, info: ValidationInfo) -> object:
    # JSON has lists; the records hold tuples (strict mode takes no list for a tuple).
    if isinstance(value, list | tuple):
        return tuple(value)
    raise problem(f"field {info.field_name!r} must be a list")


def _texts(value: object, info: ValidationInfo) -> tuple[str, ...]:
    if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
        return tuple(value)
    raise problem(f"field {info.field_name!r} must be a list of strings")


def _trace_ids(value: object, info: ValidationInfo) -> tuple[str, ...]:
    return tuple(normal_id(item) for item in _texts(value, info))


def _echo(value: object) -> str | None:
    return None if value is None else str(value)


def _is_none(value: object) -> bool:
    return value is None


Id = Annotated[str, BeforeValidator(_id)]
# A trace id in its normal form (:func:`normal_id`).
TraceId = Annotated[str, BeforeValidator(_trace_id)]
# An optional span id in its normal form.
SpanId = Annotated[str | None, BeforeValidator(_span_id)]
# A list of records or values (the element type is checked as usual).
ITEMS = BeforeValidator(_items)
Texts = Annotated[tuple[str, ...], BeforeValidator(_texts)]
TraceIds = Annotated[tuple[str, ...], BeforeValidator(_trace_ids)]
# An id on the internal topics (turns, state): bounded, never empty.
InternalId = Annotated[str, Field(min_length=1, max_length=512)]
# A value only repeated from elsewhere (provenance, a label's judge echo): kept as text.
Echo = Annotated[str | None, BeforeValidator(_echo)]


def left_out_when_none() -> Any:
    """A field written only when it has a value (the record leaves the key out, not null)."""
    return Field(default=None, exclude_if=_is_none)


# -- versions ------------------------------------------------------------------------


def check_version(given: object, family: str, version: int) -> object:
    """``given`` when it is ``version``; else the problem (a newer version named as such).

    A record without ``v`` was written before records carried one; the field's
    default stands for it and this is not asked.
    """
    if isinstance(given, int) and not isinstance(given, bool):
        if given == version:
            return given
        if given > version:
            raise problem(
                f"{family} version {given} is newer than this release reads "
                f"(version {version}); upgrade sidecar to read it"
            )
    raise problem(f"field {VERSION_KEY!r} must be {family} version {version}, got {given!r}")


# -- the bases -----------------------------------------------------------------------


class Record(BaseModel):
    """A record people may write too: unknown keys ignored, messages worded by the field rules."""

    model_config = ConfigDict(frozen=True, extra="ignore", strict=True)

    # Set on each versioned family: its name in messages and the version this release reads.
    FAMILY: ClassVar[str] = ""
    VERSION: ClassVar[int] = 0

    @model_validator(mode="before")
    @classmethod
    def _an_object(cls, data: Any) -> Any:
        if isinstance(data, cls):
            return data
        if not isinstance(data, Mapping):
            raise problem("expected an object")
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

    @field_validator(VERSION_KEY, mode="before", check_fields=False)
    @classmethod
    def _known_version(cls, value: object) -> object:
        return check_version(value, cls.FAMILY, cls.VERSION)

    def to_json(self) -> str:
        """The record as read, as one JSON line again (reading loses nothing)."""
        return record_json(self.model_dump(mode="json"))


class InternalRecord(BaseModel):
    """A record only sidecar writes and reads: unknown keys refused."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    FAMILY: ClassVar[str] = ""
    VERSION: ClassVar[int] = 0

    # A field rule, not a model one: a model-level rule would make pydantic validate
    # JSON input as Python objects, where strict mode takes no list for a tuple.
    @field_validator(VERSION_KEY, mode="before", check_fields=False)
    @classmethod
    def _known_version(cls, value: object) -> object:
        return check_version(value, cls.FAMILY, cls.VERSION)

    def to_bytes(self) -> bytes:
        return record_json(self.model_dump(mode="json")).encode("utf-8")


# -- writing -------------------------------------------------------------------------

# What ``json.dumps(value, ensure_ascii=False, separators=(",", ":"))`` builds per call.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def record_json(value: Mapping[str, Any]) -> str:
    """One compact JSON line, non-ASCII kept: the form of every record sidecar writes.

    Always encodable: a lone surrogate that reached a record anyway becomes U+FFFD.
    """
    return valid(_ENCODER.encode(value))


# -- reading -------------------------------------------------------------------------


def at(where: str | None, message: str) -> str:
    return f"{where}: {message}" if where else message


def _describe(error: ErrorDetails) -> str:
    loc = error["loc"]
    if error["type"] == "record":
        # Our messages name their own field; the path leads to the object holding it.
        path = loc[:-1] if loc and isinstance(loc[-1], str) else loc
    else:
        path = loc
    return at(".".join(str(part) for part in path), error["msg"])


def validate(
    model: type[M],
    data: object,
    where: str | None = None,
    *,
    context: Mapping[str, object] | None = None,
) -> M:
    """``model`` from parsed JSON; the first problem as a RecordError naming ``where``."""
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        raise RecordError(at(where, _describe(exc.errors(include_url=False)[0]))) from exc


def parse_json_record(model: type[M], payload: bytes | None, where: str) -> M:
    """``model`` from one JSON message of a topic; RecordError naming ``where`` and the field."""
    if payload is None:
        raise RecordError(f"{where}: record has no value")
    try:
        return model.model_validate_json(payload)
    except ValidationError as exc:
        raise RecordError(at(where, _describe(exc.errors(include_url=False)[0]))) from exc


def read_records(
    lines: Iterable[str],
    source: str,
    model: type[M],
    *,
    context: Mapping[str, object] | None = None,
) -> Iterator[tuple[int, M]]:
    """(line number, record) for each non-blank line of a JSON-lines file named ``source``."""
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        where = f"{source}:{number}"
        try:
            value = text_loads(raw)
        except json.JSONDecodeError as exc:
            raise RecordError(f"{where}: not valid JSON: {exc.msg} (column {exc.colno})") from exc
        if not isinstance(value, dict):
            raise RecordError(f"{where}: expected a JSON object")
        yield number, validate(model, value, where, context=context)
