"""``sidecar rubrics check DIR`` and ``sidecar rubrics fingerprint PATH...``.

``check`` validates rubric files. An invalid rubric is the finding of this
command, not an error: it is printed as is and the exit code is 1. A path
that is not a directory is a usage error (exit code 2). Each rubric's content
hash is compared with its recorded ``fingerprint:`` (:mod:`sidecar.drift.fingerprint`):
content changed without a version bump is a warning (exit 1 with
``--strict``), an older fingerprint (the version was bumped since) a note; a
rubric without one is not compared.

``fingerprint`` records each rubric's current version and hash in its file
(the ``fingerprint:`` line; nothing else in the file changes). Run it after a
deliberate version bump.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from sidecar.commands._io import read_text, write_file
from sidecar.drift.fingerprint import FingerprintStatus, check_fingerprint, with_fingerprint
from sidecar.errors import RubricError, UsageError
from sidecar.evaluate.rubric import load_rubrics, parse_rubric, rubric_files


def register(sub: Any) -> None:
    parser = sub.add_parser("rubrics", help="work with rubric files")
    actions = parser.add_subparsers(dest="rubrics_command", metavar="ACTION", required=True)
    check = actions.add_parser("check", help="validate every *.yaml rubric in a directory")
    check.add_argument("directory", type=Path)
    check.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when a rubric's content changed without a version bump",
    )
    check.set_defaults(handler=handle_check)
    fingerprint = actions.add_parser(
        "fingerprint",
        help="record each rubric's version and content hash in its file",
        description=(
            "Write `fingerprint: {version, hash}` into each rubric file (a directory means its "
            "*.yaml files), so that a later edit without a version bump is caught by "
            "`sidecar rubrics check` and at start-up."
        ),
    )
    fingerprint.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    fingerprint.set_defaults(handler=handle_fingerprint)


def handle_check(args: argparse.Namespace) -> int:
    if not args.directory.is_dir():
        raise UsageError(f"{args.directory}: not a directory of rubric files")
    try:
        rubrics = load_rubrics(args.directory)
    except RubricError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    changed = 0
    for rubric in rubrics:
        criteria = len(rubric.judge.criteria) if rubric.judge else 0
        print(
            f"ok  {rubric.id} v{rubric.version}: {len(rubric.checks)} checks, "
            f"{criteria} criteria, judge {rubric.judge_model}, hash {rubric.content_hash}"
        )
        if rubric.judge is not None and not 4 <= criteria <= 6:
            print(
                f"    note: {criteria} criteria; 4 to 6 binary criteria usually grade best "
                "(fewer miss failure modes, more dilute the judge's attention)"
            )
        fingerprint = check_fingerprint(rubric)
        match fingerprint.status:
            case FingerprintStatus.CHANGED:
                changed += 1
                print(f"    warning: {fingerprint.message}")
                print(f"sidecar rubrics: warning: {fingerprint.message}", file=sys.stderr)
            case FingerprintStatus.STALE:
                print(f"    note: {fingerprint.message}")
            case FingerprintStatus.UNRECORDED | FingerprintStatus.MATCHES:
                pass  # without a fingerprint there is nothing to compare with
    return 1 if changed and args.strict else 0


def _files(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(rubric_files(path))
        elif path.is_file():
            files.append(path)
        else:
            raise UsageError(f"{path}: no such rubric file or directory")
    return files


def handle_fingerprint(args: argparse.Namespace) -> int:
    for path in _files(args.paths):
        text = read_text(path)
        rubric = parse_rubric(text, path)
        try:
            new_text = with_fingerprint(text, rubric.version, rubric.content_hash)
        except ValueError as exc:
            raise RubricError(f"{path}: cannot write the fingerprint: {exc}") from exc
        if new_text != text:
            write_file(path, new_text)
        print(f"{path}: {rubric.id} v{rubric.version} hash {rubric.content_hash}")
    return 0
