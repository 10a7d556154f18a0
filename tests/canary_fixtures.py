"""The canary set the canary tests share: ten refund traces, their labels, a judge that drifts.

Orders O1..O6 are answered with the right amount, O7..O10 with a wrong one
($999.95); one person labelled every trace and failed O6 as well. The judge
answers ``correct_amount`` FAIL when the answer says $999.95, else PASS, and
``polite`` PASS; once drifted it passes everything and reports model version
m-002 instead of m-001. The hand-worked figures are in tests/test_canary.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from sidecar.ingest.otlpjson import request_to_json_line
from tests.agents.genai_spans import recorder, refund_turn
from tests.gemini_server import (
    JudgeServer,
    Reply,
    gemini_json,
    judged_response,
    openai_json,
    status,
)
from tests.integration.scenario import REFUND_JUDGE_CRITERIA, refund_criteria

REPO = Path(__file__).resolve().parents[1]
WRONG = "999.95"
ORDERS = [f"O{n}" for n in range(1, 11)]

RUBRIC = (
    """\
id: refund-canary
version: "2"
applies_to: {service.name: some-other-agent}   # the canary ignores routing
sampling: {judge_ratio: 0.0}                    # and sampling
judge:
  model: MODEL
"""
    + REFUND_JUDGE_CRITERIA
)


def record_traces() -> tuple[str, dict[str, str]]:
    """One OTLP/JSON line with the ten traces; and order -> trace id."""
    rec = recorder("refund-agent", "1.4.2", seed="canary")
    ids = {}
    for order in ORDERS:
        ids[order] = refund_turn(rec.provider, order, WRONG if int(order[1:]) >= 7 else "40.25")
    return request_to_json_line(encode_spans(rec.spans())) + "\n", ids


def labels(ids: dict[str, str]) -> list[dict[str, Any]]:
    rows = [
        {
            "case_id": ids[o],
            "criterion": "correct_amount",
            "rater": "ann",
            "label": "FAIL" if o in {"O6", "O7", "O8", "O9", "O10"} else "PASS",
        }
        for o in ORDERS
    ]
    rows += [
        {"trace_id": ids[o], "criterion": "polite", "rater": "ann", "label": "pass"}
        for o in ORDERS[:4]
    ]
    return rows


def judging(*, drifted: bool = False, down: frozenset[str] = frozenset()) -> Callable[..., Reply]:
    """A responder for both protocols: the verdicts described in the module docstring."""

    def respond(path: str, body: Any) -> Reply:
        gemini = path.endswith(":generateContent")
        response = judged_response(body)
        if any(f"order {o}." in response for o in down):
            return status(500, "scripted outage")
        wrong = WRONG in response and not drifted
        criteria = refund_criteria(wrong, evidence=f"${WRONG}")
        version = "m-002" if drifted else "m-001"
        if gemini:
            return gemini_json({"criteria": criteria}, model_version=version)
        return openai_json({"criteria": criteria}, model=version)

    return respond


class Responder:
    """Switchable behaviour for one server (the drift happens between runs)."""

    def __init__(self) -> None:
        self.current: Callable[..., Reply] = judging()

    def __call__(self, path: str, body: Any) -> Reply:
        return self.current(path, body)


# Fixtures (registered for the whole suite in tests/conftest.py).


@pytest.fixture
def canary_responder() -> Responder:
    return Responder()


@pytest.fixture
def canary_server(canary_responder: Responder) -> Iterator[JudgeServer]:
    judge = JudgeServer(responder=canary_responder).start()
    try:
        yield judge
    finally:
        judge.stop()
