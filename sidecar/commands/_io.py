"""File and console helpers of the offline commands (``calibrate``, ``gate``, ``compare``).

Private to :mod:`sidecar.commands`: commands import these rather than each
other. Every failure is an :class:`~sidecar.errors.InputFileError` naming the
path, which the command line reports with exit code 2.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
from pathlib import Path
from typing import TextIO

import rich.progress
from rich.console import Console

from sidecar.errors import InputFileError

# Files larger than this get a progress bar while they are read (on a terminal).
PROGRESS_BYTES = 4 * 1024 * 1024
# Not a terminal (CI logs, pipes): wide enough that tables stay on one line per row.
LOG_WIDTH = 160


def invocation(argv0: str | None = None, on_path: str | None = None) -> str:
    """How to run sidecar again, as a hint can print it: a command that works where it was run.

    ``sidecar`` when that name on the PATH is the program running now; else the
    running program's full path (``.venv/bin/sidecar`` not on the PATH); else,
    under ``python -m sidecar``, this interpreter with ``-m sidecar``.
    """
    program = Path(sys.argv[0] if argv0 is None else argv0)
    found = shutil.which("sidecar") if on_path is None else on_path
    if program.name == "sidecar" and program.is_file():
        if found and Path(found).resolve() == program.resolve():
            return "sidecar"
        return shlex.quote(str(program.resolve()))
    return f"{shlex.quote(sys.executable)} -m sidecar"


def consoles() -> tuple[Console, Console]:
    """stdout and stderr consoles; wide when not a terminal so tables stay readable in logs."""
    out, err = Console(), Console(stderr=True)
    for console in (out, err):
        if not console.is_terminal:
            console.width = LOG_WIDTH
    return out, err


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


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0 to 65535 (0: the system picks a free one)."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a port; give 0 to 65535 (0 picks a free port)"
        )
    return port


def make_folder(path: Path) -> None:
    """Create the folder ``path`` (and its parents); InputFileError when it cannot be one."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError as exc:
        raise InputFileError(f"{path}: a file is in the way; give a folder for the output") from exc
    except OSError as exc:
        raise InputFileError(
            f"{path}: cannot create the folder: {exc.strerror or exc}"
            + ("; a part of the path is a file" if isinstance(exc, NotADirectoryError) else "")
        ) from exc


def read_text(path: Path) -> str:
    """A whole UTF-8 text file."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputFileError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{path}: not UTF-8 text") from exc


def write_file(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path``, creating its folder."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data, encoding="utf-8")
    except (FileExistsError, NotADirectoryError) as exc:
        raise InputFileError(
            f"{path}: cannot write: a part of its folder path is a file; give a path in a folder"
        ) from exc
    except IsADirectoryError as exc:
        raise InputFileError(f"{path}: cannot write: it is a folder; give a file name") from exc
    except OSError as exc:
        raise InputFileError(f"{path}: cannot write: {exc.strerror or exc}") from exc


def write_output(target: str, text: str, stdout: TextIO) -> None:
    """Write ``text`` to the file ``target``, or to ``stdout`` when ``target`` is ``-``."""
    if target == "-":
        stdout.write(text)
    else:
        write_file(Path(target), text)
