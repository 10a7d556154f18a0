"""Traces for the Kafka tests: generated with the OTel SDK, encoded with its OTLP encoder."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from tests.agents.genai_spans import GenAICase, make_cases
from tests.agents.otlp import split_requests

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
