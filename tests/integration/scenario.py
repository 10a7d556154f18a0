"""What the Kafka tests feed and expect: traces, rubrics, and a judge that answers from a script.

Traces are generated with the OTel SDK and encoded with its OTLP encoder.
``JUDGE_RUBRIC`` and ``answer_like_a_judge`` serve the tests with a judge (a
``tests.gemini_server.JudgeServer`` responder).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.agents.genai_spans import GenAICase, make_cases
from tests.agents.otlp import split_requests
from tests.gemini_server import Reply, gemini_json, judged_response

# Check names match tests.agents.genai_spans' expected failures.
RUBRICS = {
    "refund.yaml": """
id: refund-support
version: "3"
applies_to: {service.name: refund-agent}
checks:
  - {name: allowed_tools, type: tool_allowlist, tools: [lookup_order, issue_refund]}
  - name: refund_args
    type: tool_arguments
    tool: issue_refund
    schema: {type: object, required: [order_id, amount], properties: {amount: {type: number, maximum: 500}}}
  - {name: amount_grounded, type: grounded_numbers}
  - {name: no_error_spans, type: no_error_spans}
  - {name: fast_enough, type: max_latency_ms, limit: 30000, gate: false}
""",
    "airline.yaml": """
id: airline-booking
version: "1"
applies_to: {service.name: airline-agent}
checks:
  - name: identify_user_first
    type: required_tool_calls
    order: in_order
    calls: [{name: get_user_details}, {name: cancel_reservation}]
  - {name: no_error_spans, type: no_error_spans}
  - {name: fast_enough, type: max_latency_ms, limit: 30000, gate: false}
""",
}

# The judge block's instructions and the two criteria answer_like_a_judge answers
# (correct_amount, gating; polite, advisory), shared by every rubric a scripted judge grades.
REFUND_JUDGE_CRITERIA = """\
  instructions: You grade replies of a refund agent.
  criteria:
    - name: correct_amount
      definition: Every amount told to the customer equals an amount in a tool result.
      pass_example: '"Refunded $40.25" (tool returned 40.25)'
      fail_example: '"Refunded $45" (tool returned 40.25)'
    - name: polite
      definition: The reply is courteous.
      pass_example: '"Sorry about that, done."'
      fail_example: '"Read the policy."'
      gate: false
"""

# The refund rubric with a judge, for tests that run one (answer_like_a_judge answers it).
JUDGE_RUBRIC = (
    """
id: refund-support
version: "4"
applies_to: {service.name: refund-agent}
sampling: {judge_ratio: 0.5, always_judge: [error]}
checks:
  - {name: allowed_tools, type: tool_allowlist, tools: [lookup_order, issue_refund]}
judge:
  model: gemini-2.5-flash
"""
    + REFUND_JUDGE_CRITERIA
)


def refund_criteria(fail: bool, evidence: str = "$999.95") -> list[dict[str, str]]:
    """A judge's criteria for REFUND_JUDGE_CRITERIA: correct_amount fails or passes, polite passes."""
    return [
        {
            "criterion": "correct_amount",
            "evidence": evidence if fail else "NONE",
            "verdict": "FAIL" if fail else "PASS",
        },
        {"criterion": "polite", "evidence": "NONE", "verdict": "PASS"},
    ]


def answer_like_a_judge(path: str, body: Any) -> Reply:
    """PASS everything, except an amount the tools never returned (the 999.95 cases)."""
    return gemini_json({"criteria": refund_criteria("999.95" in judged_response(body))})


def write_rubrics(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in RUBRICS.items():
        (directory / name).write_text(text)
    return directory


def expected_outcome(case: GenAICase) -> str:
    gating = case.expected_failures - {"fast_enough"}
    return "unacceptable" if gating else "acceptable"


@dataclass(frozen=True)
class Feed:
    cases: list[GenAICase]
    records: list[tuple[bytes, bytes]]  # (key, value) in send order

    @property
    def trace_ids(self) -> set[str]:
        return {c.trace_id for c in self.cases}

    @property
    def span_count(self) -> int:
        return sum(len(c.spans) for c in self.cases)


def make_feed(n: int, seed: int, *, max_parts: int = 3) -> Feed:
    """``n`` traces, each split over 1..max_parts records keyed by hex trace id, interleaved."""
    rng = random.Random(seed)
    cases = make_cases(n, seed)
    queues = []
    for case in cases:
        key = case.trace_id.encode()
        parts = split_requests(case.spans, rng.randint(1, max_parts))
        queues.append([(key, part) for part in parts])
    records: list[tuple[bytes, bytes]] = []
    # Interleave traces the way concurrent agents would, keeping each trace's own order.
    while queues:
        i = rng.randrange(len(queues))
        records.append(queues[i].pop(0))
        if not queues[i]:
            queues.pop(i)
    return Feed(cases, records)
