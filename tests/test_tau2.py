"""The deterministic checks against real expectations: tau2-bench's airline tasks.

Each task lists the tool calls a correct agent makes (name and arguments).
These tests show that ``required_tool_calls`` can state every task's
expectations, that transcripts doing the right thing pass and that the
usual ways of getting it wrong fail. They also hold the airline rubric in
``rubrics/`` to the same data.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from sidecar.evaluate.checks import run_check, run_checks
from sidecar.evaluate.checks.required import RequiredToolCalls
from sidecar.evaluate.checks.tools import ToolDenylist
from sidecar.evaluate.rubric import Rubric, load_rubric
from sidecar.model import Outcome, Transcript
from tests.builders import tool_call, transcript

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TASKS_FILE = DATA / "tau2_airline_tasks.json"
AIRLINE_RUBRIC = Path(__file__).resolve().parents[1] / "rubrics" / "airline-booking.yaml"

pytestmark = pytest.mark.skipif(
    not TASKS_FILE.is_file(),
    reason=f"tau2 airline tasks not found at {TASKS_FILE} (shared test data is not in the repo)",
)

# tau2's airline tools that change the booking database.
WRITE_TOOLS = [
    "book_reservation",
    "cancel_reservation",
    "update_reservation_flights",
    "update_reservation_baggages",
    "update_reservation_passengers",
    "send_certificate",
]


@cache
def _tasks() -> dict[str, dict[str, Any]]:
    if not TASKS_FILE.is_file():
        return {}
    tasks = json.loads(TASKS_FILE.read_text(encoding="utf-8"))
    return {task["id"]: task for task in tasks}


def _actions(task_id: str) -> list[dict[str, Any]]:
    return list(_tasks()[task_id]["evaluation_criteria"]["actions"] or [])


def _expected_arguments(action: dict[str, Any]) -> dict[str, Any]:
    # tau2 compares only `compare_args` when given (an empty list: the name alone).
    compare = action.get("compare_args")
    arguments: dict[str, Any] = action["arguments"]
    if compare is None:
        return arguments
    return {key: arguments[key] for key in compare}


def expectation(task_id: str, order: str = "in_order") -> RequiredToolCalls:
    """The task's expected actions as a rubric check, validated like a rubric file."""
    return RequiredToolCalls.model_validate(
        {
            "name": f"tau2_airline_{task_id}",
            "type": "required_tool_calls",
            "order": order,
            "calls": [
                {"name": a["name"], "arguments": _expected_arguments(a)} for a in _actions(task_id)
            ],
        }
    )


def replay(calls: Sequence[tuple[str, dict[str, Any] | None]]) -> Transcript:
    return transcript(
        *(
            tool_call(name, arguments, '{"status": "ok"}', call_id=f"call_{number}")
            for number, (name, arguments) in enumerate(calls)
        ),
        agent_name="airline-agent",
        user_input="I need help with my reservation.",
        answer="All set.",
        latency_ms=2500.0,
    )


def as_done(task_id: str) -> list[tuple[str, dict[str, Any] | None]]:
    """The expected actions, performed exactly."""
    return [(a["name"], copy.deepcopy(a["arguments"])) for a in _actions(task_id)]


def _floats(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, dict):
        return {k: _floats(v) for k, v in reversed(value.items())}
    if isinstance(value, list):
        return [_floats(v) for v in value]
    return value


def test_the_data_set_is_the_one_we_expect() -> None:
    tasks = _tasks()
    assert len(tasks) == 50
    assert sum(1 for t in tasks if _actions(t)) == 43


@pytest.mark.parametrize("task_id", [pytest.param(t, id=f"task-{t}") for t in _tasks()])
def test_every_task_is_expressible(task_id: str) -> None:
    if _actions(task_id):
        check = expectation(task_id)
        assert len(check.calls) == len(_actions(task_id))
        result = run_check(check, replay(as_done(task_id)))
        assert result.outcome is Outcome.PASS, result.detail
    else:
        # No expected action means the database must not change: no write at all.
        check_no_write = ToolDenylist.model_validate(
            {"name": "no_writes", "type": "tool_denylist", "tools": WRITE_TOOLS}
        )
        reads = replay([("get_user_details", {"user_id": "emma_kim_9957"})])
        assert run_check(check_no_write, reads).outcome is Outcome.PASS
        writes = replay([("cancel_reservation", {"reservation_id": "EHGLP3"})])
        assert run_check(check_no_write, writes).outcome is Outcome.FAIL


# Tasks with several actions, mixing reads, nested write arguments and repeats.
SEVERAL = ["7", "8", "12", "23", "33", "39"]


@pytest.mark.parametrize("task_id", [pytest.param(t, id=f"task-{t}") for t in SEVERAL])
def test_right_calls_among_other_calls_pass(task_id: str) -> None:
    """Extra lookups in between, keys in another order and 2 written as 2.0 still pass."""
    calls: list[tuple[str, dict[str, Any] | None]] = [("list_all_airports", {})]
    for name, arguments in as_done(task_id):
        calls += [(name, _floats(arguments)), ("get_flight_status", {"flight_number": "HAT001"})]
    result = run_check(expectation(task_id), replay(calls))
    assert result.outcome is Outcome.PASS, result.detail


@pytest.mark.parametrize(
    ("task_id", "drop"),
    [
        pytest.param("7", 4, id="task-7-second-cancellation-missing"),
        pytest.param("8", 3, id="task-8-booking-missing"),
        pytest.param("12", 4, id="task-12-bag-update-missing"),
        pytest.param("23", 0, id="task-23-cancellation-missing"),
        pytest.param("39", 9, id="task-39-one-of-three-cancellations-missing"),
    ],
)
def test_missing_action_fails(task_id: str, drop: int) -> None:
    calls = as_done(task_id)
    del calls[drop]
    result = run_check(expectation(task_id), replay(calls))
    assert result.outcome is Outcome.FAIL
    assert result.detail.startswith(f"missing {_actions(task_id)[drop]['name']}")


@pytest.mark.parametrize(
    ("task_id", "action", "path", "value"),
    [
        pytest.param("7", 4, ("reservation_id",), "59XX6X", id="task-7-wrong-reservation"),
        pytest.param(
            "8", 3, ("payment_methods", 0, "amount"), 349, id="task-8-wrong-payment-amount"
        ),
        pytest.param("12", 4, ("total_baggages",), 3, id="task-12-wrong-bag-count"),
        pytest.param(
            "23", 2, ("passengers", 0, "dob"), "1986-12-09", id="task-23-wrong-passenger-dob"
        ),
        pytest.param("33", 3, ("flights", 1, "date"), "2024-05-24", id="task-33-wrong-return-date"),
    ],
)
def test_wrong_argument_value_fails(
    task_id: str, action: int, path: tuple[str | int, ...], value: object
) -> None:
    calls = as_done(task_id)
    target: Any = calls[action][1]
    for step in path[:-1]:
        target = target[step]
    assert target[path[-1]] != value
    target[path[-1]] = value
    result = run_check(expectation(task_id), replay(calls))
    assert result.outcome is Outcome.FAIL
    assert result.detail.startswith(f"missing {_actions(task_id)[action]['name']}")


@pytest.mark.parametrize("task_id", [pytest.param(t, id=f"task-{t}") for t in SEVERAL])
def test_wrong_order_fails_in_order_and_passes_any_order(task_id: str) -> None:
    calls = list(reversed(as_done(task_id)))
    in_order = run_check(expectation(task_id, "in_order"), replay(calls))
    any_order = run_check(expectation(task_id, "any_order"), replay(calls))
    assert (in_order.outcome, any_order.outcome) == (Outcome.FAIL, Outcome.PASS)
    assert "in order" in in_order.detail


def test_arguments_not_captured_is_error_not_fail() -> None:
    calls = [(name, None) for name, _ in as_done("12")]
    result = run_check(expectation("12"), replay(calls))
    assert result.outcome is Outcome.ERROR
    assert "arguments not captured" in result.detail


def test_compare_args_empty_means_name_alone() -> None:
    # Task 13 expects a transfer to a human; tau2 does not compare its summary.
    check = expectation("13")
    assert [(c.name, c.arguments) for c in check.calls] == [("transfer_to_human_agents", {})]
    said_differently = replay([("transfer_to_human_agents", {"summary": "Wants LAS, not LAX."})])
    assert run_check(check, said_differently).outcome is Outcome.PASS


# --- the airline rubric, held to the same data -----------------------------------


@pytest.fixture(scope="module")
def airline() -> Rubric:
    return load_rubric(AIRLINE_RUBRIC)


def _check(rubric: Rubric, name: str) -> Any:
    return next(c for c in rubric.checks if c.name == name)


def test_airline_rubric_accepts_every_expected_write(airline: Rubric) -> None:
    writes = [
        (task_id, name, arguments)
        for task_id in _tasks()
        for name, arguments in as_done(task_id)
        if name in {"book_reservation", "cancel_reservation"}
    ]
    assert len(writes) == 21
    checks = {"book_reservation": "booking_args", "cancel_reservation": "cancel_args"}
    for task_id, name, arguments in writes:
        result = run_check(_check(airline, checks[name]), replay([(name, arguments)]))
        assert result.outcome is Outcome.PASS, f"task {task_id}: {result.detail}"


@pytest.mark.parametrize("task_id", [pytest.param(t, id=f"task-{t}") for t in _tasks()])
def test_airline_rubric_gates_pass_on_the_expected_actions(airline: Rubric, task_id: str) -> None:
    results = run_checks(airline, replay(as_done(task_id)))
    failing = [r for r in results if r.gate and r.outcome is not Outcome.PASS]
    assert failing == []


def _booking(task_id: str = "23", action: int = 1) -> dict[str, Any]:
    arguments = as_done(task_id)[action][1]
    assert arguments is not None
    return arguments


def _with(change: dict[str, Any]) -> dict[str, Any]:
    return {**_booking(), **change}


@pytest.mark.parametrize(
    ("arguments", "detail"),
    [
        pytest.param(
            _with(
                {
                    "payment_methods": [
                        {"payment_id": "certificate_1", "amount": 100},
                        {"payment_id": "certificate_2", "amount": 100},
                    ]
                }
            ),
            "$.payment_methods",
            id="two-certificates",
        ),
        pytest.param(
            _with(
                {
                    "payment_methods": [
                        {"payment_id": f"gift_card_{n}", "amount": 10} for n in range(4)
                    ]
                }
            ),
            "$.payment_methods",
            id="four-gift-cards",
        ),
        pytest.param(
            _with({"passengers": [{"first_name": "A", "last_name": "B", "dob": "1990-01-01"}] * 6}),
            "$.passengers",
            id="six-passengers",
        ),
        pytest.param(_with({"insurance": True}), "$.insurance", id="insurance-as-boolean"),
        pytest.param(_with({"cabin": "first"}), "$.cabin", id="unknown-cabin"),
        pytest.param(
            _with({"flights": [{"flight_number": "HAT023", "date": "2024-02-30"}]}),
            "$.flights[0].date",
            id="impossible-date",
        ),
    ]
    if _tasks()
    else [],
)
def test_airline_rubric_rejects_bookings_against_policy(
    airline: Rubric, arguments: dict[str, Any], detail: str
) -> None:
    result = run_check(_check(airline, "booking_args"), replay([("book_reservation", arguments)]))
    assert result.outcome is Outcome.FAIL
    assert detail in result.detail
