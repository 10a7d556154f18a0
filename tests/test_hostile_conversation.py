"""Long conversations: grounding linear in the conversation's size, planning off the loop.

``grounded_numbers`` grounds turn *k*'s answer in what was known up to turn *k*.
Rebuilding that evidence per turn read every earlier text again: the work grew
with the square of the number of turns (1,000/2,000/3,000 turns took
8/28/72 s). The counts here are of the texts folded (every text read goes
through ``_fold`` once per reading), so they measure the work without a clock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import pytest

from sidecar.adapters.prometheus import Metrics
from sidecar.conversation import evaluate, turn_builder
from sidecar.engine.offload import PlanThread
from sidecar.engine.replica import Service
from sidecar.evaluate import transcript as transcript_module
from sidecar.evaluate.checks import grounding, run_check
from sidecar.evaluate.checks.grounding import GroundedNumbers
from sidecar.model import Outcome, ToolCall, Transcript
from tests.builders import rubric, tool_call, transcript
from tests.conversation_builders import (
    both_stages_round,
    conversation_rubric,
    refund_checks,
    refund_conversation,
    rig_settings,
)
from tests.fakes import MemorySink, MemorySource, MemoryTopic, MemoryTurns
from tests.otlp_records import record
from tests.service_rig import ManualClock

SPEC = {"name": "amount_grounded", "type": "grounded_numbers", "gate": True}
RUBRIC = rubric(checks=[SPEC])


def conversation(turns: int, *, answer: Callable[[int], str] | None = None) -> Transcript:
    """``turns`` turns, each looking up an order and stating an amount from an earlier turn."""
    said = answer or (lambda k: f"Order {k} cost ${max(k - 3, 0)}.50, as before.")
    items = tuple(
        transcript(
            tool_call("lookup", {"order": k}, f'{{"amount": "{k}.50"}}'),
            trace_id=f"{k:032x}",
            user_input=f"And order {k}?",
            answer=said(k),
        )
        for k in range(turns)
    )
    return dataclasses.replace(items[-1], turns=items)


def folds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    real = grounding._fold

    def counted(text: str) -> str:
        calls[0] += 1
        return real(text)

    monkeypatch.setattr(grounding, "_fold", counted)
    return calls


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(None, id="grounded-by-digit-runs"),
        # A scaled amount needs the whole evidence read (every form, JSON): the slow path.
        pytest.param(lambda k: f"About {k / 1000:.3f}k was refunded.", id="whole-evidence"),
    ],
)
def test_grounding_work_grows_linearly_with_the_turns(
    monkeypatch: pytest.MonkeyPatch, answer: Callable[[int], str] | None
) -> None:
    calls = folds(monkeypatch)
    ordered = [0]  # numbers put in order, for the ranges of abbreviated amounts

    def counted_sorted(values: list[Any]) -> list[Any]:
        ordered[0] += len(values)
        return sorted(values)

    monkeypatch.setattr(grounding, "sorted", counted_sorted, raising=False)
    counts, sorts = [], []
    for turns in (1000, 2000):
        calls[0] = ordered[0] = 0
        [result] = evaluate.conversation_checks(RUBRIC, conversation(turns, answer=answer))
        assert result.outcome in (Outcome.PASS, Outcome.FAIL, Outcome.ERROR)
        counts.append(calls[0])
        sorts.append(ordered[0])
    # Linear: twice the turns, about twice the reads (quadratic would be four times).
    assert counts[1] <= 2.2 * counts[0], counts
    assert counts[1] < 10 * 2000  # a few reads per turn, never one per earlier text
    # The numbers are kept in order as they come (n log n), never sorted again per turn.
    assert sorts[1] <= 2.5 * max(sorts[0], 1), sorts
    assert sorts[1] < 100 * 2000, sorts


def _old_turn_evidence(turns: tuple[Transcript, ...], k: int) -> Transcript:
    """The per-turn evidence as it was defined: a transcript of turn k and all before it."""
    earlier = tuple(
        ToolCall(name=f"(user input of turn {i + 1})", arguments="{}", result=t.user_input)
        for i, t in enumerate(turns[:k])
    )
    calls = tuple(c for t in turns[: k + 1] for c in t.tool_calls)
    return dataclasses.replace(turns[k], tool_calls=(*earlier, *calls), turns=())


CASES: list[Any] = [
    pytest.param([("40", "It costs 40.", "Price?")], id="grounded"),
    pytest.param([("40", "It costs 41.", "Price?")], id="ungrounded"),
    pytest.param([("40", "ok", "Price 7?"), (None, "7 it is.", "Go")], id="earlier-input"),
    pytest.param([("40", "ok", None), ("3", "9 it is.", "Go")], id="earlier-input-missing"),
    pytest.param([(None, "ok", "x"), ("3", "9 it is.", "Go")], id="earlier-result-missing"),
    pytest.param([("4", "ok", "x"), ("3", "5e3 dollars", "Go")], id="unreadable"),
    pytest.param([("5e3", "ok", "x"), ("3", "5e3 dollars", "Go")], id="unreadable-as-written"),
    pytest.param([("1500", "ok", "x"), ("3", "About 1.5k.", None)], id="scaled-input-missing"),
]


@pytest.mark.parametrize("spec_turns", CASES)
def test_each_turn_is_grounded_as_before(
    spec_turns: list[tuple[str | None, str, str | None]],
) -> None:
    spec = GroundedNumbers.model_validate(SPEC)
    turns = tuple(
        transcript(
            tool_call("t", "{}", result),
            trace_id=f"{k:032x}",
            user_input=user_input,
            answer=answer,
        )
        for k, (result, answer, user_input) in enumerate(spec_turns)
    )
    grounding_ = grounding.TurnGrounding(spec)
    for k, turn in enumerate(turns):
        expected = run_check(spec, _old_turn_evidence(turns, k))
        found = grounding_.turn(turn)
        assert (found.outcome, found.detail) == (expected.outcome, expected.detail)


async def test_conversations_are_planned_and_turns_read_off_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every span reading (transcripts and turn records) and every turn's grounding
    # happens on the planning thread, never on the thread running the event loop.
    loop_thread = threading.current_thread()
    where: dict[str, set[str]] = {"read_span": set(), "grounding": set()}
    real_read = transcript_module.read_span  # type: ignore[attr-defined]
    real_turn = grounding.TurnGrounding.turn

    def read_span(*args: Any) -> Any:
        where["read_span"].add(threading.current_thread().name)
        return real_read(*args)

    def turn(self: grounding.TurnGrounding, t: Transcript) -> Any:
        where["grounding"].add(threading.current_thread().name)
        return real_turn(self, t)

    monkeypatch.setattr(transcript_module, "read_span", read_span)
    monkeypatch.setattr(turn_builder, "read_span", read_span)
    monkeypatch.setattr(grounding.TurnGrounding, "turn", turn)

    spans, turns = MemoryTopic(partitions=1), MemoryTopic(partitions=1, name="eval_turns")
    clock = ManualClock()
    sink = MemorySink(turns=MemoryTurns(turns))
    plan_thread = PlanThread()
    service = Service(
        rig_settings(),
        [conversation_rubric(checks=refund_checks(), conversation={"idle_timeout_s": 60.0})],
        telemetry=Metrics(),
        source=lambda: MemorySource(spans),
        sink=lambda: sink,
        turn_source=lambda: MemorySource(turns),
        clock=clock,
        sleep=clock.sleep,
        offload=plan_thread,
    )
    await service.start()
    try:
        for trace in refund_conversation("c", 0, gap_s=20):
            spans.append(0, record(trace.spans), trace.trace_id.encode())
        for advance in (0.0, 2.0, 0.0, 60.0, 0.0, 0.0):
            for _ in range(50):  # the planning thread runs in real time
                await both_stages_round(service, clock, advance)
                advance = 0.0
                await asyncio.sleep(0.01)
                if any(b'"scope":"conversation"' in v for _, v in sink.verdicts):
                    break
        assert any(b'"scope":"conversation"' in v for _, v in sink.verdicts)
    finally:
        await service.close()
        plan_thread.close()
    assert where["read_span"]
    assert where["grounding"]
    assert loop_thread.name not in where["read_span"] | where["grounding"], where
