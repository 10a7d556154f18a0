"""The ``sidecar`` command line: help, ``rubrics check``, configuration errors, exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sidecar import __version__, errors
from sidecar.cli import COMMANDS, exit_code, main
from sidecar.commands.demo import demo_data
from sidecar.evaluate.rubric import load_rubrics

REPO = Path(__file__).resolve().parents[1]

VALID = """\
id: valid
version: "1"
checks:
  - {name: allowed, type: tool_allowlist, tools: [lookup_order]}
"""


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``sidecar ARGV``, usage errors from argparse included."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


# --- help and usage ---------------------------------------------------------------------


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0
    assert out.startswith("usage: sidecar")
    assert {"run", "replay", "demo", "rubrics"} <= set(COMMANDS)
    listed = {line.split()[0] for line in out.splitlines() if line.startswith("    ")}
    assert set(COMMANDS) <= listed


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "--version")
    assert (code, out.strip()) == (0, f"sidecar {__version__}")


PROBE = """
import sys
from sidecar.cli import main
main(sys.argv[1:])
print(sorted(m for m in sys.modules if m.startswith("sidecar.commands.") and "._" not in m))
"""


@pytest.mark.parametrize(
    ("argv", "loaded"),
    [
        pytest.param(["--version"], [], id="version"),
        pytest.param(["rubrics", "check", "rubrics"], ["sidecar.commands.rubrics"], id="rubrics"),
    ],
)
def test_a_command_loads_its_own_module_only(argv: list[str], loaded: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == repr(loaded)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["frobnicate"], "invalid choice: 'frobnicate'", id="unknown-command"),
        pytest.param([], "usage: sidecar", id="no-command"),
        pytest.param(["rubrics"], "ACTION", id="rubrics-without-action"),
        pytest.param(["rubrics", "lint", "rubrics"], "invalid choice: 'lint'", id="unknown-action"),
        pytest.param(["run", "--no-such-flag"], "unrecognized arguments", id="unknown-flag"),
        pytest.param(
            ["demo", "--metrics-port", "70000"],
            "argument --metrics-port: '70000' is not a port; give 0 to 65535",
            id="demo-port-out-of-range",
        ),
        pytest.param(
            ["backfill", "--from", "2h", "--metrics-port", "-1"],
            "argument --metrics-port: '-1' is not a port",
            id="backfill-port-negative",
        ),
        pytest.param(
            ["demo", "--out", "/dev/null"],
            "/dev/null: a file is in the way; give a folder for the output",
            id="demo-out-is-a-file",
        ),
        pytest.param(
            ["backfill", "--from", "99999999h"],
            "--from '99999999h' is too far back",
            id="backfill-from-too-far",
        ),
        pytest.param(
            [
                "calibrate",
                "--labels",
                "/dev/null",
                "--verdicts",
                "/dev/null",
                "--held-out-share",
                "0.3",
            ],
            "--held-out-share applies with --split only; add --split",
            id="held-out-share-without-split",
        ),
        pytest.param(
            ["compare", "--pairs", "/dev/null", "--model", " ", "--instructions", "x"],
            "--model is empty; name the judge model",
            id="compare-empty-model",
        ),
        pytest.param(
            ["drift", "--verdicts", "/dev/null", "--guard", "nan"],
            "--guard must be 0 or more seconds, got nan",
            id="drift-guard-nan",
        ),
    ],
)
def test_usage_errors_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert out == ""
    assert message in err


def _error_classes(base: type[errors.SidecarError]) -> list[type[errors.SidecarError]]:
    return [base, *(c for sub in base.__subclasses__() for c in _error_classes(sub))]


ERROR_CLASSES = _error_classes(errors.SidecarError)


# Every class of the errors tree with the exit code it must map to.
EXIT_CODES: list[tuple[errors.SidecarError, int]] = [
    (errors.UsageError("x"), 2),
    (errors.ConfigError("x"), 2),
    (errors.RubricError("x"), 2),
    (errors.InputFileError("x"), 2),
    (errors.RecordError("x"), 2),
    (errors.SourceError("x"), 1),
    (errors.DeliveryError("x"), 1),
    (errors.DeliveryError("x", {0: errors.Refusal(False, "too_large")}), 1),
    (errors.DecodeError("r", "x"), 1),
    (errors.JudgeError("r", "x"), 1),
    (errors.JudgeUnavailable("r", "x"), 1),
    (errors.SidecarError("x"), 1),
]


@pytest.mark.parametrize(
    ("error", "code"), [pytest.param(e, c, id=type(e).__name__) for e, c in EXIT_CODES]
)
def test_exit_code_table(error: errors.SidecarError, code: int) -> None:
    assert exit_code(error) == code


def test_every_error_class_is_drawn_in_the_tree_and_has_an_exit_code() -> None:
    tree = errors.__doc__ or ""
    for cls in ERROR_CLASSES:
        assert cls.__module__ == "sidecar.errors"
        assert f" {cls.__name__} " in tree, f"{cls.__name__} is missing from the errors docstring"
    assert {type(e) for e, _ in EXIT_CODES} == set(ERROR_CLASSES)


# --- rubrics check ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "directory",
    [
        pytest.param(REPO / "rubrics", id="repository-rubrics"),
        pytest.param(demo_data()[1], id="demo-rubrics"),
    ],
)
def test_rubrics_check_prints_each_rubric(
    directory: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(capsys, "rubrics", "check", directory)
    assert (code, err) == (0, "")
    rubrics = load_rubrics(directory)
    lines = out.splitlines()
    assert len(lines) == len(rubrics) >= 2
    for line, rubric in zip(lines, rubrics, strict=True):
        assert line.startswith(f"ok  {rubric.id} v{rubric.version}: {len(rubric.checks)} checks")


CRITERION = (
    "    - {name: c, definition: d, pass_example: p, fail_example: f}\n"  # a valid criterion
)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        pytest.param("id: x\nchecks: []\n", "version: Field required", id="no-version"),
        pytest.param(
            'id: x\nversion: "1"\nchekcs: []\n', "chekcs: Extra inputs", id="misspelled-field"
        ),
        pytest.param(
            'id: x\nversion: "1"\nchecks: [{name: a, type: tool_allowlist}]\n',
            "checks.0.tool_allowlist.tools: Field required",
            id="check-without-tools",
        ),
        pytest.param(
            'id: x\nversion: "1"\nchecks: [{name: a, type: max_latncy_ms, max_ms: 5}]\n',
            "checks.0: unknown check type 'max_latncy_ms'; did you mean 'max_latency_ms'?",
            id="check-type-typo",
        ),
        pytest.param(
            'id: x\nversion: "1"\nchecks: [{name: a, type: sentiment}]\n',
            "checks.0: unknown check type 'sentiment'; known types: tool_allowlist, ",
            id="unknown-check-type",
        ),
        pytest.param(
            'id: x\nversion: "1"\nchecks: [{name: a, type: answer_regex, must_match: "(["}]\n',
            "checks.0.answer_regex: Value error, bad regular expression",
            id="bad-regex",
        ),
        pytest.param(
            'id: x\nversion: "1"\n'
            "checks: [{name: a, type: tool_arguments, tool: t, schema: {type: 12}}]\n",
            "checks.0.tool_arguments.schema: Value error, not a valid JSON Schema",
            id="bad-json-schema",
        ),
        pytest.param(
            'id: x\nversion: "1"\nsampling: {judge_ratio: 1.5}\n',
            "sampling.judge_ratio: Input should be less than or equal to 1",
            id="ratio-above-one",
        ),
        pytest.param(
            'id: x\nversion: "1"\njudge:\n  model: m\n  instructions: i\n  criteria:\n'
            "    - {name: c, definition: d, pass_example: p}\n",
            "judge.criteria.0.fail_example: Field required",
            id="criterion-without-fail-example",
        ),
        pytest.param(
            'id: x\nversion: "1"\njudge:\n  model: m\n  instructions: i\n  criteria:\n'
            + CRITERION
            + CRITERION,
            "judge.criteria: Value error, duplicate criterion name 'c'",
            id="duplicate-criterion",
        ),
        pytest.param("id: x\nversion: [1\n", "not valid YAML", id="not-yaml"),
        pytest.param("- just\n- a list\n", "(top level): expected a mapping", id="not-a-mapping"),
    ],
)
def test_rubrics_check_names_file_and_field(
    text: str, where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "good.yaml").write_text(VALID, encoding="utf-8")
    broken = tmp_path / "broken.yaml"
    broken.write_text(text, encoding="utf-8")
    code, out, err = run_cli(capsys, "rubrics", "check", tmp_path)
    assert code == 1
    assert out.startswith("ok  valid v1: 1 checks")  # the valid file is still reported
    assert f"{broken}: {where}" in err
    assert "good.yaml" not in err
    # The broken file alone, named as a file, gives the same finding.
    code, out, again = run_cli(capsys, "rubrics", "check", broken)
    assert (code, out) == (1, "")
    assert f"{broken}: {where}" in again


def test_rubrics_check_takes_files_and_directories(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "mine.yaml").write_text(VALID.replace("id: valid", "id: mine"), encoding="utf-8")
    code, out, err = run_cli(capsys, "rubrics", "check", tmp_path / "mine.yaml", REPO / "rubrics")
    assert (code, err) == (0, "")
    assert [line.split()[1] for line in out.splitlines() if line.startswith("ok")] == [
        "mine",
        *(r.id for r in load_rubrics(REPO / "rubrics")),
    ]


@pytest.mark.parametrize(
    ("files", "code", "message"),
    [
        pytest.param(
            {"a.yaml": VALID, "b.yml": VALID},
            1,
            "rubric id 'valid' is used by 2 files: {d}/a.yaml, {d}/b.yml",
            id="dup-id",
        ),
        pytest.param({"notes.txt": VALID}, 1, "no rubric files (*.yaml) found", id="no-yaml"),
        pytest.param(None, 2, "{d}: no such rubric file or directory", id="missing-directory"),
    ],
)
def test_rubrics_check_directory_problems(
    files: dict[str, str] | None,
    code: int,
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    directory = tmp_path / "rubrics"
    if files is not None:
        directory.mkdir()
        for name, text in files.items():
            (directory / name).write_text(text, encoding="utf-8")
    got, out, err = run_cli(capsys, "rubrics", "check", directory)
    assert got == code
    assert all(line.startswith("ok  valid") for line in out.splitlines())
    assert message.format(d=directory) in err


# --- run: configuration errors stop start-up with exit 2 and one message --------------


@pytest.mark.parametrize(
    ("config", "env", "message"),
    [
        pytest.param(None, {}, "missing.yaml: cannot read configuration", id="missing-file"),
        pytest.param("- a\n- b\n", {}, "expected a mapping of settings", id="top-level-list"),
        pytest.param(
            "kafka: {encoding: xml}\n", {}, "kafka.encoding: Input should be", id="bad-value"
        ),
        pytest.param("kafak: {topic: x}\n", {}, "kafak: Extra inputs", id="misspelled-section"),
        pytest.param(
            "metrics: {port: 9464}\n",
            {"SIDECAR_METRICS__PORT": "not-a-port"},
            "metrics.port: Input should be a valid integer",
            id="environment-overrides-file",
        ),
        pytest.param(
            "rubrics_dir: no-such-rubrics\n", {}, "not a directory of rubric files", id="no-rubrics"
        ),
    ],
)
def test_run_with_bad_configuration_exits_2_with_one_message(
    config: str | None,
    env: dict[str, str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    path = tmp_path / ("missing.yaml" if config is None else "config.yaml")
    if config is not None:
        path.write_text(config, encoding="utf-8")
    code, out, err = run_cli(capsys, "run", "--config", path)
    assert code == 2
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith("sidecar: ")
    assert message in line


def test_run_with_invalid_yaml_says_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("kafka: [not, a, mapping\n", encoding="utf-8")
    code, out, err = run_cli(capsys, "run", "--config", path)
    assert (code, out) == (2, "")
    # One line, with where the problem is and where the unclosed part started.
    assert err.splitlines() == [
        f"sidecar: {path}: not valid YAML: line 2, column 1: expected ',' or ']', but got "
        "'<stream end>' (while parsing a flow sequence started at line 1, column 8)"
    ]
