"""google-adk 2.13 live with its default capture (no content): ERRORs and correct FAILs only.

Unset, ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` means no message
content anywhere: ADK's spans keep the tool names but carry no prompts,
answers, arguments or results, and its log records carry no messages. Every
scenario, replayed with the bundled rubrics, must then be ERROR wherever the
content is needed, may FAIL only where the full evidence fails too, must
never PASS a check the full evidence fails, and is never ``acceptable``; the
ERRORs name the setting to change.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.agents.adk_traces import adk2_run
from tests.agents.refund_shop import BY_NAME, SCENARIOS
from tests.otlp_files import DEMO_RUBRICS, line_trace_id, records, replay

pytestmark = pytest.mark.usefixtures("no_judge_credentials")

SETTING = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


@pytest.mark.parametrize("name", [s.name for s in SCENARIOS])
def test_default_capture_gives_errors_never_a_wrong_verdict(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = adk2_run(capture="default")[name]
    (tmp_path / "trace.jsonl").write_text(run.trace_line + "\n", encoding="utf-8")
    (tmp_path / "logs.jsonl").write_text(run.logs_line + "\n", encoding="utf-8")
    _, out, _ = replay(
        capsys, tmp_path / "trace.jsonl", tmp_path / "logs.jsonl", "--rubrics", DEMO_RUBRICS
    )
    by_trace = [r for r in records(out) if r["trace_id"] == line_trace_id(run.trace_line)]
    assert by_trace, out
    expected = BY_NAME[name].expected_failures
    for record in by_trace:
        checks = {c["name"]: c for c in record["checks"]}
        assert record["outcome"] != "acceptable", (name, record["checks"])
        failed = {n for n, c in checks.items() if c["outcome"] == "FAIL"}
        passed = {n for n, c in checks.items() if c["outcome"] == "PASS"}
        assert failed <= expected, (name, record["checks"])
        assert not passed & expected, (name, record["checks"])
        errors = [c for c in checks.values() if c["outcome"] == "ERROR"]
        assert errors, record["checks"]
        assert any(SETTING in (c.get("detail") or "") for c in errors), errors
