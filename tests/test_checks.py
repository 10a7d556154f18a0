from __future__ import annotations

import ast
import dataclasses
import datetime
import importlib
import inspect
import pkgutil
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pydantic import TypeAdapter

import sidecar
import sidecar.evaluate.checks
from sidecar.evaluate.checks import CHECK_TYPES, CheckSpec, run_check, run_checks
from sidecar.evaluate.checks._common import json_equal
from sidecar.evaluate.checks.answer import AnswerRegex
from sidecar.evaluate.checks.base import CheckConfig, CheckType
from sidecar.evaluate.checks.tools import ToolArguments
from sidecar.evaluate.rubric import Rubric
from sidecar.model import ErrorSpan, Flag, Outcome, Transcript
from tests.builders import rubric, tool_call, transcript

PASS, FAIL, ERROR = Outcome.PASS, Outcome.FAIL, Outcome.ERROR
REGISTERED = [t.name for t in CHECK_TYPES]

_SPEC: TypeAdapter[Any] = TypeAdapter(CheckSpec)


def spec(**fields: Any) -> Any:
    """A check spec validated like a rubric file entry; named after its type."""
    return _SPEC.validate_python({"name": fields["type"], **fields})


ALLOWLIST = spec(type="tool_allowlist", tools=["lookup_order", "issue_refund"])
DENYLIST = spec(type="tool_denylist", tools=["delete_account", "wire_transfer"])

ALLOWLIST_CASES = [
    pytest.param(ALLOWLIST, transcript(), PASS, "0 calls", id="allowlist-pass-no-calls"),
    pytest.param(
        ALLOWLIST,
        transcript(tool_call("lookup_order"), tool_call("issue_refund"), tool_call("lookup_order")),
        PASS,
        "3 calls, all allowed",
        id="allowlist-pass-all-allowed",
    ),
    pytest.param(
        ALLOWLIST,
        transcript(tool_call("lookup_order"), tool_call("delete_account")),
        FAIL,
        "called delete_account",
        id="allowlist-fail-unknown-tool",
    ),
    pytest.param(
        ALLOWLIST,
        transcript(tool_call("a"), tool_call("b"), tool_call("a")),
        FAIL,
        "called a, b",
        id="allowlist-fail-names-each-offender-once",
    ),
    pytest.param(
        ALLOWLIST,
        transcript(tool_call("lookup_order"), truncated=True),
        ERROR,
        "trace truncated",
        id="allowlist-error-truncated-pass-is-inconclusive",
    ),
    pytest.param(
        ALLOWLIST,
        transcript(tool_call("delete_account"), truncated=True),
        FAIL,
        "called delete_account",
        id="allowlist-fail-truncated-fail-stands",
    ),
]

DENYLIST_CASES = [
    pytest.param(DENYLIST, transcript(tool_call("lookup_order")), PASS, "", id="denylist-pass"),
    pytest.param(
        DENYLIST,
        transcript(tool_call("lookup_order"), tool_call("wire_transfer")),
        FAIL,
        "called wire_transfer",
        id="denylist-fail",
    ),
    pytest.param(
        DENYLIST,
        transcript(tool_call("lookup_order"), truncated=True),
        ERROR,
        "truncated",
        id="denylist-error-truncated",
    ),
]


def required(*calls: dict[str, Any], order: str = "any_order") -> Any:
    return spec(type="required_tool_calls", calls=list(calls), order=order)


LOOKUP = {"name": "lookup_order", "arguments": {"order_id": "A1"}}
REFUND = {"name": "issue_refund", "arguments": {"order_id": "A1", "amount": 40}}

REQUIRED_CASES = [
    pytest.param(
        required({"name": "lookup_order"}),
        transcript(tool_call("lookup_order", None)),
        PASS,
        "1 expected call found",
        id="required-pass-name-only-even-if-arguments-not-captured",
    ),
    pytest.param(
        required(LOOKUP, REFUND, order="in_order"),
        transcript(
            tool_call("lookup_order", {"order_id": "A1"}),
            tool_call("get_policy"),
            tool_call("issue_refund", {"order_id": "A1", "amount": 40, "reason": "late"}),
        ),
        PASS,
        "found in order",
        id="required-pass-in-order-subsequence-with-extra-keys",
    ),
    pytest.param(
        required(REFUND, LOOKUP),
        transcript(
            tool_call("lookup_order", {"order_id": "A1"}),
            tool_call("issue_refund", {"order_id": "A1", "amount": 40}),
        ),
        PASS,
        "",
        id="required-pass-any-order",
    ),
    pytest.param(
        required(REFUND),
        transcript(tool_call("issue_refund", '{"order_id": "A1", "amount": 40.0}')),
        PASS,
        "",
        id="required-pass-40-equals-40.0",
    ),
    pytest.param(
        required(
            {
                "name": "book",
                "arguments": {"flights": [{"number": "HAT1", "date": "2024-05-20"}], "pax": 2},
            }
        ),
        transcript(
            tool_call("book", {"pax": 2.0, "flights": [{"date": "2024-05-20", "number": "HAT1"}]})
        ),
        PASS,
        "",
        id="required-pass-nested-equal-key-order-free",
    ),
    pytest.param(
        required({"name": "search", "arguments": {"date": datetime.date(2024, 5, 20)}}),
        transcript(tool_call("search", {"date": "2024-05-20"})),
        PASS,
        "",
        id="required-pass-unquoted-yaml-date-is-text",
    ),
    pytest.param(
        required(
            {"name": "lookup_order", "arguments": {}},
            {"name": "lookup_order", "arguments": {"order_id": "A1"}},
        ),
        transcript(
            tool_call("lookup_order", {"order_id": "A1"}),
            tool_call("lookup_order", {"order_id": "B2"}),
        ),
        PASS,
        "2 expected calls found",
        id="required-pass-matching-not-greedy",
    ),
    pytest.param(
        required(LOOKUP, REFUND),
        transcript(
            tool_call("lookup_order", None),
            tool_call("issue_refund", {"order_id": "A1", "amount": 40}),
            tool_call("lookup_order", {"order_id": "A1"}),
        ),
        PASS,
        "",
        id="required-pass-uncaptured-call-not-needed",
    ),
    pytest.param(
        required(LOOKUP, REFUND),
        transcript(tool_call("lookup_order", {"order_id": "A1"})),
        FAIL,
        'missing issue_refund {"order_id": "A1", "amount": 40}',
        id="required-fail-missing-call-named",
    ),
    pytest.param(
        required(REFUND),
        transcript(tool_call("issue_refund", {"order_id": "A1", "amount": 45})),
        FAIL,
        "missing issue_refund",
        id="required-fail-wrong-value",
    ),
    pytest.param(
        required(REFUND),
        transcript(tool_call("issue_refund", {"order_id": "A1"})),
        FAIL,
        "missing issue_refund",
        id="required-fail-missing-key",
    ),
    pytest.param(
        required(REFUND),
        transcript(tool_call("issue_refund", {"order_id": "A1", "amount": "40"})),
        FAIL,
        "",
        id="required-fail-string-is-not-number",
    ),
    pytest.param(
        required({"name": "notify", "arguments": {"urgent": True}}),
        transcript(tool_call("notify", {"urgent": 1})),
        FAIL,
        "",
        id="required-fail-true-is-not-1",
    ),
    pytest.param(
        required({"name": "book", "arguments": {"flight": {"number": "HAT1"}}}),
        transcript(tool_call("book", {"flight": {"number": "HAT1", "date": "2024-05-20"}})),
        FAIL,
        "",
        id="required-fail-nested-dict-must-be-equal-not-subset",
    ),
    pytest.param(
        required(LOOKUP, REFUND, order="in_order"),
        transcript(
            tool_call("issue_refund", {"order_id": "A1", "amount": 40}),
            tool_call("lookup_order", {"order_id": "A1"}),
        ),
        FAIL,
        "missing issue_refund",
        id="required-fail-wrong-order",
    ),
    pytest.param(
        required(LOOKUP, LOOKUP),
        transcript(tool_call("lookup_order", {"order_id": "A1"})),
        FAIL,
        "missing lookup_order",
        id="required-fail-each-call-satisfies-one-expectation",
    ),
    pytest.param(
        required(REFUND),
        transcript(tool_call("issue_refund", "order A1, $40")),
        FAIL,
        "",
        id="required-fail-arguments-not-json",
    ),
    pytest.param(
        required(LOOKUP, REFUND),
        transcript(tool_call("lookup_order", None)),
        FAIL,
        "missing issue_refund",
        id="required-fail-decided-despite-uncaptured-arguments",
    ),
    pytest.param(
        required(REFUND),
        transcript(tool_call("issue_refund", None)),
        ERROR,
        "cannot tell if issue_refund",
        id="required-error-arguments-not-captured",
    ),
    pytest.param(
        required(LOOKUP, REFUND, order="in_order"),
        transcript(tool_call("lookup_order", {"order_id": "A1"}), tool_call("issue_refund", None)),
        ERROR,
        "arguments not captured",
        id="required-error-in-order-arguments-not-captured",
    ),
    pytest.param(
        required(LOOKUP),
        transcript(tool_call("get_policy"), truncated=True),
        ERROR,
        "trace truncated",
        id="required-error-truncated-missing-call-may-be-lost",
    ),
    pytest.param(
        required(LOOKUP),
        transcript(tool_call("lookup_order", {"order_id": "A1"}), truncated=True),
        PASS,
        "",
        id="required-pass-truncated-found-stands",
    ),
]

REFUND_SCHEMA = {
    "type": "object",
    "required": ["order_id", "amount"],
    "properties": {"amount": {"type": "number", "maximum": 500}},
}
REFUND_ARGS = spec(type="tool_arguments", tool="issue_refund", schema=REFUND_SCHEMA)
GOOD_REFUND = {"order_id": "A1", "amount": 40}

TOOL_ARGUMENTS_CASES = [
    pytest.param(
        REFUND_ARGS,
        transcript(tool_call("lookup_order")),
        PASS,
        "not called",
        id="arguments-pass-not-called",
    ),
    pytest.param(
        REFUND_ARGS,
        transcript(
            tool_call("issue_refund", GOOD_REFUND),
            tool_call("issue_refund", {"order_id": "B", "amount": 500}),
        ),
        PASS,
        "2 calls of issue_refund valid",
        id="arguments-pass-every-call-valid",
    ),
    pytest.param(
        REFUND_ARGS,
        transcript(
            tool_call("issue_refund", GOOD_REFUND),
            tool_call("issue_refund", {"order_id": "A1", "amount": 600}),
        ),
        FAIL,
        "call 2 of issue_refund: $.amount: 600 is greater than the maximum of 500",
        id="arguments-fail-over-maximum-with-path",
    ),
    pytest.param(
        REFUND_ARGS,
        transcript(tool_call("issue_refund", {"amount": 10})),
        FAIL,
        "'order_id' is a required property",
        id="arguments-fail-missing-required",
    ),
    pytest.param(
        REFUND_ARGS,
        transcript(tool_call("issue_refund", "amount=40")),
        FAIL,
        "arguments are not JSON",
        id="arguments-fail-not-json",
    ),
    pytest.param(
        REFUND_ARGS,
        transcript(
            tool_call("issue_refund", None),
            tool_call("issue_refund", {"order_id": "A1", "amount": "40"}),
        ),
        FAIL,
        "call 2 of issue_refund: $.amount",
        id="arguments-fail-wins-over-uncaptured",
    ),
    pytest.param(
        spec(
            type="tool_arguments",
            tool="search",
            schema={"properties": {"date": {"type": "string", "format": "date"}}},
        ),
        transcript(tool_call("search", {"date": "2024-13-45"})),
        FAIL,
        "$.date",
        id="arguments-fail-format-is-asserted",
    ),
    pytest.param(
        REFUND_ARGS,
        transcript(tool_call("issue_refund", GOOD_REFUND), tool_call("issue_refund", None)),
        ERROR,
        "arguments of 1 of 2 calls not captured",
        id="arguments-error-not-captured",
    ),
    pytest.param(
        REFUND_ARGS,
        transcript(tool_call("issue_refund", GOOD_REFUND), truncated=True),
        ERROR,
        "trace truncated",
        id="arguments-error-truncated",
    ),
]

MAX_CALLS = spec(type="max_tool_calls", limit=2)
MAX_SEARCHES = spec(type="max_tool_calls", limit=1, tool="search")

MAX_TOOL_CALLS_CASES = [
    pytest.param(
        MAX_CALLS,
        transcript(tool_call("a"), tool_call("b")),
        PASS,
        "2 calls <= limit 2",
        id="max-calls-pass-at-limit",
    ),
    pytest.param(
        MAX_CALLS,
        transcript(tool_call("a"), tool_call("b"), tool_call("a")),
        FAIL,
        "3 calls > limit 2",
        id="max-calls-fail-over-limit",
    ),
    pytest.param(
        MAX_SEARCHES,
        transcript(tool_call("search"), tool_call("book"), tool_call("book")),
        PASS,
        "1 call of search",
        id="max-calls-pass-counts-only-its-tool",
    ),
    pytest.param(
        MAX_SEARCHES,
        transcript(tool_call("search"), tool_call("search")),
        FAIL,
        "2 calls of search > limit 1",
        id="max-calls-fail-for-its-tool",
    ),
    pytest.param(
        MAX_CALLS,
        transcript(tool_call("a"), truncated=True),
        ERROR,
        "truncated",
        id="max-calls-error-truncated",
    ),
]

REGEX = spec(type="answer_regex", must_match=r"refund of \$\d+", must_not_match=r"\b\d{16}\b")

ANSWER_REGEX_CASES = [
    pytest.param(
        REGEX,
        transcript(answer="Your refund of $40 is on its way."),
        PASS,
        "answer matches 'refund of \\\\$\\\\d+' and does not match '\\\\b\\\\d{16}\\\\b'",
        id="regex-pass",
    ),
    pytest.param(
        REGEX, transcript(answer="All done!"), FAIL, "does not match", id="regex-fail-must-match"
    ),
    pytest.param(
        REGEX,
        transcript(answer="Your refund of $40 went to card\n4111111111111111."),
        FAIL,
        "answer matches '\\\\b\\\\d{16}\\\\b' at '4111111111111111'",
        id="regex-fail-must-not-match-quotes-the-hit",
    ),
    pytest.param(
        spec(type="answer_regex", must_match="REFUND", ignore_case=True),
        transcript(answer="refund issued"),
        PASS,
        "",
        id="regex-pass-ignore-case",
    ),
    pytest.param(
        spec(type="answer_regex", must_match="REFUND"),
        transcript(answer="refund issued"),
        FAIL,
        "",
        id="regex-fail-case-sensitive-by-default",
    ),
    pytest.param(
        spec(type="answer_regex", must_not_match="password"),
        transcript(answer=""),
        PASS,
        "answer does not match 'password'",
        id="regex-pass-empty-answer-is-captured",
    ),
    pytest.param(
        REGEX, transcript(answer=None), ERROR, "answer not captured", id="regex-error-no-answer"
    ),
]

STATUS_SCHEMA = spec(
    type="answer_json_schema",
    schema={
        "type": "object",
        "required": ["status"],
        "properties": {"status": {"enum": ["refunded", "refused"]}},
    },
)

ANSWER_JSON_CASES = [
    pytest.param(
        STATUS_SCHEMA, transcript(answer=' {"status": "refunded"} '), PASS, "", id="json-pass-plain"
    ),
    pytest.param(
        STATUS_SCHEMA,
        transcript(answer='Here you go:\n```json\n{"status": "refused"}\n```\nAnything else?'),
        PASS,
        "",
        id="json-pass-fenced-block",
    ),
    pytest.param(
        STATUS_SCHEMA,
        transcript(answer='```\n{"status": "refused"}\n```'),
        PASS,
        "",
        id="json-pass-unlabelled-fence",
    ),
    pytest.param(
        STATUS_SCHEMA,
        transcript(answer="Refunded!"),
        FAIL,
        "answer is not JSON",
        id="json-fail-prose",
    ),
    pytest.param(
        STATUS_SCHEMA,
        transcript(answer="```json\n{status: refunded}\n```"),
        FAIL,
        "answer is not JSON",
        id="json-fail-fence-not-json",
    ),
    pytest.param(
        STATUS_SCHEMA,
        transcript(answer='{"status": "pending"}'),
        FAIL,
        "$.status: 'pending' is not one of",
        id="json-fail-schema-with-path",
    ),
    pytest.param(
        STATUS_SCHEMA,
        transcript(answer=None),
        ERROR,
        "answer not captured",
        id="json-error-no-answer",
    ),
]

LATENCY = spec(type="max_latency_ms", limit=30000)

LATENCY_CASES = [
    pytest.param(
        LATENCY,
        transcript(latency_ms=1200.0),
        PASS,
        "latency 1200 ms <= limit 30000 ms",
        id="latency-pass",
    ),
    pytest.param(LATENCY, transcript(latency_ms=30000.0), PASS, "", id="latency-pass-at-limit"),
    pytest.param(
        LATENCY,
        transcript(latency_ms=30000.4),
        FAIL,
        "latency 30000.4 ms > limit 30000 ms",
        id="latency-fail",
    ),
    pytest.param(
        LATENCY, transcript(latency_ms=None), ERROR, "latency unknown", id="latency-error-unknown"
    ),
    pytest.param(
        LATENCY, transcript(latency_ms=float("nan")), ERROR, "not a number", id="latency-error-nan"
    ),
    pytest.param(
        LATENCY,
        transcript(latency_ms=10.0, truncated=True),
        PASS,
        "",
        id="latency-pass-truncated-root-seen",
    ),
]

MAX_TURNS = spec(type="max_turns", limit=2)

MAX_TURNS_CASES = [
    pytest.param(MAX_TURNS, transcript(), PASS, "1 turn <= limit 2", id="max-turns-pass-trace"),
    pytest.param(
        MAX_TURNS,
        transcript(turns=(transcript(), transcript())),
        PASS,
        "2 turns <= limit 2",
        id="max-turns-pass-at-limit",
    ),
    pytest.param(
        MAX_TURNS,
        transcript(turns=(transcript(), transcript(), transcript())),
        FAIL,
        "3 turns > limit 2",
        id="max-turns-fail",
    ),
    pytest.param(
        MAX_TURNS,
        transcript(turns=(transcript(),), flags=(Flag.DECIDED_EARLY,)),
        ERROR,
        "decided early",
        id="max-turns-error-decided-early",
    ),
]

NO_ERRORS = spec(type="no_error_spans")
TIMEOUT = ErrorSpan(span_id="00f067aa0ba902b7", name="execute_tool lookup_order", message="timeout")
BOOM = ErrorSpan(span_id="53995c3f42cd8ad8", name="chat gemini", message="")

ERROR_SPAN_CASES = [
    pytest.param(NO_ERRORS, transcript(), PASS, "no error spans", id="error-spans-pass"),
    pytest.param(
        NO_ERRORS,
        transcript(error_spans=(TIMEOUT,)),
        FAIL,
        "error span 'execute_tool lookup_order': timeout",
        id="error-spans-fail-names-span",
    ),
    pytest.param(
        NO_ERRORS,
        transcript(error_spans=(BOOM, TIMEOUT)),
        FAIL,
        "2 error spans, first 'chat gemini'",
        id="error-spans-fail-counts",
    ),
    pytest.param(
        NO_ERRORS, transcript(truncated=True), ERROR, "truncated", id="error-spans-error-truncated"
    ),
]

GROUNDED = spec(type="grounded_numbers")
AMOUNT_40 = tool_call(
    "lookup_order", {"order_id": "A123"}, result='{"order_id": "A123", "amount": 40.00}'
)

GROUNDED_CASES = [
    pytest.param(
        GROUNDED,
        transcript(answer="Your refund is on its way."),
        PASS,
        "no numbers in answer",
        id="grounded-pass-no-numbers",
    ),
    pytest.param(
        GROUNDED,
        transcript(AMOUNT_40, answer="Your refund of $40 is on its way."),
        PASS,
        "1 number grounded",
        id="grounded-pass-dollar-amount",
    ),
    pytest.param(
        GROUNDED,
        transcript(AMOUNT_40, answer="You get 40.00 back."),
        PASS,
        "",
        id="grounded-pass-40.00-equals-40",
    ),
    pytest.param(
        GROUNDED,
        transcript(
            tool_call("get_total", result='{"total": 1250.5}'), answer="The total is $1,250.50."
        ),
        PASS,
        "",
        id="grounded-pass-thousands-separator",
    ),
    pytest.param(
        GROUNDED,
        transcript(
            tool_call("issue_refund", {"amount": 75}, result="done"),
            answer="I refunded 75 dollars.",
        ),
        PASS,
        "",
        id="grounded-pass-from-tool-arguments",
    ),
    pytest.param(
        GROUNDED,
        transcript(user_input="I paid 3 times", answer="You paid 3 times."),
        PASS,
        "",
        id="grounded-pass-from-user-input",
    ),
    pytest.param(
        GROUNDED,
        transcript(tool_call("rates", result='{"discount": 0.12}'), answer="That is 12% off."),
        PASS,
        "",
        id="grounded-pass-percent-as-fraction",
    ),
    pytest.param(
        GROUNDED,
        transcript(tool_call("rates", result="discount: 12 percent"), answer="That is 12 % off."),
        PASS,
        "",
        id="grounded-pass-percent-as-number",
    ),
    pytest.param(
        GROUNDED,
        transcript(
            tool_call("cancel", result='{"payments": [{"amount": -348}]}'),
            answer="Refund: -$348, i.e. 348 back.",
        ),
        PASS,
        "2 numbers grounded",
        id="grounded-pass-magnitudes-compared",
    ),
    pytest.param(
        GROUNDED,
        transcript(tool_call("x", result="2.5"), answer="The change is -2.5 points."),
        PASS,
        "",
        id="grounded-pass-negative-number",
    ),
    pytest.param(
        GROUNDED,
        transcript(answer="Order A123 on flight HAT005 (ref ORD-1234) is confirmed."),
        PASS,
        "no numbers",
        id="grounded-pass-identifiers-skipped",
    ),
    pytest.param(
        GROUNDED,
        transcript(answer="Your 2nd bag travels on the 20th, within our 24-hour window."),
        PASS,
        "no numbers",
        id="grounded-pass-ordinals-and-compounds-skipped",
    ),
    pytest.param(
        GROUNDED,
        transcript(
            AMOUNT_40, answer="Next steps:\n1. I refund $40.\n 2) You wait.\n3.5 is a number."
        ),
        FAIL,
        "ungrounded 3.5 (",
        id="grounded-fail-list-markers-skipped-but-not-decimals",
    ),
    pytest.param(
        GROUNDED,
        transcript(answer="Upgrade to v1.2.3 or reach 10.0.0.1."),
        PASS,
        "no numbers",
        id="grounded-pass-dotted-runs-skipped",
    ),
    pytest.param(
        GROUNDED,
        transcript(
            tool_call("search", {"date": "2024-05-20"}, result="[]"),
            answer="No flights on May 20, 2024.",
        ),
        PASS,
        "",
        id="grounded-pass-date-parts",
    ),
    pytest.param(
        GROUNDED,
        transcript(
            tool_call("user", result='{"payment": "credit_card_7815826"}'),
            answer="Charged to the card ending 7815826.",
        ),
        PASS,
        "",
        id="grounded-pass-digits-of-evidence-ids",
    ),
    pytest.param(
        GROUNDED,
        transcript(tool_call("total", result='{"amount": 1e3}'), answer="That comes to 1,000."),
        PASS,
        "",
        id="grounded-pass-json-exponent-evidence",
    ),
    pytest.param(
        spec(type="grounded_numbers", allow=[7, 24.0]),
        transcript(answer="Refunds take 7 days; we answer within 24 hours."),
        PASS,
        "",
        id="grounded-pass-allow-list",
    ),
    pytest.param(
        GROUNDED,
        transcript(AMOUNT_40, answer="You will get $45 back."),
        FAIL,
        "ungrounded 45",
        id="grounded-fail-wrong-amount",
    ),
    pytest.param(
        GROUNDED,
        transcript(tool_call("split", result='{"share": 33.333}'), answer="Each pays 33.33."),
        FAIL,
        "ungrounded 33.33",
        id="grounded-fail-no-rounding",
    ),
    pytest.param(
        GROUNDED,
        transcript(AMOUNT_40, answer="Refund of $40 within 5-7 days, 12% fee."),
        FAIL,
        "ungrounded 5, 7, 12%",
        id="grounded-fail-lists-every-ungrounded-number",
    ),
    pytest.param(
        GROUNDED,
        transcript(
            tool_call("refund", {"id": "A1"}, result=None, error="upstream 503"),
            answer="Refund of $40.",
        ),
        FAIL,
        "ungrounded 40",
        id="grounded-fail-failed-call-is-not-missing-evidence",
    ),
    pytest.param(
        GROUNDED,
        transcript(answer=None),
        ERROR,
        "answer not captured",
        id="grounded-error-no-answer",
    ),
    pytest.param(
        GROUNDED,
        transcript(
            tool_call("lookup_order", {"order_id": "A1"}, result=None), answer="Refund of $40."
        ),
        ERROR,
        "tool results not captured; cannot ground 40",
        id="grounded-error-tool-results-not-captured",
    ),
    pytest.param(
        GROUNDED,
        transcript(user_input=None, answer="You asked for 2 tickets."),
        ERROR,
        "user input not captured",
        id="grounded-error-user-input-not-captured",
    ),
    pytest.param(
        GROUNDED,
        transcript(AMOUNT_40, answer="You will get $45 back.", truncated=True),
        ERROR,
        "trace truncated",
        id="grounded-error-truncated",
    ),
    pytest.param(
        GROUNDED,
        transcript(
            tool_call("lookup_order", None, result=None),
            user_input="Refund my $40",
            answer="Refund of $40.",
        ),
        PASS,
        "",
        id="grounded-pass-found-despite-uncaptured-results",
    ),
]


ALL_CASES = [
    *ALLOWLIST_CASES,
    *DENYLIST_CASES,
    *REQUIRED_CASES,
    *TOOL_ARGUMENTS_CASES,
    *MAX_TOOL_CALLS_CASES,
    *ANSWER_REGEX_CASES,
    *ANSWER_JSON_CASES,
    *LATENCY_CASES,
    *ERROR_SPAN_CASES,
    *GROUNDED_CASES,
    *MAX_TURNS_CASES,
]


@pytest.mark.parametrize(("check", "case", "outcome", "detail"), ALL_CASES)
def test_check(check: Any, case: Transcript, outcome: Outcome, detail: str) -> None:
    result = run_check(check, case)
    assert (result.outcome, result.name) == (outcome, check.name), result.detail
    assert detail in result.detail
    assert "\n" not in result.detail
    assert len(result.detail) <= 240


def test_every_check_type_has_pass_fail_and_error_cases() -> None:
    checks: list[Any] = [case.values[0] for case in ALL_CASES]
    seen = {(check.type, case.values[2]) for check, case in zip(checks, ALL_CASES, strict=True)}
    types = {check_type for check_type, _ in seen}
    assert types == set(REGISTERED)
    assert {(t, o) for t in types for o in (PASS, FAIL, ERROR)} <= seen


def test_allowlist_detail_is_exact() -> None:
    result = run_check(ALLOWLIST, transcript(tool_call("delete_account")))
    assert result.detail == "called delete_account"


def test_run_checks_keeps_rubric_order_names_and_gates() -> None:
    refund = rubric(
        id="refund-support",
        version="3",
        checks=[
            {"name": "fast_enough", "type": "max_latency_ms", "limit": 1000, "gate": False},
            {"name": "allowed_tools", "type": "tool_allowlist", "tools": ["lookup_order"]},
            {"name": "amount_grounded", "type": "grounded_numbers"},
        ],
    )
    results = run_checks(
        refund, transcript(tool_call("delete_account"), answer="$40", latency_ms=None)
    )
    assert [(r.name, r.outcome, r.gate) for r in results] == [
        ("fast_enough", ERROR, False),
        ("allowed_tools", FAIL, True),
        ("amount_grounded", FAIL, True),
    ]


def test_run_checks_without_checks_is_empty() -> None:
    assert run_checks(rubric(id="judge-only"), transcript()) == ()


@pytest.mark.parametrize(
    ("check", "case", "detail"),
    [
        pytest.param(
            # Built without validation, as a caller bypassing the rubric loader could.
            AnswerRegex.model_construct(
                name="bad",
                type="answer_regex",
                must_match="(",
                ignore_case=False,
                gate=True,
                must_not_match=None,
            ),
            transcript(),
            "check raised error",
            id="invalid-regex",
        ),
        pytest.param(
            # Refused by the rubric loader; built without validation, it still fetches nothing.
            ToolArguments.model_construct(
                name="tool_arguments",
                type="tool_arguments",
                tool="t",
                schema_={"$ref": "https://example.com/refund.json"},
                gate=True,
            ),
            transcript(tool_call("t", {"a": 1})),
            "check raised",
            id="unresolvable-schema-ref",
        ),
    ],
)
def test_a_check_that_raises_becomes_error(check: Any, case: Transcript, detail: str) -> None:
    result = run_check(check, case)
    assert result.outcome is ERROR
    assert detail in result.detail


def test_deeply_nested_arguments_do_not_crash() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    result = run_check(REFUND_ARGS, transcript(tool_call("issue_refund", deep)))
    assert result.outcome is FAIL
    assert "arguments are not JSON" in result.detail


@pytest.mark.parametrize(
    ("expected", "actual", "equal"),
    [
        pytest.param(40, 40.0, True, id="int-float"),
        pytest.param(40, "40", False, id="number-string"),
        pytest.param(True, 1, False, id="true-one"),
        pytest.param(False, False, True, id="bools"),
        pytest.param(None, None, True, id="nulls"),
        pytest.param(None, 0, False, id="null-zero"),
        pytest.param([1, {"a": [2.0]}], [1.0, {"a": [2]}], True, id="nested"),
        pytest.param([1, 2], [2, 1], False, id="list-order-matters"),
        pytest.param({"a": 1}, {"a": 1, "b": 2}, False, id="dict-extra-key"),
        pytest.param(datetime.date(2024, 5, 20), "2024-05-20", True, id="yaml-date"),
    ],
)
def test_json_equal(expected: object, actual: object, equal: bool) -> None:
    assert json_equal(expected, actual) is equal


# --- the registry: a check type left out anywhere fails here ----------------------------------

PACKAGE = Path(sidecar.__file__).resolve().parent
README = PACKAGE.parent / "README.md"


def _check_modules() -> list[ModuleType]:
    return [
        importlib.import_module(f"sidecar.evaluate.checks.{info.name}")
        for info in pkgutil.iter_modules(sidecar.evaluate.checks.__path__)
    ]


def test_registry_names_and_configs_are_unique() -> None:
    assert len(set(REGISTERED)) == len(CHECK_TYPES)
    assert len({t.config for t in CHECK_TYPES}) == len(CHECK_TYPES)


def test_every_declared_check_type_is_registered() -> None:
    declared = {
        id(value): value
        for module in _check_modules()
        for value in vars(module).values()
        if isinstance(value, CheckType)
    }
    assert sorted(t.name for t in declared.values()) == sorted(REGISTERED)
    assert set(declared) == {id(t) for t in CHECK_TYPES}


def test_every_check_config_model_belongs_to_a_registered_type() -> None:
    configs = {
        value
        for module in _check_modules()
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, CheckConfig)
        and value.__module__ == module.__name__
        and "type" in value.model_fields
    }
    assert configs == {t.config for t in CHECK_TYPES}


@pytest.mark.parametrize("check_type", CHECK_TYPES, ids=REGISTERED)
def test_a_check_type_is_one_declaration_in_its_family_module(check_type: CheckType[Any]) -> None:
    assert issubclass(check_type.config, CheckConfig)
    assert callable(check_type.evaluate)
    assert check_type.evaluate.__module__ == check_type.config.__module__
    assert check_type.inconclusive_if_truncated in (None, PASS, FAIL)


def test_the_declaration_leaves_nothing_to_a_default() -> None:
    # A default would let a new check type skip deciding what truncation does to it.
    assert all(
        f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        for f in dataclasses.fields(CheckType)
        if f.init
    )


def test_every_registered_type_is_in_the_rubric_schema() -> None:
    checks = Rubric.model_json_schema()["properties"]["checks"]["items"]
    assert list(checks["discriminator"]["mapping"]) == sorted(REGISTERED)


def test_the_readme_lists_every_check_type() -> None:
    text = README.read_text(encoding="utf-8")
    paragraph = text[text.index("Check types:") :].split("\n\n", 1)[0]
    listed = set(re.findall(r"`([a-z_]+)`", paragraph))
    assert set(REGISTERED) <= listed


def _string_constants(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


def test_no_module_but_its_own_names_a_check_type() -> None:
    """No string-keyed table of check types outside the declarations (derive it from CHECK_TYPES)."""
    home = {t.name: Path(inspect.getfile(t.config)).resolve() for t in CHECK_TYPES}
    strays = sorted(
        f"{path.relative_to(PACKAGE.parent)}: {name!r}"
        for path in PACKAGE.rglob("*.py")
        for name in _string_constants(path) & home.keys()
        if path.resolve() != home[name]
    )
    assert strays == []
