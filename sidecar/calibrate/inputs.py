"""The inputs of calibration and the gate, from already-read JSON lines (the command opens the files).

- human labels (:class:`~sidecar.wire.labels.HumanLabel`, the one label rule of
  :mod:`sidecar.wire.labels`; here the ``rater`` is required); a rater giving two
  different labels to one item is an error;
- adjudications (:class:`~sidecar.wire.labels.Adjudication`) that settle items the
  raters disagreed on; two different labels for one item are an error;
- verdict records (:class:`~sidecar.wire.verdicts.VerdictRecord`); a label's
  ``case_id`` is the record's ``trace_id``. At-least-once delivery repeats
  records, so :func:`dedupe` keeps the first per idempotency key.

Every problem is a :class:`~sidecar.errors.RecordError` naming file and line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

from sidecar.errors import RecordError
from sidecar.model import Outcome
from sidecar.wire import read_records
from sidecar.wire.labels import Adjudication, HumanLabel
from sidecar.wire.verdicts import VerdictRecord

# Inter-rater agreement and the per-rater consistency check need to know who labelled.
_REQUIRE_RATER: Mapping[str, object] = MappingProxyType({"require_rater": True})


def parse_labels(lines: Iterable[str], source: str) -> list[HumanLabel]:
    """Human label lines; a rater repeating a label is kept once, contradicting it is an error."""
    seen: dict[tuple[str, str, str | None], tuple[HumanLabel, int]] = {}
    for number, label in read_records(lines, source, HumanLabel, context=_REQUIRE_RATER):
        key = (label.case_id, label.criterion, label.rater)
        earlier = seen.get(key)
        if earlier is None:
            seen[key] = (label, number)
        elif earlier[0].label != label.label:
            raise RecordError(
                f"{source}:{number}: rater {label.rater!r} labelled case {label.case_id!r} "
                f"criterion {label.criterion!r} {label.label} here and {earlier[0].label} "
                f"on line {earlier[1]}"
            )
    return [label for label, _ in seen.values()]


def parse_adjudications(lines: Iterable[str], source: str) -> dict[tuple[str, str], Outcome]:
    """Adjudication lines, keyed by (case id, criterion)."""
    out: dict[tuple[str, str], Outcome] = {}
    first_line: dict[tuple[str, str], int] = {}
    for number, item in read_records(lines, source, Adjudication):
        key = (item.case_id, item.criterion)
        if key in out and out[key] != item.label:
            raise RecordError(
                f"{source}:{number}: case {key[0]!r} criterion {key[1]!r} adjudicated "
                f"{item.label} here and {out[key]} on line {first_line[key]}"
            )
        out[key] = item.label
        first_line.setdefault(key, number)
    return out


def parse_verdicts(lines: Iterable[str], source: str) -> list[VerdictRecord]:
    """Verdict record lines (the output of ``sidecar replay``)."""
    return [record for _, record in read_records(lines, source, VerdictRecord)]


def dedupe(verdicts: Sequence[VerdictRecord]) -> tuple[list[VerdictRecord], int]:
    """Keep the first record per idempotency key; at-least-once delivery repeats records."""
    seen: set[str] = set()
    kept: list[VerdictRecord] = []
    for verdict in verdicts:
        if verdict.key in seen:
            continue
        seen.add(verdict.key)
        kept.append(verdict)
    return kept, len(verdicts) - len(kept)
