"""`sidecar judge` builds the request the service would send: the configured per-block cap."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sidecar.cli import main
from tests.builders import genai_trace, judge_block, rubric_yaml
from tests.otlp_records import record


def write_case(tmp_path: Path, result_chars: int) -> tuple[Path, Path]:
    trace = genai_trace(
        "Refund order 7.",
        [("lookup_order", {"order_id": "7"}, json.dumps({"note": "x" * result_chars}))],
        "Refunded.",
    )
    traces = tmp_path / "traces.jsonl"
    traces.write_bytes(record(trace.spans) + b"\n")
    rubric = tmp_path / "refund.yaml"
    rubric.write_text(rubric_yaml(id="refunds", version="3", judge=judge_block("grounded")))
    return traces, rubric


@pytest.mark.parametrize(("cap", "cut"), [(2048, True), (32768, False)])
def test_the_request_shown_is_cut_to_the_configured_block_cap(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cap: int, cut: bool
) -> None:
    traces, rubric = write_case(tmp_path, result_chars=10_000)
    config = tmp_path / "config.yaml"
    config.write_text(f"judge:\n  max_block_chars: {cap}\n")
    code = main(
        [
            "judge",
            "--rubric",
            str(rubric),
            "--trace",
            str(traces),
            "--config",
            str(config),
            "--dry-run",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert ("[truncated " in out) is cut
    assert (out.count("x" * 9_000) == 0) is cut
