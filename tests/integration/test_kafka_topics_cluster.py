"""``sidecar topics`` and the start-up topic check on the SASL_SSL cluster (no auto-create).

Every topic name carries a fresh prefix, so runs and other tests never share topics.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaConsumer
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from sidecar.cli import main
from sidecar.logs import configure
from tests.integration.cluster import admin_client, cluster, create_topics
from tests.integration.harness import SHOP_RUBRIC

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.kafka]


def config_for(tmp_path: Path, prefix: str, user: str = "admin") -> Path:
    kc = cluster()
    secret = tmp_path / "password"
    secret.write_text(kc.password(user))
    settings: dict[str, Any] = {
        "rubrics_dir": str(REPO / "rubrics"),
        "kafka": {
            "bootstrap_servers": kc.bootstrap,
            "security_protocol": "SASL_SSL",
            "ssl": {"ca_file": kc.ca_file},
            "sasl_mechanism": kc.info["mechanism"],
            "sasl_username": kc.info["users"][user]["username"],
            "sasl_password_file": str(secret),
            "group_id": prefix,
            "topic": f"{prefix}.spans",
            "logs_topic": f"{prefix}.logs",
            "dead_letter_topic": f"{prefix}.dlq",
            "verdict_topic": f"{prefix}.verdicts",
            "backfill_verdict_topic": f"{prefix}.backfill",
        },
        "review": {"topic": f"{prefix}.review", "labels_topic": f"{prefix}.labels"},
        "conversations": {"topic": f"{prefix}.turns", "state_topic": f"{prefix}.state"},
        "metrics": {"host": "127.0.0.1", "port": 0},
        "otel": {"enabled": False},
    }
    path = tmp_path / "sidecar.yaml"
    path.write_text(yaml.safe_dump(settings))
    return path


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("SIDECAR_", "GOOGLE_"))}


def test_create_then_check_then_a_missing_topic_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = f"tp-{uuid.uuid4().hex[:8]}"
    config = config_for(tmp_path, prefix)
    assert main(["topics", "check", "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert f"{prefix}.spans (kafka.topic)" in err
    assert f"{prefix}.state (conversations.state_topic)" in err
    assert main(["topics", "create", "--config", str(config), "--partitions", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("created ") == 9, out
    assert (
        f"created {prefix}.state (conversations.state_topic): 2 partitions, replication 3, cleanup.policy=compact"
        in out
    )
    assert main(["topics", "create", "--config", str(config)]) == 0  # idempotent
    assert capsys.readouterr().out.count("exists ") == 9
    assert main(["topics", "check", "--config", str(config)]) == 0
    assert capsys.readouterr().out.startswith("ok: 9 topics exist")

    async def delete_and_describe() -> str:
        async with admin_client() as admin:
            await admin.delete_topics([f"{prefix}.labels"])
            described = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, f"{prefix}.state")]
            )
        entries = described[0].resources[0][4]
        return next(str(e[1]) for e in entries if e[0] == "cleanup.policy")

    assert asyncio.run(delete_and_describe()) == "compact"
    deadline = time.monotonic() + 30
    while main(["topics", "check", "--config", str(config)]) != 1:
        assert time.monotonic() < deadline, "the deleted topic still shows"
        capsys.readouterr()
        time.sleep(0.5)
    err = capsys.readouterr().err
    assert f"missing topics: {prefix}.labels (review.labels_topic)" in err
    assert f"sidecar topics create --config {config}" in err

    # The service: one line naming the missing topic and the command, exit 2, in seconds.
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "sidecar", "run", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env(),
        cwd=REPO,
    )
    took = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        f"sidecar: 1 Kafka topic missing: {prefix}.labels (review.labels_topic); create them "
        f"with `sidecar topics create --config {config}` (or turn off what uses them)"
    )
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) <= 3, done.stderr
    assert took < 15, took


def test_unequal_co_partitioned_topics_fail_the_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = f"tp-{uuid.uuid4().hex[:8]}"
    config = config_for(tmp_path, prefix)
    asyncio.run(create_topics([f"{prefix}.spans"], partitions=2))
    asyncio.run(create_topics([f"{prefix}.turns"], partitions=1))
    assert main(["topics", "create", "--config", str(config), "--partitions", "3"]) == 0
    out = capsys.readouterr().out
    # A missing partner gets the count of the topic it is co-partitioned with.
    assert f"created {prefix}.logs (kafka.logs_topic): 2 partitions" in out
    assert f"created {prefix}.state (conversations.state_topic): 1 partitions" in out
    assert main(["topics", "check", "--config", str(config)]) == 0
    capsys.readouterr()


def test_sigterm_during_start_up_stops_at_once(tmp_path: Path) -> None:
    """A broker address that accepts connections but never answers: start-up waits on it."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        config = tmp_path / "sidecar.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "rubrics_dir": str(REPO / "rubrics"),
                    "kafka": {"bootstrap_servers": f"127.0.0.1:{silent.getsockname()[1]}"},
                    "metrics": {"host": "127.0.0.1", "port": 0},
                    "otel": {"enabled": False},
                }
            )
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "sidecar", "run", "--config", str(config)],
            stderr=subprocess.PIPE,
            text=True,
            env=env(),
            cwd=REPO,
        )
        time.sleep(4)
        assert proc.poll() is None, proc.communicate()[1]
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert time.monotonic() - sent < 5
    assert proc.returncode == 0, err
    assert "stopped during start-up" in err
    assert "Traceback" not in err


async def test_a_flood_of_aiokafka_errors_is_one_line_per_window() -> None:
    """A consumer of a topic that does not exist (auto-create off): aiokafka logs it each
    metadata refresh, many times a second; sidecar's log writes it once, then a count."""
    topic = f"tp-{uuid.uuid4().hex[:8]}.absent"
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    out = io.StringIO()
    configure("info", stream=out, repeat_window_s=2.0, force=True)
    consumer = AIOKafkaConsumer(metadata_max_age_ms=100, **cluster().client_kwargs("admin"))
    raw: list[logging.LogRecord] = []
    counter = logging.Handler()
    counter.emit = raw.append  # type: ignore[method-assign,assignment]
    logging.getLogger("aiokafka").addHandler(counter)
    try:
        await consumer.start()
        consumer.subscribe([topic])
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            await consumer.getmany(timeout_ms=200)
    finally:
        await consumer.stop()
        logging.getLogger("aiokafka").removeHandler(counter)
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved_handlers:
            root.addHandler(handler)
        root.setLevel(saved_level)
    flood = [r for r in raw if r.levelno >= logging.WARNING and topic in r.getMessage()]
    written = [line for line in out.getvalue().splitlines() if topic in line]
    assert len(flood) >= 10, f"aiokafka logged only {len(flood)} lines: nothing to hold back"
    assert 1 <= len(written) <= 4, written  # 5 s at one line per 2 s window
    assert any("more like this in the last 2s" in line for line in written[1:]), written


def test_run_needs_only_the_topics_it_uses(tmp_path: Path) -> None:
    """Without a ``scope: conversation`` rubric the conversation topics are not needed, and
    the backfill's verdict topic never is; with such a rubric, the two are named missing."""
    prefix = f"tp-{uuid.uuid4().hex[:8]}"
    config = config_for(tmp_path, prefix)
    settings = yaml.safe_load(config.read_text())
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings["metrics"]["port"] = port
    rubrics = tmp_path / "rubrics"
    rubrics.mkdir()
    (rubrics / "shop.yaml").write_text(SHOP_RUBRIC)
    settings["rubrics_dir"] = str(rubrics)
    config.write_text(yaml.safe_dump(settings))
    run_topics = ["spans", "logs", "dlq", "verdicts", "review", "labels"]
    asyncio.run(create_topics([f"{prefix}.{t}" for t in run_topics], partitions=1))
    proc = subprocess.Popen(
        [sys.executable, "-m", "sidecar", "run", "--config", str(config)],
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
        cwd=REPO,
    )
    try:
        deadline = time.monotonic() + 60
        while http_status(port, "/readyz") != 200:
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "not ready within 60 s"
            time.sleep(0.3)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "missing" not in err

    (rubrics / "refund.yaml").write_text(
        "id: refund-conversation\nversion: '1'\nscope: conversation\n"
        "conversation: {idle_timeout_s: 60}\nchecks: []\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "sidecar", "run", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env(),
        cwd=REPO,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"sidecar: 2 Kafka topics missing: {prefix}.turns (conversations.topic), "
        f"{prefix}.state (conversations.state_topic); create them with "
        f"`sidecar topics create --config {config}` (or turn off what uses them)"
    )


def http_status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0
