"""google-adk 2.13 live: an agent that calls a tool outside the allowlist, in every capture mode.

The scripted model looks the order up, then calls ``cancel_order``, which the
bundled ``refund-support`` rubric does not allow. Tool names are on ADK's
``execute_tool`` spans whatever the capture mode, so ``allowed_tools`` FAILs in
``SPAN_ONLY``, in ``EVENT_ONLY`` (content in log records) and in the default
mode (no content); no mode gives the run a PASS it should not have.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.agents.adk_traces import adk2_run
from tests.otlp_files import DEMO_RUBRICS, line_trace_id, records, replay

pytestmark = pytest.mark.usefixtures("no_judge_credentials")

NAME = "adk-refund-forbidden"


@pytest.mark.parametrize("capture", ["SPAN_ONLY", "EVENT_ONLY", "default"])
def test_a_forbidden_tool_fails_the_allowlist_in_every_capture_mode(
    capture: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = adk2_run((NAME,), capture=capture)[NAME]
    (tmp_path / "trace.jsonl").write_text(run.trace_line + "\n", encoding="utf-8")
    (tmp_path / "logs.jsonl").write_text(run.logs_line + "\n", encoding="utf-8")
    _, out, _ = replay(
        capsys, tmp_path / "trace.jsonl", tmp_path / "logs.jsonl", "--rubrics", DEMO_RUBRICS
    )
    [record] = [r for r in records(out) if r["trace_id"] == line_trace_id(run.trace_line)]
    checks = {c["name"]: c for c in record["checks"]}
    assert record["outcome"] == "unacceptable", record["checks"]
    assert checks["allowed_tools"]["outcome"] == "FAIL"
    assert "cancel_order" in checks["allowed_tools"]["detail"]
    failed = {n for n, c in checks.items() if c["outcome"] == "FAIL"}
    assert failed == {"allowed_tools"}, record["checks"]
    if capture == "default":
        # No content: what needs it is ERROR (never PASS), and says which setting to change.
        assert checks["amount_grounded"]["outcome"] == "ERROR"
    else:
        assert "ERROR" not in {c["outcome"] for c in checks.values()}, record["checks"]
