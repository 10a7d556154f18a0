"""Four more agent stacks, recorded live in every capture mode each documents, and evaluated.

pydantic-ai (its own OTel instrumentation), Strands Agents (OTel built in;
Bedrock Converse content blocks in span events by default), the OpenAI
Agents SDK (OpenInference's processor) and LangGraph (OpenLLMetry's LangChain
instrumentation, as attributes or as log records emitted on the enclosing
task span, and OpenInference's) each run the refund agent in their own
locked environment (``tests/agents/stack_traces``) against the scripted
model, in the four conversations: correct, over the limit, ungrounded
amount, forbidden tool. Their OTLP files go through ``sidecar replay`` with
the bundled ``refund-support`` rubric:

- a mode that carries content gives the verdicts the conversations are built
  for, and nothing is reported missing;
- a mode that withholds content gives no wrong verdict (only ERRORs, or the
  FAILs the full evidence gives: a forbidden tool's name is still on its
  span), and every ERROR names the setting to change.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.agents.refund_shop import BY_NAME, LIVE_SCENARIOS
from tests.agents.stack_traces import STACKS, run_trace_id, stack_runs
from tests.live_openai import outcomes, replay_run, verdict

pytestmark = pytest.mark.usefixtures("no_judge_credentials")

NAMES = tuple(s.name for s in LIVE_SCENARIOS)
CONTENT_MODES = [
    pytest.param(stack.name, mode, name, id=f"{stack.name}-{mode}-{name}")
    for stack in STACKS.values()
    for mode in stack.content
    for name in NAMES
]
WITHHELD_MODES = [
    pytest.param(stack.name, mode, name, id=f"{stack.name}-{mode}-{name}")
    for stack in STACKS.values()
    for mode in stack.withheld
    for name in NAMES
]


def _expected(name: str) -> tuple[str, frozenset[str], frozenset[str]]:
    failures = BY_NAME[name].expected_failures
    return ("unacceptable" if failures else "acceptable", failures, frozenset())


def _run_record(
    stack: str, mode: str, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[dict[str, object], str]:
    run = stack_runs(stack, mode)[name]
    replayed = replay_run(run, tmp_path, capsys, logs=bool(run.logs))
    trace_id = run_trace_id(run)
    (record,) = [r for r in replayed.records if r["trace_id"] == trace_id]
    assert (record["rubric_id"], record["agent"]) == ("refund-support", "refund-agent")
    return record, replayed.stderr


@pytest.mark.parametrize(("stack", "mode", "name"), CONTENT_MODES)
def test_content_modes_give_the_intended_verdicts(
    stack: str, mode: str, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record, stderr = _run_record(stack, mode, name, tmp_path, capsys)
    assert verdict(record) == _expected(name), record["checks"]
    assert "flags" not in record, record
    assert "does not read" not in stderr


@pytest.mark.parametrize(("stack", "mode", "name"), WITHHELD_MODES)
def test_withheld_content_gives_errors_that_name_the_setting(
    stack: str,
    mode: str,
    name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    record, stderr = _run_record(stack, mode, name, tmp_path, capsys)
    expected = BY_NAME[name].expected_failures
    assert record["outcome"] != "acceptable", record["checks"]
    assert outcomes(record, "FAIL") <= expected, record["checks"]
    assert not (outcomes(record, "PASS") & expected), record["checks"]
    errors = [c for c in record["checks"] if c["outcome"] == "ERROR"]  # type: ignore[attr-defined]
    assert errors, record["checks"]
    setting = STACKS[stack].withheld[mode]
    for check in errors:
        assert "not captured" in check["detail"], check
        assert setting in check["detail"], check
    assert "content not captured by the producer" in stderr
    assert "does not read" not in stderr


def test_strands_events_carry_content_blocks_on_the_span() -> None:
    """The default Strands recording is the case the shared readers exist for."""
    run = stack_runs("strands", "events")[NAMES[0]]
    assert not run.logs
    text = "".join(run.traces)
    assert "toolUse" in text
    assert "toolResult" in text
    assert "gen_ai.input.messages" not in text


def test_strands_latest_puts_the_details_event_on_the_span() -> None:
    run = stack_runs("strands", "latest")[NAMES[0]]
    assert not run.logs
    assert "gen_ai.client.inference.operation.details" in "".join(run.traces)


def test_langgraph_events_land_on_the_enclosing_task_span() -> None:
    """OpenLLMetry emits the chat messages while the task span, not the chat span, is current."""
    from sidecar.ingest.decode import decode
    from sidecar.ingest.decode_logs import decode_logs

    run = stack_runs("langgraph", "traceloop-events")[NAMES[0]]
    spans = {s.span_id: s for line in run.traces for s in decode(line.encode())}
    records = [r for line in run.logs for r in decode_logs(line.encode())]
    assert records
    carriers = {spans[r.span_id].name for r in records if r.span_id in spans}
    assert carriers == {"execute_task RunnableSequence"}, carriers
