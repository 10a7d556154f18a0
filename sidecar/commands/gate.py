"""``sidecar gate``: pass or fail a release on the verdict records of an evaluation run.

Exit 0 when the gate passes, 1 when it fails (the reasons are printed); errors
are raised and the command line reports them as ``sidecar gate: ...`` with exit
code 2. ``--json`` prints the machine-readable result for CI.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from sidecar.calibrate.inputs import parse_verdicts
from sidecar.calibrate.release_gate import (
    DEFAULT_CONFIDENCE,
    DEFAULT_MAX_ERROR_RATE,
    DEFAULT_MIN_LOWER_BOUND,
    GatePolicy,
    evaluate_gate,
)
from sidecar.calibrate.report import print_gate
from sidecar.commands._io import consoles, read_lines
from sidecar.errors import InputFileError, UsageError
from sidecar.logs import shown


def _criterion_min(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=X, got {text!r}")
    try:
        return name.strip(), float(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a number in {text!r}") from exc


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "gate",
        help="pass or fail a release on an evaluation run's verdicts",
        description=(
            "Fail when a gating check failed, when a gated criterion's Wilson lower bound on its "
            "pass rate is under its threshold, or when the ERROR rate is too high."
        ),
    )
    parser.add_argument(
        "--verdicts", type=Path, required=True, metavar="FILE", help="verdict records (JSON lines)"
    )
    parser.add_argument(
        "--min-lower-bound",
        type=float,
        default=DEFAULT_MIN_LOWER_BOUND,
        metavar="X",
        help=f"minimum Wilson lower bound of each gated criterion's pass rate (default {DEFAULT_MIN_LOWER_BOUND})",
    )
    parser.add_argument(
        "--criterion-min",
        type=_criterion_min,
        action="append",
        default=[],
        metavar="NAME=X",
        help="minimum lower bound for one criterion (repeatable; overrides --min-lower-bound)",
    )
    parser.add_argument(
        "--max-error-rate",
        type=float,
        default=DEFAULT_MAX_ERROR_RATE,
        metavar="Y",
        help=f"maximum share of ERROR among gating results (default {DEFAULT_MAX_ERROR_RATE})",
    )
    parser.add_argument(
        "--confidence",
        type=float,
        default=DEFAULT_CONFIDENCE,
        metavar="Z",
        help=f"confidence of the Wilson bound (default {DEFAULT_CONFIDENCE})",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    parser.set_defaults(handler=run, error_prefix=parser.prog)


def run(args: argparse.Namespace) -> int:
    out, err = consoles()
    verdicts = parse_verdicts(read_lines(args.verdicts, err), str(args.verdicts))
    if not verdicts:
        raise InputFileError(f"{args.verdicts}: no verdict records")
    try:
        policy = GatePolicy(
            min_lower_bound=args.min_lower_bound,
            max_error_rate=args.max_error_rate,
            confidence=args.confidence,
            criterion_min=dict(args.criterion_min),
        )
        report = evaluate_gate(verdicts, policy)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if args.json:
        sys.stdout.write(json.dumps(report.to_json(), indent=2) + "\n")
    else:
        print_gate(report, out)
    if not report.passed and args.json:
        # CI logs show stderr; the reasons belong there too when stdout is JSON.
        for reason in report.reasons:
            print(f"sidecar gate: {shown(reason)}", file=sys.stderr)
    return 0 if report.passed else 1
