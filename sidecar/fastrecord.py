"""Builders for hot frozen records, without the frozen dataclass's per-field cost.

A frozen slotted dataclass sets each field through ``object.__setattr__``
(about 0.15 us a field). The pipeline builds several records per span, so
:func:`record_builder` makes, once per class, a function that fills a
writable twin of the class (the same ``__slots__``) with plain attribute
stores and then turns it into the record by assigning ``__class__``. Python
allows that only between classes with the same slot layout, so a record
whose layout drifted raises ``TypeError`` instead of coming out wrong. The
result is the very record the constructor gives: equality, hash, repr,
``dataclasses.replace``, pickling. The function is generated as source, as
``dataclasses`` generates ``__init__``, so it is as fast as one written by hand.

The builder takes the fields in the class's order. ``defaults`` gives the
parameters the dataclass's defaults (plain defaults only; a field with a
default factory stays required); without it every field must be passed, so a
decoder cannot leave one out by mistake. ``keyword_only_after`` makes the
fields after the first ``n`` keyword-only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def record_builder(
    cls: type[T], *, defaults: bool = False, keyword_only_after: int | None = None
) -> Callable[..., T]:
    """A function building ``cls`` from its fields (see the module docstring)."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    draft = type(f"_{cls.__name__}Draft", (), {"__slots__": cls.__slots__})  # type: ignore[attr-defined]
    namespace: dict[str, Any] = {"_blank": object.__new__, "_draft": draft, "_cls": cls}
    parameters: list[str] = []
    for index, field in enumerate(fields):
        if index == keyword_only_after:
            parameters.append("*")
        if defaults and field.default is not dataclasses.MISSING:
            namespace[f"_default_{field.name}"] = field.default
            parameters.append(f"{field.name}=_default_{field.name}")
        else:
            parameters.append(field.name)
    body = "".join(f"    record.{f.name} = {f.name}\n" for f in fields)
    source = (
        f"def build({', '.join(parameters)}):\n"
        "    record = _blank(_draft)\n"
        f"{body}"
        "    record.__class__ = _cls\n"
        "    return record\n"
    )
    exec(source, namespace)
    build: Callable[..., T] = namespace["build"]
    build.__name__ = build.__qualname__ = f"new_{cls.__name__}"
    build.__doc__ = f"``{cls.__name__}(...)`` without the frozen dataclass's per-field cost."
    return build
