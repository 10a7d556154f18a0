"""``sidecar rubrics check DIR``: validate rubric files.

An invalid rubric is the finding of this command, not an error: it is printed
as is and the exit code is 1. A path that is not a directory is a usage error
(exit code 2).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from sidecar.errors import RubricError, UsageError
from sidecar.rubric import load_rubrics


def register(sub: Any) -> None:
    parser = sub.add_parser("rubrics", help="work with rubric files")
    actions = parser.add_subparsers(dest="rubrics_command", metavar="ACTION", required=True)
    check = actions.add_parser("check", help="validate every *.yaml rubric in a directory")
    check.add_argument("directory", type=Path)
    check.set_defaults(handler=handle_check)


def handle_check(args: argparse.Namespace) -> int:
    if not args.directory.is_dir():
        raise UsageError(f"{args.directory}: not a directory of rubric files")
    try:
        rubrics = load_rubrics(args.directory)
    except RubricError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    for rubric in rubrics:
        criteria = len(rubric.judge.criteria) if rubric.judge else 0
        print(
            f"ok  {rubric.id} v{rubric.version}: {len(rubric.checks)} checks, "
            f"{criteria} criteria, judge {rubric.judge_model}"
        )
        if rubric.judge is not None and not 4 <= criteria <= 6:
            print(
                f"    note: {criteria} criteria; 4 to 6 binary criteria usually grade best "
                "(fewer miss failure modes, more dilute the judge's attention)"
            )
    return 0
