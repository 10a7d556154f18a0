"""The OpenAI client under its two instrumentations, recorded live and evaluated.

The agent loop (``tests/agents/openai_agent.py``) runs the real ``openai``
client against a local chat-completions server, traced by the real
``opentelemetry-instrumentation-openai-v2`` or
``openinference-instrumentation-openai`` in their own environment
(``tests/agents/openai_env``; pins noted in its pyproject: openai-v2 2.4b0
imports httpx 0.x beside openai's httpx2, and needs opentelemetry-util-genai
< 1.2). Its OTLP files go through ``sidecar replay`` with the bundled
``refund-support`` rubric, four scenarios: acceptable, over-limit argument,
ungrounded amount, forbidden tool.

- content on spans (openai-v2 ``span_only``, OpenInference default): every
  mode gives the verdicts the scenarios are built for;
- content off (openai-v2 default, openai-v2 ``true`` without the
  experimental opt-in, which 2.4b0 with util-genai 1.1 treats as no content,
  OpenInference ``HIDE_INPUTS``/``HIDE_OUTPUTS``): only ERRORs or the FAILs
  the full evidence gives, never a wrong PASS, and the ERRORs name the
  setting to change;
- no agent span (each chat call a trace of its own): every trace flagged
  ``incomplete``, never ``acceptable``.

Event mode (content in log records) is in ``test_live_openai_events.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.agents.openai_traces import openai_runs
from tests.live_openai import (
    NAMES,
    TOOL_CHECKS,
    assert_no_wrong_verdict,
    expected_verdict,
    replay_run,
    verdict,
)

CONTENT_ON = ("otel-span", "oi")
CONTENT_OFF = {
    "otel-off": "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only",
    "otel-legacy": "OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental",
    "oi-hidden": "OPENINFERENCE_HIDE_INPUTS",
}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("mode", CONTENT_ON)
def test_content_on_gives_the_intended_verdicts(
    mode: str, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replayed = replay_run(openai_runs(mode)[name], tmp_path, capsys)
    (record,) = replayed.records
    assert (record["rubric_id"], record["agent"]) == ("refund-support", "refund-agent")
    assert verdict(record) == expected_verdict(name), record["checks"]
    assert "flags" not in record
    assert "not captured" not in replayed.stderr


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("mode", sorted(CONTENT_OFF))
def test_content_off_gives_errors_never_a_wrong_verdict(
    mode: str,
    name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    replayed = replay_run(openai_runs(mode)[name], tmp_path, capsys)
    assert_no_wrong_verdict(name, replayed.records)
    (record,) = replayed.records
    assert record["outcome"] == "errored", record["checks"]
    by_name = {c["name"]: c for c in record["checks"]}
    for check in TOOL_CHECKS:
        assert by_name[check]["outcome"] == "ERROR", by_name[check]
        assert "tool calls not captured (2 model turns asked for tools)" in by_name[check]["detail"]
        assert CONTENT_OFF[mode] in by_name[check]["detail"]
    assert by_name["amount_grounded"]["outcome"] == "ERROR"
    assert "content not captured by the producer" in replayed.stderr
    warnings = [
        r.getMessage() for r in caplog.records if "not captured in its traces" in r.getMessage()
    ]
    assert len(warnings) == 5  # one per field, for agent refund-agent
    assert all(w.startswith("agent refund-agent: ") and CONTENT_OFF[mode] in w for w in warnings)


@pytest.mark.parametrize("name", NAMES)
def test_without_an_agent_span_each_call_is_an_incomplete_fragment(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = openai_runs("otel-span", root=False)[name]
    assert len(run.traces) == 3  # two tool-calling turns and the answer, each its own trace
    replayed = replay_run(run, tmp_path, capsys)
    assert len(replayed.records) == 3
    assert_no_wrong_verdict(name, replayed.records)
    for record in replayed.records:
        assert record["flags"] == ["incomplete"], record
    assert "traces flagged (incomplete 3)" in replayed.stderr
