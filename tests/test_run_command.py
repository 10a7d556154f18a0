"""`sidecar run` start-up failures are one clear message and a non-zero exit, never a traceback."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from sidecar.cli import main
from tests.realparts import kafka_bootstrap

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


def sidecar_run(config: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "sidecar", "run", "--config", str(config), *extra],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith(("SIDECAR_", "GOOGLE_"))},
    )


def test_a_metrics_port_in_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        config = tmp_path / "sidecar.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "rubrics_dir": str(REPO / "rubrics"),
                    "kafka": {"bootstrap_servers": f"127.0.0.1:{closed_port()}"},
                    "metrics": {"host": "127.0.0.1", "port": port},
                    "otel": {"enabled": False},
                }
            )
        )
        proc = sidecar_run(config)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"sidecar: cannot serve metrics on 127.0.0.1:{port} (")
    assert "metrics.port" in last
    assert "Traceback" not in err
    assert "Unclosed" not in err


@pytest.mark.kafka
def test_a_normal_start_and_stop_is_a_few_lines_of_sidecar(tmp_path: Path) -> None:
    config = tmp_path / "sidecar.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "rubrics_dir": str(REPO / "rubrics"),
                "kafka": {
                    "bootstrap_servers": kafka_bootstrap(),
                    "group_id": f"quiet-start-{uuid.uuid4().hex[:8]}",
                },
                "metrics": {"host": "127.0.0.1", "port": 0},
                "otel": {"enabled": False},
            }
        )
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "sidecar",
            "topics",
            "create",
            "--config",
            str(config),
            "--partitions",
            "3",
            "--replication-factor",
            "1",
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=60,
    )
    proc = sidecar_run(config, "--log-format", "json")
    assert proc.stderr is not None
    lines: list[dict[str, str]] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        assert line, f"sidecar run ended before it was ready: {lines}"
        lines.append(json.loads(line))
        if lines[-1]["message"].startswith("ready"):
            break
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=60)
    lines += [json.loads(line) for line in rest.splitlines()]
    assert proc.returncode == 0, lines
    messages = [entry["message"] for entry in lines]
    # Other libraries speak at WARNING and above only (a topic created on demand can
    # make aiokafka warn once about its metadata); everything at INFO is sidecar's own.
    others = [e for e in lines if e["logger"].split(".")[0] != "sidecar"]
    assert all(e["level"] in ("WARNING", "ERROR", "CRITICAL") for e in others), messages
    ours = [e["message"] for e in lines if e not in others]
    assert any(m.startswith("starting:") for m in ours)
    assert any(m.startswith("ready") for m in ours)
    assert messages[-1].startswith("stopped cleanly after")
    assert len(ours) <= 10, messages
