"""Every start-up problem a user can cause is one line and exit 2 from the real command line.

Each case is ``python -m sidecar run`` (and ``check``) in a process of its
own, with a configuration that is wrong in one way: files that cannot be read,
TLS material that is missing or not PEM, topic settings that collide, a
secrets directory that is not one. Nothing is contacted: each problem is found
before any connection.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def base(tmp_path: Path) -> dict[str, object]:
    return {
        "rubrics_dir": str(REPO / "rubrics"),
        "kafka": {"bootstrap_servers": "127.0.0.1:1"},
        "metrics": {"host": "127.0.0.1", "port": 0},
        "otel": {"enabled": False},
    }


def with_kafka(**fields: object) -> Callable[[Path, dict[str, object]], None]:
    def change(tmp_path: Path, config: dict[str, object]) -> None:
        kafka = config["kafka"]
        assert isinstance(kafka, dict)
        kafka.update({k: str(v).format(tmp=tmp_path) for k, v in fields.items()})

    return change


def not_pem(tmp_path: Path, config: dict[str, object]) -> None:
    (tmp_path / "ca.pem").write_text("this is not a certificate\n")
    kafka = config["kafka"]
    assert isinstance(kafka, dict)
    kafka["security_protocol"] = "SSL"
    kafka["ssl"] = {"ca_file": str(tmp_path / "ca.pem")}


def missing_ca(tmp_path: Path, config: dict[str, object]) -> None:
    kafka = config["kafka"]
    assert isinstance(kafka, dict)
    kafka["security_protocol"] = "SSL"
    kafka["ssl"] = {"ca_file": str(tmp_path / "absent.pem")}


def rubrics_not_there(tmp_path: Path, config: dict[str, object]) -> None:
    config["rubrics_dir"] = str(tmp_path / "no-rubrics")


CASES: dict[str, tuple[Callable[[Path, dict[str, object]], None], str]] = {
    "dead letters on the input topic": (
        with_kafka(dead_letter_topic="otlp_spans"),
        "kafka.dead_letter_topic",
    ),
    "verdicts on the input topic": (with_kafka(verdict_topic="otlp_spans"), "kafka.verdict_topic"),
    "SASL without a mechanism": (with_kafka(security_protocol="SASL_SSL"), "sasl_mechanism"),
    "CA file missing": (missing_ca, "absent.pem"),
    "CA file not PEM": (not_pem, "ca.pem"),
    "password file missing": (
        with_kafka(
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_username="sidecar",
            sasl_password_file="{tmp}/nope",
        ),
        "sasl_password_file",
    ),
    "no rubric directory": (rubrics_not_there, "no-rubrics"),
}


def run(tmp_path: Path, command: str, config: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SIDECAR_", "GOOGLE_"))}
    return subprocess.run(
        [sys.executable, "-m", "sidecar", command, "--config", str(config)],
        cwd=tmp_path,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_line(done: subprocess.CompletedProcess[str], named: str) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("sidecar"), lines[0]
    assert named in lines[0], lines[0]


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("command", ["run", "check"])
def test_a_start_up_problem_is_one_line_and_exit_2(tmp_path: Path, case: str, command: str) -> None:
    change, named = CASES[case]
    config = base(tmp_path)
    change(tmp_path, config)
    path = tmp_path / "sidecar.yaml"
    path.write_text(yaml.safe_dump(config))
    one_line(run(tmp_path, command, path), named)


@pytest.mark.parametrize("command", ["run", "check"])
def test_a_configuration_that_is_a_directory_is_one_line(tmp_path: Path, command: str) -> None:
    one_line(run(tmp_path, command, tmp_path), str(tmp_path))


@pytest.mark.parametrize("command", ["run", "check"])
def test_a_secrets_directory_that_is_a_file_is_one_line(tmp_path: Path, command: str) -> None:
    path = tmp_path / "sidecar.yaml"
    path.write_text(yaml.safe_dump(base(tmp_path)))
    done = run(tmp_path, command, path, SIDECAR_SECRETS_DIR=str(path))
    one_line(done, "SIDECAR_SECRETS_DIR")
