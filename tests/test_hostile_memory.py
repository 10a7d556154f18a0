"""Per-value memory and warnings: bounded in count and size whatever the traces name.

Agent and model names come from traces. Each memory keyed by them (warned
self-preference pairs, warned capture gaps) keeps at most a fixed number of
keys, each cut to ``MAX_KEPT_CHARS``; each warning about them has a cap.
2,000 distinct model names once gave 2,000 warnings and an unbounded set.
"""

from __future__ import annotations

import logging

import pytest

from sidecar.engine.traces import SELF_PREFERENCE_WARNINGS, SelfPreferenceWarnings
from sidecar.evaluate.capture import CaptureWarnings
from sidecar.evaluate.pipeline import NO_JUDGE, Case
from sidecar.evaluate.sample import SampleDecision
from sidecar.model import Capture, Captured
from sidecar.text import MAX_KEPT_CHARS
from tests.builders import refund_rubric, transcript

NOT_CAPTURED = Captured.NOT_CAPTURED
RUBRIC = refund_rubric(model="gemini-2.5-flash")


def _case(model: str) -> Case:
    return Case(
        RUBRIC,
        transcript(models=(model,)),
        (),
        SampleDecision(judge=True, reason="ratio"),
        NO_JUDGE,
    )


def test_2000_model_names_give_capped_warnings_and_bounded_memory(
    caplog: pytest.LogCaptureFixture,
) -> None:
    warnings = SelfPreferenceWarnings()
    caplog.set_level(logging.WARNING, logger="sidecar.engine.traces")
    noted = sum(
        warnings.note(_case(f"gemini-2.5-flash-{i:04d}" + "x" * 50_000)) for i in range(2000)
    )
    assert noted == 2000  # every case is still counted (the metric)
    lines = [r for r in caplog.records if "self-preference" in r.getMessage()]
    assert len(lines) == len(warnings) == SELF_PREFERENCE_WARNINGS
    assert all(len(r.getMessage()) < 1000 for r in lines)
    assert all(len(model) <= MAX_KEPT_CHARS for _, model in warnings._warned)


def test_capture_warnings_keep_agent_names_cut(caplog: pytest.LogCaptureFixture) -> None:
    warnings = CaptureWarnings(limit=50)
    caplog.set_level(logging.WARNING)
    for i in range(2000):
        name = f"{i:04d}" + "a" * 50_000
        warnings.note(transcript(agent_name=name, capture=Capture(input=NOT_CAPTURED)))
    assert 0 < len(caplog.records) <= 50
    assert all(len(r.getMessage()) < 2000 for r in caplog.records)
    assert all(len(agent) <= MAX_KEPT_CHARS for agent, _ in warnings._warned)
