"""``sidecar rubrics check PATH...`` and ``sidecar rubrics fingerprint PATH...``.

``check`` validates rubric files (a directory means its ``*.yaml`` files).
An invalid rubric, or a rubric id used by two files (both named), is the
finding of this command, not an error: it is printed on stderr, each valid
rubric still gets its ``ok`` line, and the exit code is 1. A path that does
not exist is a usage error (exit code 2). Each rubric's content
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
from sidecar.evaluate.rubric import (
    Rubric,
    duplicate_ids,
    load_rubric,
    parse_rubric,
    rubric_files,
)


def register(sub: Any) -> None:
    parser = sub.add_parser("rubrics", help="work with rubric files")
    actions = parser.add_subparsers(dest="rubrics_command", metavar="ACTION", required=True)
    check = actions.add_parser(
        "check", help="validate rubric files (a directory means its *.yaml files)"
    )
    check.add_argument("paths", nargs="+", type=Path, metavar="PATH")
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
    files = _files(args.paths)
    if not files:
        print(f"{', '.join(map(str, args.paths))}: no rubric files (*.yaml) found", file=sys.stderr)
        return 1
    loaded: list[tuple[Path, Rubric]] = []
    invalid = 0
    for path in files:
        try:
            loaded.append((path, load_rubric(path)))
        except RubricError as exc:
            invalid += 1
            print(str(exc), file=sys.stderr)
    changed = 0
    for _, rubric in loaded:
        changed += _report(rubric)
    duplicates = duplicate_ids(loaded)
    for problem in duplicates:
        print(problem, file=sys.stderr)
    if invalid or duplicates:
        return 1
    return 1 if changed and args.strict else 0


def _report(rubric: Rubric) -> int:
    """Print the ``ok`` line of a valid rubric and its notes; 1 when it changed without a bump."""
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
            print(f"    warning: {fingerprint.message}")
            print(f"sidecar rubrics: warning: {fingerprint.message}", file=sys.stderr)
            return 1
        case FingerprintStatus.STALE:
            print(f"    note: {fingerprint.message}")
        case FingerprintStatus.UNRECORDED | FingerprintStatus.MATCHES:
            pass  # without a fingerprint there is nothing to compare with
    return 0


def _files(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(rubric_files(path))
        elif path.is_file():
            files.append(path)
        else:
            raise UsageError(f"{path}: no such rubric file or directory of rubric files")
    return files


def handle_fingerprint(args: argparse.Namespace) -> int:
    files = _files(args.paths)
    if not files:
        raise UsageError(f"{', '.join(map(str, args.paths))}: no rubric files (*.yaml) found")
    # Every file is read and checked before any is written: one bad rubric leaves all as they were.
    planned: list[tuple[Path, str, str, Rubric]] = []
    for path in files:
        text = read_text(path)
        rubric = parse_rubric(text, path)
        try:
            new_text = with_fingerprint(text, rubric.version, rubric.content_hash)
        except ValueError as exc:
            raise RubricError(f"{path}: cannot write the fingerprint: {exc}") from exc
        planned.append((path, text, new_text, rubric))
    for path, text, new_text, rubric in planned:
        if new_text != text:
            write_file(path, new_text)
        print(f"{path}: {rubric.id} v{rubric.version} hash {rubric.content_hash}")
    return 0
