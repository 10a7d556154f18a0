"""The commands' private file and console helpers (sidecar.commands._io)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

import sidecar.commands
from sidecar.commands._io import read_lines, read_text, write_file, write_output
from sidecar.errors import InputFileError
from tests.imports import imports_of


@pytest.mark.parametrize(
    ("terminal", "progress_bytes", "shown"),
    [
        pytest.param(True, 0, True, id="large-file-on-terminal"),
        pytest.param(True, 10**9, False, id="small-file"),
        pytest.param(False, 0, False, id="not-a-terminal"),
    ],
)
def test_read_lines_progress_bar(
    tmp_path: Path, terminal: bool, progress_bytes: int, shown: bool
) -> None:
    path = tmp_path / "labels.jsonl"
    path.write_text("a\nb\n", encoding="utf-8")
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=terminal, width=80)
    assert read_lines(path, console, progress_bytes) == ["a\n", "b\n"]
    assert ("reading labels.jsonl" in screen.getvalue()) is shown


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(None, "labels.jsonl: no such file", id="missing"),
        pytest.param(b"\xff\xfe", "labels.jsonl: not UTF-8 text (byte 0)", id="not-utf8"),
    ],
)
def test_read_lines_names_the_file(tmp_path: Path, content: bytes | None, message: str) -> None:
    path = tmp_path / "labels.jsonl"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(InputFileError, match=re.escape(message)):
        read_lines(path, Console(file=io.StringIO()))


def test_read_text_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match=re.escape("r.yaml: cannot read")):
        read_text(tmp_path / "r.yaml")
    (tmp_path / "bad.yaml").write_bytes(b"\xff")
    with pytest.raises(InputFileError, match=re.escape("bad.yaml: not UTF-8 text")):
        read_text(tmp_path / "bad.yaml")


def test_write_file_creates_the_folder_and_names_what_failed(tmp_path: Path) -> None:
    write_file(tmp_path / "a" / "b.png", b"\x89PNG")
    assert (tmp_path / "a" / "b.png").read_bytes() == b"\x89PNG"
    with pytest.raises(InputFileError, match=re.escape(f"{tmp_path}: cannot write")):
        write_file(tmp_path, "text")


def test_write_output_dash_is_stdout(tmp_path: Path) -> None:
    stdout = io.StringIO()
    write_output("-", "doc\n", stdout)
    write_output(str(tmp_path / "out" / "doc.json"), "file\n", stdout)
    assert stdout.getvalue() == "doc\n"
    assert (tmp_path / "out" / "doc.json").read_text(encoding="utf-8") == "file\n"


COMMAND_MODULES = sorted(Path(sidecar.commands.__file__).parent.glob("*.py"))


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem) for p in COMMAND_MODULES])
def test_commands_share_helpers_through_io_not_each_other(path: Path) -> None:
    siblings = sorted(
        name
        for name in imports_of(path)
        if name.startswith("sidecar.commands.") and not name.startswith("sidecar.commands._")
    )
    assert siblings == [], (
        f"{path.stem} imports {siblings}; share it through a private helper module (commands/_io.py, commands/_wiring.py)"
    )


def test_writing_through_a_file_says_a_part_of_the_path_is_a_file(tmp_path: Path) -> None:
    blocker = tmp_path / "report.json"
    blocker.write_text("{}")
    with pytest.raises(InputFileError) as caught:
        write_file(blocker / "x" / "report.md", "text")
    assert str(caught.value) == (
        f"{blocker / 'x' / 'report.md'}: cannot write: a part of its folder path is a file; "
        "give a path in a folder"
    )
    with pytest.raises(InputFileError) as caught:
        write_file(tmp_path, "text")
    assert str(caught.value) == f"{tmp_path}: cannot write: it is a folder; give a file name"
