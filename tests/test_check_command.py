"""``sidecar check``: what run would do, from settings and rubrics alone, through the real CLI."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def check(
    tmp_path: Path, *argv: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    return subprocess.run(
        [sys.executable, "-m", "sidecar", "check", *argv],
        cwd=tmp_path,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def rubrics(tmp_path: Path) -> Path:
    folder = tmp_path / "rubrics"
    shutil.copytree(ROOT / "rubrics", folder)
    return folder


def test_valid_settings_say_what_run_would_do(tmp_path: Path, rubrics: Path) -> None:
    config = tmp_path / "sidecar.yaml"
    # Nothing is contacted: an address where no broker listens is fine.
    config.write_text("kafka:\n  bootstrap_servers: 127.0.0.1:1\n  topic: spans_in\n")
    done = check(tmp_path, "--config", str(config), "--rubrics", str(rubrics))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "rubrics: 2 from" in out
    assert "refund-support v3 (trace): 9 checks, 4 criteria" in out
    assert "judge: off, no judge credentials" in out
    assert "would be SKIPPED" in out
    assert "SidecarJudgeDisabled" in out
    assert "kafka: 127.0.0.1:1 over PLAINTEXT, group sidecar" in out
    assert "spans_in" in out
    assert "kafka.topic" in out
    assert "eval_labels" in out
    assert "review.labels_topic" in out
    assert out.rstrip().endswith("run would start with these settings")
    assert done.stderr == ""


def test_the_judge_is_on_with_credentials(tmp_path: Path, rubrics: Path) -> None:
    done = check(tmp_path, "--rubrics", str(rubrics), env={"GOOGLE_API_KEY": "k"})
    assert done.returncode == 0, done.stderr
    assert "judge: on (gemini backend)" in done.stdout
    assert "k" not in done.stdout.split("judge: on")[1].split("\n")[0].replace("backend", "")


@pytest.mark.parametrize(
    ("setup", "named"),
    [
        ("kafka:\n  dead_letter_topic: otlp_spans\n", "kafka.topic and kafka.dead_letter_topic"),
        ("assembler:\n  decision_wait_s: -1\n", "assembler.decision_wait_s"),
        ("kafka: [1, 2\n", "not valid YAML"),
        ("no_such_section: 1\n", "no_such_section"),
    ],
)
def test_a_bad_setting_is_one_line_and_exit_2(
    tmp_path: Path, rubrics: Path, setup: str, named: str
) -> None:
    config = tmp_path / "sidecar.yaml"
    config.write_text(setup)
    done = check(tmp_path, "--config", str(config), "--rubrics", str(rubrics))
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert named in done.stderr
    assert "Traceback" not in done.stderr


def test_a_bad_rubric_or_canary_path_is_exit_2(tmp_path: Path, rubrics: Path) -> None:
    (rubrics / "broken.yaml").write_text(
        "id: broken\nversion: '1'\nchecks: [{type: max_latncy_ms}]\n"
    )
    done = check(tmp_path, "--rubrics", str(rubrics))
    assert done.returncode == 2
    assert "broken" in done.stderr
    assert "Traceback" not in done.stderr
    (rubrics / "broken.yaml").unlink()
    text = (rubrics / "refund-support.yaml").read_text()
    (rubrics / "refund-support.yaml").write_text(
        text + "canary: {traces: /etc/passwd, labels: labels.jsonl}\n"
    )
    done = check(tmp_path, "--rubrics", str(rubrics))
    assert done.returncode == 2
    assert "canary.traces[0]" in done.stderr
    assert "outside" in done.stderr


def test_without_a_rubric_directory_it_says_how_to_give_one(tmp_path: Path) -> None:
    done = check(tmp_path)
    assert done.returncode == 2
    assert "pass --rubrics DIR" in done.stderr
