"""tau2-bench airline tasks as traces, through the pure pipeline (``plan`` and ``conclude``).

For a few tasks with several expected actions, an OTel GenAI trace whose tool
calls are the task's actions (names and arguments as JSON) must be
acceptable under a rubric that requires those actions in order; traces that
leave one out, get an argument wrong or swap two must be unacceptable, and
the failing check must name the call that is missing. ``tests/test_tau2.py``
covers the check on transcripts; this file starts from spans.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sidecar.evaluate.pipeline import conclude, plan
from sidecar.evaluate.rubric import Rubric
from sidecar.evaluate.sample import Sampler
from sidecar.evaluate.verdict import Verdict
from sidecar.model import CheckResult, Outcome, Trace
from tests.builders import ToolSpec, criterion, genai_trace, judge_block, rubric

# Tasks with 3 to 5 actions: repeated tool names with different arguments
# (2, 12), nested arguments (7, 8), reads and writes mixed.
TASK_IDS = ("2", "7", "8", "12")
CHECK = "expected_actions"
AGENT = "airline-agent"

Action = dict[str, Any]
# Turns the task's actions into the calls the agent made, and says which
# expected action (index) the check must report as missing, if any.
Variant = Callable[[list[Action]], tuple[list[Action], int | None]]


@pytest.fixture(scope="module")
def tasks(shared_data: Path) -> dict[str, dict[str, Any]]:
    data = json.loads((shared_data / "tau2_airline_tasks.json").read_text(encoding="utf-8"))
    return {task["id"]: task for task in data}


def actions_of(task: dict[str, Any]) -> list[Action]:
    return [
        {"name": a["name"], "arguments": a["arguments"]}
        for a in task["evaluation_criteria"]["actions"]
    ]


def task_rubric(task: dict[str, Any]) -> Rubric:
    return rubric(
        id=f"tau2-airline-{task['id']}",
        applies_to={"service.name": AGENT},
        checks=[
            {
                "name": CHECK,
                "type": "required_tool_calls",
                "order": "in_order",
                "calls": actions_of(task),
            }
        ],
        # A judge the sampler may not use: its criteria must come out SKIPPED.
        judge=judge_block(
            criterion(
                "follows_policy",
                definition="The agent follows the airline policy.",
                pass_example="Cancels only what was asked.",
                fail_example="Cancels another reservation too.",
            ),
            instructions="Grade the airline agent.",
        ),
    )


def trace_of(task: dict[str, Any], calls: list[Action], **options: Any) -> Trace:
    tool_calls: list[ToolSpec] = [
        (c["name"], c["arguments"], json.dumps({"status": "ok", "tool": c["name"]})) for c in calls
    ]
    instructions = task["user_scenario"]["instructions"]
    return genai_trace(
        f"{instructions['known_info']} {instructions['reason_for_call']}",
        tool_calls,
        "Done; anything else?",
        agent=AGENT,
        agent_version="2.0.1",
        **options,
    )


def evaluate(trace: Trace, rubric: Rubric) -> Verdict:
    _, cases = plan(trace, [rubric], Sampler(judge_enabled=False), now=0.0)
    (case,) = cases
    return conclude(case, None)


def the_check(verdict: Verdict) -> CheckResult:
    (check,) = [c for c in verdict.checks if c.name == CHECK]
    return check


# --- variants ---------------------------------------------------------------------------


def as_expected(actions: list[Action]) -> tuple[list[Action], int | None]:
    return actions, None


def with_other_calls_between(actions: list[Action]) -> tuple[list[Action], int | None]:
    # Extra calls do not break an in-order expectation (it is a subsequence).
    extra = {"name": "calculate", "arguments": {"expression": "1 + 1"}}
    calls: list[Action] = [extra]
    for action in actions:
        calls += [action, extra]
    return calls, None


def missing_first(actions: list[Action]) -> tuple[list[Action], int | None]:
    return actions[1:], 0


def missing_last(actions: list[Action]) -> tuple[list[Action], int | None]:
    return actions[:-1], len(actions) - 1


def wrong_argument(actions: list[Action]) -> tuple[list[Action], int | None]:
    index = len(actions) // 2
    calls = copy.deepcopy(actions)
    arguments = calls[index]["arguments"]
    key = next(k for k, v in arguments.items() if isinstance(v, str))
    arguments[key] += "X"
    return calls, index


def wrong_nested_argument(actions: list[Action]) -> tuple[list[Action], int | None]:
    # A nested value (a flight's date, a passenger's birth date) differs.
    calls = copy.deepcopy(actions)
    for index, call in enumerate(calls):
        for value in call["arguments"].values():
            if isinstance(value, list) and value and isinstance(value[0], dict):
                key = next(k for k, v in value[0].items() if isinstance(v, str))
                value[0][key] += "X"
                return calls, index
    raise AssertionError("no action with a list of objects among its arguments")


def swapped(actions: list[Action]) -> tuple[list[Action], int | None]:
    # The first two happen the other way round: the second one now comes too early.
    return [actions[1], actions[0], *actions[2:]], 1


VARIANTS: list[tuple[str, Variant, tuple[str, ...]]] = [
    ("as-expected", as_expected, TASK_IDS),
    ("other-calls-between", with_other_calls_between, TASK_IDS),
    ("missing-first", missing_first, TASK_IDS),
    ("missing-last", missing_last, TASK_IDS),
    ("wrong-argument", wrong_argument, TASK_IDS),
    ("wrong-nested-argument", wrong_nested_argument, ("7", "8")),
    ("wrong-order", swapped, TASK_IDS),
]
CASES = [
    pytest.param(task_id, variant, make_calls, id=f"task-{task_id}-{variant}")
    for variant, make_calls, task_ids in VARIANTS
    for task_id in task_ids
]


@pytest.mark.parametrize(("task_id", "variant", "make_calls"), CASES)
def test_expected_actions_decide_the_outcome(
    task_id: str, variant: str, make_calls: Variant, tasks: dict[str, dict[str, Any]]
) -> None:
    task = tasks[task_id]
    actions = actions_of(task)
    assert len(actions) >= 3
    assert len({json.dumps(a, sort_keys=True) for a in actions}) == len(actions)
    calls, missing = make_calls(actions)

    verdict = evaluate(trace_of(task, calls), task_rubric(task))
    check = the_check(verdict)

    assert verdict.judged is False
    assert verdict.sample_reason == "judge_disabled"
    assert [(c.name, c.outcome) for c in verdict.criteria] == [("follows_policy", Outcome.SKIPPED)]
    if missing is None:
        assert (verdict.outcome.value, check.outcome) == ("acceptable", Outcome.PASS)
        assert check.detail == f"{len(actions)} expected calls found in order"
        return
    assert (verdict.outcome.value, check.outcome) == ("unacceptable", Outcome.FAIL)
    expected = actions[missing]
    assert check.detail.startswith(f"missing {expected['name']} {{"), check.detail
    first_key, first_value = next(iter(expected["arguments"].items()))
    assert f'"{first_key}": {json.dumps(first_value)}'[:40] in check.detail
    if variant == "wrong-order":
        assert check.detail.endswith("(a fitting call comes too early)")


@pytest.mark.parametrize("task_id", TASK_IDS, ids=[f"task-{t}" for t in TASK_IDS])
def test_arguments_recorded_as_otlp_values_count_the_same(
    task_id: str, tasks: dict[str, dict[str, Any]]
) -> None:
    # Arguments as OTLP kvlist/array values instead of JSON strings.
    task = tasks[task_id]
    trace = trace_of(task, actions_of(task), structured=True)
    verdict = evaluate(trace, task_rubric(task))
    assert (verdict.outcome.value, the_check(verdict).outcome) == ("acceptable", Outcome.PASS)


@pytest.mark.parametrize("task_id", TASK_IDS, ids=[f"task-{t}" for t in TASK_IDS])
def test_without_captured_arguments_the_check_cannot_decide(
    task_id: str, tasks: dict[str, dict[str, Any]]
) -> None:
    # Content capture off: right names in the right order prove nothing about arguments.
    task = tasks[task_id]
    trace = trace_of(task, actions_of(task), capture_content=False)
    verdict = evaluate(trace, task_rubric(task))
    check = the_check(verdict)
    assert (verdict.outcome.value, check.outcome) == ("errored", Outcome.ERROR)
    first = actions_of(task)[0]
    assert check.detail.startswith(f"cannot tell if {first['name']} {{")
    assert check.detail.endswith("was made: arguments not captured")


@pytest.mark.parametrize("task_id", TASK_IDS, ids=[f"task-{t}" for t in TASK_IDS])
def test_trace_carries_the_actions(task_id: str, tasks: dict[str, dict[str, Any]]) -> None:
    task = tasks[task_id]
    actions = actions_of(task)
    transcript, cases = plan(
        trace_of(task, actions), [task_rubric(task)], Sampler(judge_enabled=False), 0.0
    )
    assert len(cases) == 1
    assert transcript.agent_name == AGENT
    assert [(c.name, json.loads(c.arguments or "null")) for c in transcript.tool_calls] == [
        (a["name"], a["arguments"]) for a in actions
    ]
