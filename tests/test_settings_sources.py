"""Where settings come from, and which wins: code, environment, secrets directory, file."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.errors import ConfigError
from sidecar.settings import KafkaSettings, Settings, load_settings

pytestmark = pytest.mark.usefixtures("no_sidecar_variables")


def config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sidecar.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def secrets(tmp_path: Path, **files: str) -> Path:
    directory = tmp_path / "secrets"
    directory.mkdir()
    for name, value in files.items():
        (directory / name).write_text(value, encoding="utf-8")
    return directory


def test_arguments_in_code_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIDECAR_KAFKA__TOPIC", "from_env")
    monkeypatch.setenv("SIDECAR_WORKERS", "3")
    settings = Settings(kafka=KafkaSettings(topic="from_code"))
    assert settings.kafka.topic == "from_code"
    assert settings.workers == 3


def test_secrets_directory_sits_between_environment_and_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = config(
        tmp_path,
        "kafka:\n  topic: from_file\n  group_id: file_group\n  client_id: file_client\n"
        "shutdown_timeout_s: 9\n",
    )
    directory = secrets(
        tmp_path,
        SIDECAR_KAFKA__GROUP_ID="secret_group\n",
        sidecar_kafka__client_id="secret_client",
        SIDECAR_SHUTDOWN_TIMEOUT_S="4",
        unrelated="ignored",
    )
    monkeypatch.setenv("SIDECAR_SECRETS_DIR", str(directory))
    monkeypatch.setenv("SIDECAR_KAFKA__CLIENT_ID", "env_client")
    settings = load_settings(path)
    assert settings.kafka.topic == "from_file"  # only the file sets it
    assert settings.kafka.group_id == "secret_group"  # the secret wins over the file
    assert settings.kafka.client_id == "env_client"  # the environment wins over the secret
    assert settings.shutdown_timeout_s == 4.0
    # Fields the file does not name keep their defaults inside a merged section.
    assert settings.kafka.verdict_topic == "eval_verdicts"


def test_a_bad_secret_is_named_like_any_other_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIDECAR_SECRETS_DIR", str(secrets(tmp_path, sidecar_workers="many")))
    with pytest.raises(ConfigError, match="workers"):
        load_settings(None)


def test_a_secrets_directory_that_is_not_one_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIDECAR_SECRETS_DIR", str(tmp_path / "absent"))
    with pytest.raises(ConfigError, match=r"SIDECAR_SECRETS_DIR=.*not a directory"):
        load_settings(None)


def test_the_file_is_read_for_one_load_only(tmp_path: Path) -> None:
    load_settings(config(tmp_path, "kafka:\n  topic: only_here\n"))
    assert Settings().kafka.topic == "otlp_spans"
    assert load_settings(None).kafka.topic == "otlp_spans"
