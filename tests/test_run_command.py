"""`sidecar run` start-up failures are one clear message and a non-zero exit, never a traceback."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml

from sidecar.cli import main

REPO = Path(__file__).resolve().parents[1]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_kafka_is_one_clear_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = closed_port()
    config = tmp_path / "sidecar.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "rubrics_dir": str(REPO / "rubrics"),
                "kafka": {"bootstrap_servers": f"127.0.0.1:{port}"},
                "metrics": {"host": "127.0.0.1", "port": 0},
                "otel": {"enabled": False},
            }
        )
    )
    code = main(["run", "--config", str(config), "--log-level", "CRITICAL"])
    err = capsys.readouterr().err
    assert code == 1
    assert f"cannot reach Kafka at 127.0.0.1:{port}" in err
    assert "SIDECAR_KAFKA__BOOTSTRAP_SERVERS" in err
    assert "Traceback" not in err


def test_bad_rubrics_stop_start_up_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rubrics = tmp_path / "rubrics"
    rubrics.mkdir()
    (rubrics / "r.yaml").write_text("id: r\nversion: 1\nchecks: [{name: x, type: nope}]\n")
    config = tmp_path / "sidecar.yaml"
    config.write_text(yaml.safe_dump({"rubrics_dir": str(rubrics)}))
    code = main(["run", "--config", str(config)])
    err = capsys.readouterr().err
    assert code == 2
    assert "r.yaml" in err
    assert "checks.0" in err
