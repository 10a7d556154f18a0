"""``sidecar diff --baseline FILE --candidate FILE [--json]``: two runs over the same traces.

Prints, per rubric check and criterion, both pass rates with their Wilson
intervals, the flips in each direction, the other changes (to or from ERROR
and SKIPPED) and the results only one file has; then which provenance fields
(rubric version and hash, judge model and served version, agent version)
differ between the files. ``--json`` prints the report as JSON on stdout
instead. The rules are in :mod:`sidecar.drift.verdict_diff`.

A report is the outcome, so the exit code is 0; unreadable or empty files
are errors the command line reports with exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from sidecar.calibrate.inputs import parse_verdicts
from sidecar.calibrate.release_gate import DEFAULT_CONFIDENCE
from sidecar.commands._io import consoles, read_lines
from sidecar.drift.verdict_diff import DiffReport, DiffRow, Kind, Side, diff_verdicts
from sidecar.errors import InputFileError, UsageError
from sidecar.terminal import plain, warning_line
from sidecar.wire.verdicts import VerdictRecord


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "diff",
        help="compare two verdict files for the same traces",
        description=(
            "Per check and criterion: pass rates with Wilson intervals, flips (PASS->FAIL, "
            "FAIL->PASS), changes to and from ERROR and SKIPPED, results only in one file; "
            "and which of rubric, judge model version and agent version changed."
        ),
    )
    parser.add_argument(
        "--baseline", type=Path, required=True, metavar="FILE", help="verdict records (JSON lines)"
    )
    parser.add_argument(
        "--candidate", type=Path, required=True, metavar="FILE", help="verdict records (JSON lines)"
    )
    parser.add_argument(
        "--confidence",
        type=float,
        default=DEFAULT_CONFIDENCE,
        metavar="Z",
        help=f"confidence of the Wilson intervals (default {DEFAULT_CONFIDENCE})",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    parser.set_defaults(handler=run, error_prefix=parser.prog)


def _read(path: Path, err: Console) -> list[VerdictRecord]:
    records = parse_verdicts(read_lines(path, err), str(path))
    if not records:
        raise InputFileError(f"{path}: no verdict records")
    return records


def run(args: argparse.Namespace) -> int:
    out, err = consoles()
    baseline = _read(args.baseline, err)
    candidate = _read(args.candidate, err)
    try:
        report = diff_verdicts(baseline, candidate, confidence=args.confidence)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if args.json:
        document = {
            "baseline": str(args.baseline),
            "candidate": str(args.candidate),
            **report.to_json(),
        }
        sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    else:
        print_diff(report, out)
    for warning in report.warnings:
        err.print(warning_line(warning))
    return 0


def _rate(side: Side) -> str:
    interval = side.interval
    if side.pass_rate is None or interval is None:
        return "n/a"
    return f"{side.pass_rate:.3f} [{interval.low:.3f}, {interval.high:.3f}]"


def _change(row: DiffRow) -> str:
    change = row.pass_rate_change
    return "n/a" if change is None else f"{change:+.3f}"


def print_diff(report: DiffReport, console: Console) -> None:
    cases = report.cases
    console.print(
        plain(
            f"cases: {cases.paired} in both files, {cases.only_baseline} only in the baseline, "
            f"{cases.only_candidate} only in the candidate"
        )
    )
    percent = f"{report.confidence * 100:g}%"
    table = Table(title="Checks and criteria over the cases in both files", title_justify="left")
    headers = (
        ("rubric", False),
        ("kind", False),
        ("name", False),
        ("paired", False),
        (f"baseline pass rate [{percent}]", True),
        (f"candidate pass rate [{percent}]", True),
        ("change", True),
        ("P->F", False),
        ("F->P", False),
        ("other changes", False),
        ("only base", False),
        ("only cand", False),
    )
    for header, no_wrap in headers:
        table.add_column(
            header,
            justify="left" if header in ("rubric", "kind", "name") else "right",
            no_wrap=no_wrap,
        )
    for row in report.rows:
        other = ", ".join(f"{k} {n}" for k, n in row.other_changes.items()) or "0"
        table.add_row(
            plain(row.rubric),
            row.kind.value,
            plain(row.name),
            str(row.paired),
            _rate(row.baseline),
            _rate(row.candidate),
            _change(row),
            str(row.pass_to_fail),
            str(row.fail_to_pass),
            plain(other),
            str(row.only_baseline),
            str(row.only_candidate),
        )
    console.print(table)
    changed = report.changed_provenance
    if not changed:
        console.print(plain("provenance: the same in both files"))
    for item in changed:
        console.print(
            plain(
                f"changed: {item.rubric} {item.field}: {', '.join(item.baseline) or 'n/a'} -> "
                f"{', '.join(item.candidate) or 'n/a'}"
            )
        )
    same = sorted({p.field for p in report.provenance} - {p.field for p in changed})
    if changed and same:
        console.print(plain(f"unchanged: {', '.join(same)}"))
    for kind, what in ((Kind.CHECK, "checks"), (Kind.CRITERION, "criteria")):
        rows = [r for r in report.rows if r.kind is kind]
        if rows:
            flips = sum(r.pass_to_fail + r.fail_to_pass for r in rows)
            changes = sum(sum(r.other_changes.values()) for r in rows)
            console.print(plain(f"{what}: {flips} flips, {changes} other changes"))
