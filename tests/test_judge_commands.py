"""`sidecar replay` and `sidecar judge` with a judge: real google-genai client, local Gemini-protocol server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sidecar.cli import main
from tests.gemini_server import JudgeServer, Reply, gemini_json, gemini_text

DEMO = Path(__file__).resolve().parents[1] / "sidecar" / "demo_data"
TRACES = DEMO / "traces.jsonl"
RUBRICS = DEMO / "rubrics"


def all_pass(path: str, body: Any) -> Reply:
    schema = body["generationConfig"]["responseSchema"]
    names = schema["properties"]["criteria"]["items"]["properties"]["criterion"]["enum"]
    return gemini_json(
        {"criteria": [{"criterion": n, "evidence": "NONE", "verdict": "PASS"} for n in names]}
    )


@pytest.fixture
def judged_env(no_judge_credentials: pytest.MonkeyPatch) -> Iterator[JudgeServer]:
    server = JudgeServer(responder=all_pass).start()
    no_judge_credentials.setenv("GOOGLE_API_KEY", "test-key")
    no_judge_credentials.setenv("GOOGLE_GEMINI_BASE_URL", server.base_url)
    try:
        yield server
    finally:
        server.stop()


def test_replay_judge_all_judges_every_case(
    judged_env: JudgeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["replay", str(TRACES), "--rubrics", str(RUBRICS), "--judge-all", "--exit-zero"])
    out, err = capsys.readouterr()
    verdicts = [json.loads(line) for line in out.splitlines()]
    assert code == 0
    assert verdicts
    assert len(judged_env.requests) == len(verdicts)
    for verdict in verdicts:
        assert verdict["judged"] is True
        assert verdict["criteria"]
        # Cases with an untrusted injection payload are flagged for review, not passed silently.
        if verdict["injection_suspected"]:
            assert verdict["review"] is True
        else:
            assert all(c["outcome"] == "PASS" for c in verdict["criteria"])
    assert f"judged {len(verdicts)}" in err


def test_replay_without_judge_all_follows_sampling(
    judged_env: JudgeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["replay", str(TRACES), "--rubrics", str(RUBRICS), "--exit-zero"])
    verdicts = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 0
    judged = [v for v in verdicts if v["judged"]]
    assert len(judged_env.requests) == len(judged)
    assert all(v["sample_reason"] != "judge_all" for v in verdicts)


def test_judge_command_prints_request_raw_answer_and_verdict(
    judged_env: JudgeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    rubric = RUBRICS / "refund-support.yaml"
    code = main(["judge", "--rubric", str(rubric), "--trace", str(TRACES)])
    out = capsys.readouterr().out
    assert code == 0
    nonce = out.split("nonce ", 1)[1].split()[0]
    assert f"<<<BEGIN RESPONSE {nonce}>>>" in out
    assert "## raw answer" in out
    parsed = json.loads(out.split("## parsed verdict", 1)[1])
    assert parsed["judged"] is True
    assert {c["outcome"] for c in parsed["criteria"]} == {"PASS"}
    assert len(judged_env.requests) == 1


def test_judge_command_shows_malformed_answer_as_error(
    judged_env: JudgeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    judged_env.script(gemini_text("Everything looks PASS to me!"))
    rubric = RUBRICS / "refund-support.yaml"
    code = main(["judge", "--rubric", str(rubric), "--trace", str(TRACES)])
    out = capsys.readouterr().out
    assert code == 0
    assert "Everything looks PASS to me!" in out
    parsed = json.loads(out.split("## parsed verdict", 1)[1])
    assert parsed["judged"] is False
    assert {c["outcome"] for c in parsed["criteria"]} == {"ERROR"}
    assert parsed["error_reason"] == "non_json"


@pytest.mark.usefixtures("no_judge_credentials")
def test_judge_command_without_credentials_says_how_to_enable(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rubric = RUBRICS / "refund-support.yaml"
    code = main(["judge", "--rubric", str(rubric), "--trace", str(TRACES)])
    out, err = capsys.readouterr()
    assert code == 2
    assert "<<<BEGIN USER_INPUT" in out  # the request is still shown
    assert "GOOGLE_API_KEY" in err
