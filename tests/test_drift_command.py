"""``sidecar drift`` end to end: generated verdict and canary records through the command line."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from sidecar.cli import main
from tests.drift_streams import Scenario, record_lines

FAST = ["--baseline", "600", "--canary-baseline", "400", "--alpha", "0.01"]


def _files(tmp_path: Path, s: Scenario, seed: int, shuffle: bool = False) -> tuple[Path, Path]:
    verdicts, canaries = record_lines(s, seed)
    if shuffle:  # the command orders by decided_at, not by file order
        random.Random(seed).shuffle(verdicts)
    v, c = tmp_path / "verdicts.jsonl", tmp_path / "canary.jsonl"
    v.write_text("\n".join(verdicts) + "\n", encoding="utf-8")
    c.write_text("\n".join(canaries) + "\n", encoding="utf-8")
    return v, c


def _drift(
    capsys: pytest.CaptureFixture[str], v: Path, c: Path, *extra: str
) -> tuple[int, dict[str, object], str]:
    code = main(["drift", "--verdicts", str(v), "--canary", str(c), *FAST, "--json", "-", *extra])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        pytest.param(Scenario("none"), set(), id="no-drift"),
        pytest.param(Scenario("agent", agent_drop=0.15), {"agent"}, id="agent-regression"),
        pytest.param(Scenario("judge", judge_strict=0.2), {"judge"}, id="silent-judge-bump"),
    ],
)
def test_the_command_attributes_each_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], scenario: Scenario, expected: set[str]
) -> None:
    v, c = _files(tmp_path, scenario, seed=2, shuffle=True)
    code, document, err = _drift(capsys, v, c)
    alarms = document["alarms"]
    assert isinstance(alarms, list)
    assert {a["attribution"] for a in alarms} == expected, err
    assert code == (1 if expected else 0)
    assert document["streams"] == 1
    for alarm in alarms:
        assert set(alarm) >= {"time", "rubric", "name", "kind", "direction", "attribution"}
        assert (alarm["rubric"], alarm["name"], alarm["kind"]) == (
            "support",
            "resolved",
            "criterion",
        )
        assert alarm["time"] > "2026-05-29T04:26:40"  # after the change, 8 h in
        assert alarm["evidence"]["e_value"] >= 200


def test_the_same_records_give_the_same_output_and_a_readable_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    v, c = _files(tmp_path, Scenario("agent", agent_drop=0.15), seed=4)
    first = _drift(capsys, v, c)
    assert first == _drift(capsys, v, c)
    code = main(["drift", "--verdicts", str(v), "--canary", str(c), *FAST])
    out = capsys.readouterr().out
    assert code == 1
    assert "drift: 1 streams (1 watched by canaries), 1 alarm(s)" in out
    assert "support criterion resolved (trace): pass rate down -> agent" in out


def test_without_canaries_an_agent_alarm_says_the_judge_was_not_watched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    v, _ = _files(tmp_path, Scenario("agent", agent_drop=0.15), seed=1)
    code = main(["drift", "--records", str(v), *FAST, "--json", "-"])
    (alarm,) = json.loads(capsys.readouterr().out)["alarms"]
    assert code == 1
    assert alarm["attribution"] == "agent"
    assert alarm["evidence"]["canaries"] is False


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--alpha", "0"], "--alpha must be between 0 and 1"),
        (["--guard", "-1"], "--guard must be 0 or more"),
        (["--baseline", "1"], "--baseline must be at least 2"),
    ],
)
def test_bad_settings_exit_2_saying_what_to_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    v = tmp_path / "v.jsonl"
    v.write_text("", encoding="utf-8")
    assert main(["drift", "--verdicts", str(v), *args]) == 2
    assert message in capsys.readouterr().err


def test_missing_and_empty_files_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["drift", "--verdicts", str(tmp_path / "nope.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    assert main(["drift", "--verdicts", str(empty)]) == 2
    assert "no verdict records" in capsys.readouterr().err


def test_untimed_records_are_left_out_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    v = tmp_path / "v.jsonl"
    line = {"trace_id": "a" * 32, "rubric_id": "r", "rubric_version": "1", "judge_model": "j"}
    v.write_text(json.dumps(line) + "\n", encoding="utf-8")
    assert main(["drift", "--verdicts", str(v), "--json", "-"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["untimed"] == 1
    assert "neither decided_at nor trace_end" in err


def test_the_settings_drift_block_gives_the_defaults_and_the_flags_override_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    v, c = _files(tmp_path, Scenario("agent", agent_drop=0.15), seed=2)
    config = tmp_path / "sidecar.yaml"
    # A baseline longer than the input: no detector ever starts testing.
    config.write_text("drift:\n  baseline: 100000\n  canary_baseline: 400\n", encoding="utf-8")
    base = ["drift", "--verdicts", str(v), "--canary", str(c), "--json", "-"]
    assert main([*base, "--config", str(config)]) == 0
    assert json.loads(capsys.readouterr().out)["alarms"] == []
    assert main([*base, "--config", str(config), "--baseline", "600"]) == 1
    alarms = json.loads(capsys.readouterr().out)["alarms"]
    assert {a["attribution"] for a in alarms} == {"agent"}


def test_streams_over_the_bound_are_left_out_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    v = tmp_path / "v.jsonl"
    lines = [
        {
            "trace_id": f"{n:032x}",
            "rubric_id": "r",
            "rubric_version": "1",
            "judge_model": "j",
            "agent": "a",
            "agent_version": f"v{n % 4}",  # four agent versions serving at once
            "decided_at": f"2026-05-01T12:00:{n:02d}.000000Z",
            "checks": [{"name": "k", "outcome": "PASS", "gate": True}],
        }
        for n in range(12)
    ]
    v.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    config = tmp_path / "sidecar.yaml"
    config.write_text("drift:\n  max_streams: 3\n", encoding="utf-8")
    assert main(["drift", "--verdicts", str(v), "--config", str(config), "--json", "-"]) == 0
    _, err = capsys.readouterr()
    assert "more than 3 streams in use; 3 results of the rest were left out" in err
