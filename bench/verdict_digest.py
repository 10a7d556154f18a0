"""The sha256 of a verdict file, optionally with some keys taken out of every record.

Each line is parsed, the keys named by ``--without`` are removed, and the rest
is written again exactly as sidecar writes a record (compact separators,
non-ASCII kept, key order kept), one line each with a newline. Without
``--without`` the digest is that of the lines as given, so it equals
``sha256sum`` of a file sidecar wrote. So two verdict files that differ only
in fields one release added (or in the decision time, which the live service
takes from its clock) can be compared:

    .venv/bin/python bench/verdict_digest.py FILE [--without v,trace_start,trace_end,decided_at]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Collection, Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sidecar.wire import record_json  # noqa: E402


def without(line: str, keys: Collection[str]) -> str:
    """``line`` (one JSON object) written again without ``keys``, as sidecar writes records."""
    if not keys:
        return line
    record = json.loads(line)
    return record_json({k: v for k, v in record.items() if k not in keys})


def digest(lines: Iterable[str], keys: Collection[str] = ()) -> str:
    """sha256 of the non-blank ``lines`` without ``keys``, each followed by a newline."""
    sha = hashlib.sha256()
    for line in lines:
        line = line.rstrip("\n")
        if line.strip():
            sha.update((without(line, keys) + "\n").encode("utf-8"))
    return sha.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument(
        "--without", default="", help="comma-separated keys to remove from every record"
    )
    args = parser.parse_args()
    keys = {k.strip() for k in args.without.split(",") if k.strip()}
    with args.file.open(encoding="utf-8") as fh:
        print(digest(fh, keys))


if __name__ == "__main__":
    main()
