"""Settings that collide: every topic the service reads or writes has one role."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.errors import ConfigError
from sidecar.settings import Settings, load_settings, topics_in_use

FIELDS = [field for field, _ in topics_in_use(Settings())]


def _nested(field: str, value: str) -> dict[str, object]:
    section, name = field.split(".")
    return {section: {name: value}}


def _write(tmp_path: Path, data: dict[str, object]) -> Path:
    path = tmp_path / "settings.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_every_topic_field_is_checked() -> None:
    assert len(FIELDS) == 9


@pytest.mark.parametrize(("first", "second"), list(itertools.combinations(FIELDS, 2)))
def test_two_fields_on_one_topic_are_refused_naming_both(
    tmp_path: Path, first: str, second: str
) -> None:
    data = _nested(first, "same")
    for section, values in _nested(second, "same").items():
        data.setdefault(section, {}).update(values)  # type: ignore[attr-defined]
    with pytest.raises(ConfigError) as caught:
        load_settings(_write(tmp_path, data))
    message = str(caught.value)
    assert first in message
    assert second in message
    assert "'same'" in message
    assert "\n" not in message


def test_a_disabled_stage_may_reuse_a_name(tmp_path: Path) -> None:
    data = {"review": {"enabled": False, "topic": "otlp_spans"}}
    assert load_settings(_write(tmp_path, data)).review.topic == "otlp_spans"


@pytest.mark.parametrize("command", [["run"], ["backfill", "--from", "2026-01-01T00:00:00Z"]])
def test_the_commands_exit_2_with_one_line(tmp_path: Path, command: list[str]) -> None:
    path = _write(tmp_path, {"kafka": {"dead_letter_topic": "otlp_spans"}})
    done = subprocess.run(
        [sys.executable, "-m", "sidecar", *command, "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert "kafka.topic and kafka.dead_letter_topic" in done.stderr
    assert "Traceback" not in done.stderr


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(st.sampled_from(FIELDS), st.sampled_from(["a", "b", "c", " a "]), min_size=2)
)
def test_fuzz_any_collision_is_refused_and_no_other(assigned: dict[str, str]) -> None:
    data: dict[str, dict[str, str]] = {}
    for field, topic in assigned.items():
        section, name = field.split(".")
        data.setdefault(section, {})[name] = topic
    final = dict(topics_in_use(Settings()))
    final.update({field: topic.strip() for field, topic in assigned.items()})
    collides = len(set(final.values())) < len(final)
    try:
        Settings(**data)  # type: ignore[arg-type]
    except ValueError:
        assert collides
    else:
        assert not collides


@pytest.mark.parametrize(
    ("servers", "expected"),
    [
        ("host:abc", "'host:abc': the port must be a number from 1 to 65535"),
        ("127.0.0.1:99999", "'127.0.0.1:99999': the port must be a number from 1 to 65535"),
        ("a:9092,b:0", "'b:0': the port must be a number from 1 to 65535"),
        ("a:9092,,b:9092", "'' is not host:port"),
        (":9092", "':9092' is not host:port"),
        ("a b:9092", "'a b:9092' is not host:port"),
        ("", "no broker given"),
    ],
)
def test_broker_addresses_are_checked_when_loaded(
    tmp_path: Path, servers: str, expected: str
) -> None:
    # Before, aiokafka raised ValueError or OverflowError from inside the first connect.
    with pytest.raises(ConfigError) as caught:
        load_settings(_write(tmp_path, {"kafka": {"bootstrap_servers": servers}}))
    assert f"kafka.bootstrap_servers: {expected}" in str(caught.value)


@pytest.mark.parametrize("servers", ["b1:9092", "b1:9092, b2:9093", "broker", "[::1]:9092"])
def test_broker_addresses_users_write_load(tmp_path: Path, servers: str) -> None:
    settings = load_settings(_write(tmp_path, {"kafka": {"bootstrap_servers": servers}}))
    assert settings.kafka.bootstrap_servers == servers


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"kafka": {"topic": ""}}, "kafka.topic is empty; name the topic the spans arrive on"),
        ({"kafka": {"topic": "bad topic!"}}, "kafka.topic 'bad topic!' is not a Kafka topic name"),
        ({"review": {"topic": "x" * 250}}, "review.topic 'xxx"),
        ({"kafka": {"verdict_topic": ".."}}, "kafka.verdict_topic '..' is not a Kafka topic name"),
    ],
)
def test_topic_names_kafka_refuses_are_refused(
    tmp_path: Path, data: dict[str, object], expected: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(_write(tmp_path, data))
    assert expected in str(caught.value)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"assembler": {"decision_wait_s": float("inf")}},
            "assembler.decision_wait_s: Input should be a finite number",
        ),
        (
            {"assembler": {"decision_wait_s": 1e12}},
            "assembler.decision_wait_s: Input should be less than or equal to 86400",
        ),
        (
            {"assembler": {"max_trace_age_s": 1e9}},
            "assembler.max_trace_age_s: Input should be less than or equal to 604800",
        ),
        (
            {"judge": {"timeout_s": float("inf")}},
            "judge.timeout_s: Input should be a finite number",
        ),
        ({"drift": {"guard_s": float("nan")}}, "drift.guard_s: Input should be a finite number"),
        (
            {"shutdown_timeout_s": float("inf")},
            "shutdown_timeout_s: Input should be a finite number",
        ),
    ],
)
def test_times_are_finite_and_bounded(
    tmp_path: Path, data: dict[str, object], expected: str
) -> None:
    # An infinite decision wait passed `check`, then broke every verdict of a replay.
    with pytest.raises(ConfigError) as caught:
        load_settings(_write(tmp_path, data))
    assert expected in str(caught.value)


def test_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    # YAML would keep the second block and drop the first without a word.
    path = tmp_path / "settings.yaml"
    path.write_text("kafka:\n  topic: spans\nlog:\n  level: info\nkafka:\n  group_id: g\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert str(caught.value) == (
        f"{path}: not valid YAML: line 5, column 1: key 'kafka' given twice (first on line 1); "
        "keep one"
    )


def test_a_file_that_is_not_utf8_says_so(tmp_path: Path) -> None:
    path = tmp_path / "settings.yaml"
    path.write_bytes("kafka:\n  topic: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert str(caught.value) == f"{path}: not UTF-8 text (byte 19); save the configuration as UTF-8"


@pytest.mark.parametrize(
    ("variable", "value"),
    [("SIDECAR_REDACTION__PATTERNS", "email"), ("SIDECAR_KAFKA", "notjson")],
)
def test_a_variable_that_is_not_json_says_how_to_write_it(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    message = str(caught.value)
    assert message.startswith("invalid configuration: error parsing value for field")
    assert "must hold JSON, e.g. SIDECAR_REDACTION__PATTERNS='[\"email\"]'" in message
