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
