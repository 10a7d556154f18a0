"""``sidecar calibrate``: how often does the judge agree with careful humans?

Reads the files, runs :func:`sidecar.calibrate.calibrate.calibrate`, prints a
table and writes the JSON report, the Markdown report with its pictures and
the rubric's ``calibration:`` block when asked. Exit 0 when the report was
made (unfit criteria are a finding, not a failure), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

import rich.progress
from rich.console import Console

from sidecar.calibrate.calibrate import (
    DEFAULT_HELD_OUT_SHARE,
    DEFAULT_KAPPA_THRESHOLD,
    CalibrationReport,
    InputFileError,
    calibrate,
    parse_adjudications,
    parse_labels,
    parse_verdicts,
)
from sidecar.calibrate.report import (
    REPORT_EXTRA_MISSING,
    calibration_markdown,
    confusion_png,
    image_name,
    pictures_available,
    print_calibration,
)
from sidecar.calibrate.rubric_write import write_back
from sidecar.errors import RubricError

# Files larger than this get a progress bar while they are read (on a terminal).
PROGRESS_BYTES = 4 * 1024 * 1024
LOG_WIDTH = 160


def read_lines(path: Path, console: Console, progress_bytes: int = PROGRESS_BYTES) -> list[str]:
    """All lines of a UTF-8 text file; a progress bar for large files on a terminal."""
    try:
        size = path.stat().st_size
        show = console.is_terminal and size > progress_bytes
        with rich.progress.open(
            path,
            "rt",
            encoding="utf-8",
            description=f"reading {path.name}",
            console=console,
            transient=True,
            disable=not show,
        ) as handle:
            return list(handle)
    except FileNotFoundError as exc:
        raise InputFileError(f"{path}: no such file") from exc
    except OSError as exc:
        raise InputFileError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{path}: not UTF-8 text (byte {exc.start})") from exc


def _date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {text!r}") from exc


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "calibrate",
        help="measure judge-human agreement per criterion",
        description=(
            "Compare judge verdicts with human labels per criterion: Cohen's kappa, agreement, "
            "balanced accuracy, balanced F1, confusion matrix (PASS positive), judge ERRORs, "
            "inter-rater kappa and unresolved disagreements."
        ),
    )
    parser.add_argument(
        "--labels", type=Path, required=True, metavar="FILE", help="human labels (JSON lines)"
    )
    parser.add_argument(
        "--adjudication", type=Path, metavar="FILE", help="adjudicated labels (JSON lines)"
    )
    parser.add_argument(
        "--verdicts", type=Path, required=True, metavar="FILE", help="verdict records (JSON lines)"
    )
    parser.add_argument(
        "--split",
        action="store_true",
        help="split cases by case-id hash into a calibration and a held-out part; "
        "fitness is decided on the held-out part",
    )
    parser.add_argument(
        "--held-out-share",
        type=float,
        default=DEFAULT_HELD_OUT_SHARE,
        metavar="X",
        help=f"share of cases held out with --split (default {DEFAULT_HELD_OUT_SHARE})",
    )
    parser.add_argument(
        "--kappa-threshold",
        type=float,
        default=DEFAULT_KAPPA_THRESHOLD,
        metavar="K",
        help=f"minimum kappa for a criterion to gate (default {DEFAULT_KAPPA_THRESHOLD})",
    )
    parser.add_argument(
        "--json", dest="json_out", metavar="OUT", help="write the JSON report ('-' for stdout)"
    )
    parser.add_argument(
        "--report", type=Path, metavar="DIR", help="write report.md, report.json and PNGs here"
    )
    parser.add_argument(
        "--write-rubric",
        type=Path,
        metavar="FILE",
        help="write a calibration: block into this rubric file and set gate: false on unfit criteria",
    )
    parser.add_argument(
        "--date", type=_date, metavar="YYYY-MM-DD", help="date to record (default: today)"
    )
    parser.set_defaults(handler=run)


def _json_document(
    report: CalibrationReport, args: argparse.Namespace, today: dt.date
) -> dict[str, Any]:
    inputs = {"labels": str(args.labels), "verdicts": str(args.verdicts)}
    if args.adjudication:
        inputs["adjudication"] = str(args.adjudication)
    return {"generated": today.isoformat(), "inputs": inputs, **report.to_json()}


def _write(path: Path, data: str | bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data, encoding="utf-8")
    except OSError as exc:
        raise InputFileError(f"{path}: cannot write: {exc.strerror or exc}") from exc


def consoles() -> tuple[Console, Console]:
    """stdout and stderr consoles; wide when not a terminal so tables stay readable in logs."""
    out, err = Console(), Console(stderr=True)
    for console in (out, err):
        if not console.is_terminal:
            console.width = LOG_WIDTH
    return out, err


def run(args: argparse.Namespace) -> int:
    stdout, err = consoles()
    # With the JSON on stdout the table goes to stderr so the JSON stays parseable.
    out = err if args.json_out == "-" else stdout
    today: dt.date = args.date or dt.date.today()
    if args.report and not pictures_available():
        print(f"sidecar calibrate: {REPORT_EXTRA_MISSING}", file=sys.stderr)
        return 2
    try:
        labels = parse_labels(read_lines(args.labels, err), str(args.labels))
        adjudications = (
            parse_adjudications(read_lines(args.adjudication, err), str(args.adjudication))
            if args.adjudication
            else None
        )
        verdicts = parse_verdicts(read_lines(args.verdicts, err), str(args.verdicts))
        if not labels and not adjudications:
            raise InputFileError(f"{args.labels}: no labels")
        if not verdicts:
            raise InputFileError(f"{args.verdicts}: no verdict records")
        report = calibrate(
            labels,
            verdicts,
            adjudications,
            kappa_threshold=args.kappa_threshold,
            split=args.split,
            held_out_share=args.held_out_share,
        )
        rubric_text = None
        if args.write_rubric:
            try:
                rubric_text = args.write_rubric.read_text(encoding="utf-8")
            except OSError as exc:
                raise InputFileError(
                    f"{args.write_rubric}: cannot read: {exc.strerror or exc}"
                ) from exc
        update = (
            write_back(rubric_text, report, args.write_rubric, today)
            if rubric_text is not None
            else None
        )
    except (InputFileError, RubricError, ValueError) as exc:
        print(f"sidecar calibrate: {exc}", file=sys.stderr)
        return 2

    print_calibration(report, out)
    document = _json_document(report, args, today)
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    try:
        if args.json_out == "-":
            sys.stdout.write(text)
        elif args.json_out:
            _write(Path(args.json_out), text)
        if args.report:
            images = {index: image_name(row) for index, row in enumerate(report.rows)}
            for index, row in enumerate(report.rows):
                _write(args.report / images[index], confusion_png(row))
            inputs = [(key, Path(value).name) for key, value in document["inputs"].items()]
            markdown = calibration_markdown(
                report, images=images, inputs=inputs, generated=today.isoformat()
            )
            _write(args.report / "report.md", markdown)
            _write(args.report / "report.json", text)
            err.print(f"report written to {args.report}", highlight=False)
        if update is not None:
            _write(args.write_rubric, update.text)
            for warning in update.warnings:
                err.print(f"[yellow]warning:[/] {warning}", highlight=False)
            gated = ", ".join(update.gated_off) or "none"
            err.print(
                f"{args.write_rubric}: calibration block written; gate set to false on: {gated}",
                highlight=False,
            )
            if not update.comments_kept:
                err.print(
                    f"[yellow]warning:[/] {args.write_rubric} was rewritten by PyYAML: comments were lost",
                    highlight=False,
                )
    except InputFileError as exc:
        print(f"sidecar calibrate: {exc}", file=sys.stderr)
        return 2
    return 0
