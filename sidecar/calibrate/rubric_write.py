"""Write calibration results back into a rubric file.

Two changes, nothing else: a top-level ``calibration:`` block (judge model,
rubric version, date, per-criterion kappa and n) replaces any earlier one, and
``gate: false`` is set on the criteria that are not fit to gate. A criterion
that is fit is never switched back on: someone may have turned it off for a
reason calibration cannot see.

The file is edited as text at the positions PyYAML's composer reports, so
comments, key order and quoting elsewhere survive. The edit is then checked by
loading both versions and comparing them with the intended data; if they
differ (an unusual layout the text edit got wrong) the whole file is dumped
again with PyYAML in its original key order, which loses comments, and
``comments_kept`` is False so the command can say so. ruamel.yaml would keep
comments in every case but is not a dependency.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sidecar.calibrate.agreement import CalibrationReport, CriterionReport
from sidecar.errors import RubricError
from sidecar.evaluate.rubric import Rubric, parse_rubric


@dataclass(frozen=True, slots=True)
class RubricUpdate:
    text: str
    comments_kept: bool
    gated_off: tuple[str, ...]  # criteria this update set to gate: false
    warnings: tuple[str, ...] = ()


def select_rows(
    report: CalibrationReport, rubric: Rubric
) -> tuple[list[CriterionReport], list[str]]:
    """The report rows that belong to this rubric file: its id, judge model and version."""
    rows = [row for row in report.decisive_rows() if row.rubric_id == rubric.id]
    if not rows:
        ids = sorted({row.rubric_id for row in report.rows}) or ["none"]
        raise RubricError(
            f"no calibration results for rubric {rubric.id!r} (results are for: {', '.join(ids)})"
        )
    models = {row.judge_model for row in rows}
    if rubric.judge is not None and rubric.judge.model in models:
        rows = [row for row in rows if row.judge_model == rubric.judge.model]
    elif len(models) > 1:
        raise RubricError(
            f"verdicts for rubric {rubric.id!r} come from several judge models ({', '.join(sorted(models))}) "
            f"and none is the rubric's own ({rubric.judge_model})"
        )
    warnings: list[str] = []
    versions = {row.rubric_version for row in rows}
    if rubric.version in versions:
        rows = [row for row in rows if row.rubric_version == rubric.version]
    elif len(versions) > 1:
        raise RubricError(
            f"verdicts for rubric {rubric.id!r} come from versions {', '.join(sorted(versions))}, "
            f"none of them the file's version {rubric.version!r}"
        )
    else:
        warnings.append(
            f"calibrated on rubric version {next(iter(versions))!r} but the file is version "
            f"{rubric.version!r}: the block records the calibrated version"
        )
    if rows[0].judge_model != rubric.judge_model:
        warnings.append(
            f"calibrated with judge {rows[0].judge_model!r} but the rubric uses {rubric.judge_model!r}"
        )
    known = {c.name for c in rubric.judge.criteria} if rubric.judge else set()
    stray = sorted({row.criterion for row in rows} - known)
    if stray:
        warnings.append("calibrated criteria not in the rubric file: " + ", ".join(stray))
    uncalibrated = sorted(known - {row.criterion for row in rows})
    if uncalibrated:
        warnings.append(
            "criteria without calibration results (left as they are): " + ", ".join(uncalibrated)
        )
    return [row for row in rows if row.criterion in known], warnings


def calibration_block(
    rows: Sequence[CriterionReport], report: CalibrationReport, today: dt.date
) -> dict[str, Any]:
    first = rows[0]
    return {
        "judge_model": first.judge_model,
        "rubric_version": first.rubric_version,
        "date": today.isoformat(),
        "kappa_threshold": report.kappa_threshold,
        "part": report.decisive_part.value,
        "criteria": {
            row.criterion: {
                "kappa": None if row.kappa is None else round(row.kappa, 4),
                "n": row.confusion.n,
                "fit_to_gate": row.fit_to_gate,
            }
            for row in rows
        },
    }


def _node(mapping: yaml.Node, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    if not isinstance(mapping, yaml.MappingNode):
        return None
    for key_node, value_node in mapping.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
            return key_node, value_node
    return None


def _content_end(text: str, start: int, end: int) -> int:
    """Pull a block node's end back over the blank and comment lines PyYAML counts in it."""
    lines = text[start:end].splitlines(keepends=True)
    while len(lines) > 1 and (not lines[-1].strip() or lines[-1].lstrip().startswith("#")):
        lines.pop()
    return start + len("".join(lines))


def _new_block_key(text: str, mapping: yaml.MappingNode, entry: str) -> tuple[int, int, str]:
    """An edit adding ``entry`` to a block mapping, at the column of its other keys."""
    indent = " " * mapping.start_mark.column
    last = mapping.value[-1][1]
    if isinstance(last, yaml.ScalarNode) and last.style in (None, "'", '"'):
        # After the line of the last one-line value, so a comment there stays put.
        newline = text.find("\n", last.end_mark.index)
        if newline >= 0:
            return (newline + 1, newline + 1, f"{indent}{entry}\n")
    # Otherwise (block scalar, nested block, end of file) as the first key.
    at = mapping.start_mark.index
    return (at, at, f"{entry}\n{indent}")


def _text_edits(text: str, block: Mapping[str, Any], unfit: set[str]) -> str:
    root = yaml.compose(text)
    if not isinstance(root, yaml.MappingNode) or root.flow_style:
        raise ValueError("top level is not a block mapping")
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement)

    judge = _node(root, "judge")
    criteria = _node(judge[1], "criteria") if judge else None
    if criteria and isinstance(criteria[1], yaml.SequenceNode):
        for item in criteria[1].value:
            name = _node(item, "name")
            if name is None or name[1].value not in unfit:
                continue
            gate = _node(item, "gate")
            if gate is not None:
                value = gate[1]
                edits.append((value.start_mark.index, value.end_mark.index, "false"))
            elif item.flow_style:
                at = item.start_mark.index + 1  # just inside "{"
                edits.append((at, at, "gate: false, "))
            else:
                edits.append(_new_block_key(text, item, "gate: false"))

    dumped = yaml.safe_dump({"calibration": dict(block)}, sort_keys=False, allow_unicode=True)
    existing = _node(root, "calibration")
    if existing is not None:
        key_node, value_node = existing
        end = _content_end(text, value_node.start_mark.index, value_node.end_mark.index)
        replacement = dumped if text[end - 1 : end] == "\n" else dumped.rstrip("\n")
        edits.append((key_node.start_mark.index, end, replacement))
    else:
        tail = "" if text.endswith("\n") or not text else "\n"
        edits.append((len(text), len(text), f"{tail}\n{dumped}"))

    # Back to front so earlier positions stay valid; at one position, in the order made.
    order = sorted(range(len(edits)), key=lambda i: (edits[i][0], i), reverse=True)
    for start, end, replacement in (edits[i] for i in order):
        text = text[:start] + replacement + text[end:]
    return text


def update_rubric_text(
    text: str, block: Mapping[str, Any], unfit: Iterable[str], path: Path
) -> RubricUpdate:
    """The rubric file text with the calibration block and the unfit criteria gated off."""
    parse_rubric(text, path)  # raises RubricError naming the file and field
    original = yaml.safe_load(text)
    unfit_set = set(unfit)
    expected = copy.deepcopy(original)
    expected["calibration"] = copy.deepcopy(dict(block))
    gated_off: list[str] = []
    for criterion in (expected.get("judge") or {}).get("criteria") or []:
        if isinstance(criterion, dict) and criterion.get("name") in unfit_set:
            if criterion.get("gate", True) is not False:
                gated_off.append(str(criterion["name"]))
            criterion["gate"] = False

    edited: str | None = None
    # A failed text edit is not an error: the PyYAML dump below still does the job.
    with contextlib.suppress(yaml.YAMLError, ValueError):
        candidate = _text_edits(text, block, unfit_set)
        if yaml.safe_load(candidate) == expected:
            edited = candidate
    kept = edited is not None
    new_text = edited or yaml.safe_dump(expected, sort_keys=False, allow_unicode=True)
    parse_rubric(new_text, path)  # the result must still be a valid rubric
    return RubricUpdate(text=new_text, comments_kept=kept, gated_off=tuple(gated_off))


def write_back(text: str, report: CalibrationReport, path: Path, today: dt.date) -> RubricUpdate:
    """Select this rubric's rows from the report and produce the updated file text."""
    rubric = parse_rubric(text, path)
    rows, warnings = select_rows(report, rubric)
    if not rows:
        raise RubricError(f"{path}: none of the calibrated criteria is in this rubric")
    block = calibration_block(rows, report, today)
    unfit = [row.criterion for row in rows if not row.fit_to_gate]
    update = update_rubric_text(text, block, unfit, path)
    return RubricUpdate(update.text, update.comments_kept, update.gated_off, tuple(warnings))
