"""openai-v2 in event mode: content only in OTLP log records, evaluated with the traces.

``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`` with
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=event_only``: the chat
spans carry no content; each call's messages are in one
``gen_ai.client.inference.operation.details`` log record with the trace and
span ids. ``sidecar replay`` gets the traces file and the logs file together
and must give the verdicts the span mode gives.

This needs the OTLP logs input, built on its own branch: until it
is merged, replay cannot read the logs file and this module fails.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.agents.openai_traces import openai_runs
from tests.live_openai import NAMES, expected_verdict, replay_run, verdict


def test_event_mode_puts_content_in_log_records_only() -> None:
    runs = openai_runs("otel-event")
    for name in NAMES:
        assert runs[name].logs, name
        assert "gen_ai.input.messages" not in "".join(runs[name].traces)
        assert "gen_ai.client.inference.operation.details" in runs[name].logs[0]


@pytest.mark.parametrize("name", NAMES)
def test_event_mode_gives_the_span_mode_verdicts(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replayed = replay_run(openai_runs("otel-event")[name], tmp_path, capsys, logs=True)
    (record,) = replayed.records
    assert verdict(record) == expected_verdict(name), record["checks"]
