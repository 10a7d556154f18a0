"""``sidecar calibrate``: how often does the judge agree with careful humans?

Reads the files, runs :func:`sidecar.calibrate.agreement.calibrate`, prints a
table and writes the JSON report, the Markdown report with its pictures and
the rubric's ``calibration:`` block when asked. Exit 0 when the report was
made (unfit criteria are a finding, not a failure); errors are raised and the
command line reports them as ``sidecar calibrate: ...`` with exit code 2.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

from sidecar.calibrate.agreement import (
    DEFAULT_HELD_OUT_SHARE,
    DEFAULT_KAPPA_THRESHOLD,
    CalibrationReport,
    calibrate,
)
from sidecar.calibrate.inputs import parse_adjudications, parse_labels, parse_verdicts
from sidecar.calibrate.report import (
    REPORT_EXTRA_MISSING,
    calibration_markdown,
    confusion_png,
    image_name,
    pictures_available,
    print_calibration,
)
from sidecar.calibrate.rubric_write import write_back
from sidecar.commands._io import consoles, read_lines, read_text, write_file, write_output
from sidecar.errors import InputFileError, UsageError
from sidecar.terminal import plain, warning_line


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
    parser.set_defaults(handler=run, error_prefix=parser.prog)


def _json_document(
    report: CalibrationReport, args: argparse.Namespace, today: dt.date
) -> dict[str, Any]:
    inputs = {"labels": str(args.labels), "verdicts": str(args.verdicts)}
    if args.adjudication:
        inputs["adjudication"] = str(args.adjudication)
    return {"generated": today.isoformat(), "inputs": inputs, **report.to_json()}


def run(args: argparse.Namespace) -> int:
    stdout, err = consoles()
    # With the JSON on stdout the table goes to stderr so the JSON stays parseable.
    out = err if args.json_out == "-" else stdout
    today: dt.date = args.date or dt.date.today()
    if args.report and not pictures_available():
        raise UsageError(REPORT_EXTRA_MISSING)
    if args.held_out_share is not None and not args.split:
        raise UsageError("--held-out-share applies with --split only; add --split")
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
    try:
        report = calibrate(
            labels,
            verdicts,
            adjudications,
            kappa_threshold=args.kappa_threshold,
            split=args.split,
            held_out_share=(
                DEFAULT_HELD_OUT_SHARE if args.held_out_share is None else args.held_out_share
            ),
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    update = (
        write_back(read_text(args.write_rubric), report, args.write_rubric, today)
        if args.write_rubric
        else None
    )

    print_calibration(report, out)
    document = _json_document(report, args, today)
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    if args.json_out:
        write_output(args.json_out, text, sys.stdout)
    if args.report:
        images = {index: image_name(row) for index, row in enumerate(report.rows)}
        for index, row in enumerate(report.rows):
            write_file(args.report / images[index], confusion_png(row))
        inputs = [(key, Path(value).name) for key, value in document["inputs"].items()]
        markdown = calibration_markdown(
            report, images=images, inputs=inputs, generated=today.isoformat()
        )
        write_file(args.report / "report.md", markdown)
        write_file(args.report / "report.json", text)
        err.print(plain(f"report written to {args.report}"))
    if update is not None:
        write_file(args.write_rubric, update.text)
        for warning in update.warnings:
            err.print(warning_line(warning))
        gated = ", ".join(update.gated_off) or "none"
        err.print(
            plain(f"{args.write_rubric}: calibration block written; gate set to false on: {gated}")
        )
        if not update.comments_kept:
            err.print(
                warning_line(f"{args.write_rubric} was rewritten by PyYAML: comments were lost"),
            )
    return 0
