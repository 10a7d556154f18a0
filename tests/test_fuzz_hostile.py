"""Fuzz, round two: hostile names, label sources, long conversations, ids, slow clients.

- names with markup, ANSI escapes, forged log lines and surrogates go through
  the log formatters and the terminal printers: one line, nothing interpreted;
- label records with random rubrics, versions, models and criteria, and
  agent names up to 200 KB: the scrape stays bounded, the real window stays;
- conversations of random turns: each turn grounded as if its evidence were
  rebuilt (the old definition), with each text read a bounded number of times;
- ids in any letter case: one normal form, idempotent;
- random request bytes on the metrics port: an answer or a close, never a
  connection left held.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import logging

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import generate_latest
from rich.console import Console

from sidecar.adapters.http import MetricsServer
from sidecar.adapters.prometheus import MAX_LABEL_CHARS, Metrics, record_verdict
from sidecar.calibrate.review import ReviewTracker
from sidecar.calibrate.rolling import AgreementKey
from sidecar.engine.label_loop import LabelLoop
from sidecar.engine.traces import SelfPreferenceWarnings
from sidecar.evaluate.checks import grounding, run_check
from sidecar.evaluate.checks.grounding import GroundedNumbers
from sidecar.evaluate.pipeline import NO_JUDGE, Case
from sidecar.evaluate.sample import SampleDecision
from sidecar.evaluate.verdict import make_verdict
from sidecar.logs import JsonFormatter, TextFormatter
from sidecar.model import CheckResult, CriterionResult, Outcome, ToolCall, Transcript
from sidecar.terminal import plain, warning_line
from sidecar.text import MAX_KEPT_CHARS
from sidecar.wire._base import normal_id
from tests.builders import refund_rubric, tool_call, transcript
from tests.fuzz_strategies import FUZZ, hex_ids, hostile_names, label_values, texts

RUBRIC = refund_rubric()
CRITERION = "grounded"
_CONTROLS = {chr(c) for c in (*range(0x20), *range(0x7F, 0xA0))} - {"\n"}


def _record(message: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord("sidecar.x", logging.WARNING, __file__, 1, message, args, None)


@FUZZ
@given(hostile_names, hostile_names, hostile_names)
def test_a_hostile_name_stays_on_its_log_line(agent: str, model: str, conversation: str) -> None:
    record = _record("agent %s, model %s, conversation %s", agent, model, conversation)
    text = TextFormatter().format(record)
    assert "\n" not in text
    assert not _CONTROLS & set(text)
    line = JsonFormatter().format(record)
    assert "\n" not in line
    assert line.isascii()
    assert json.loads(line)["logger"] == "sidecar.x"


@FUZZ
@given(hostile_names)
def test_a_hostile_name_is_printed_literally(name: str) -> None:
    screen = io.StringIO()
    console = Console(file=screen, width=10_000, force_terminal=True, color_system=None)
    console.print(plain(name))
    console.print(warning_line(name))
    out = screen.getvalue()
    assert "\x1b" not in out
    assert "\r" not in out
    # The printable parts of the name are all there: nothing was read as markup.
    for part in ("[/]", "[bold]", "[link=http://x]"):
        assert out.count(part) >= name.count(part) * 2


_label_fields = st.fixed_dictionaries(
    {},
    optional={
        "rubric_id": label_values,
        "rubric_version": label_values,
        "judge_model": label_values,
        "criterion": label_values,
    },
)


@FUZZ
@given(st.lists(_label_fields, min_size=1, max_size=40))
def test_label_records_never_grow_the_scrape_or_evict_the_real_window(
    echoes: list[dict[str, str]],
) -> None:
    metrics = Metrics()
    tracker = ReviewTracker(max_keys=4, rubrics=[RUBRIC])
    loop = LabelLoop(tracker, metrics, "labels")
    base = {
        "criterion": CRITERION,
        "rater": "r",
        "label": "PASS",
        "rubric_id": RUBRIC.id,
        "rubric_version": RUBRIC.version,
        "judge_model": RUBRIC.judge_model,
        "judge_outcome": "FAIL",
    }
    loop.apply(json.dumps({**base, "trace_id": "0" * 32}).encode())
    for i, echo in enumerate(echoes, start=1):
        loop.apply(json.dumps({**base, **echo, "trace_id": f"{i:032x}"}).encode())
    key = AgreementKey(RUBRIC.id, RUBRIC.version, RUBRIC.judge_model, CRITERION)
    assert tracker.agreement.keys() == [key]
    assert len(generate_latest(metrics.registry)) < 200_000


@FUZZ
@given(st.lists(st.tuples(label_values, label_values, label_values), min_size=1, max_size=8))
def test_agent_and_model_values_are_bounded_label_values(
    names: list[tuple[str, str, str]],
) -> None:
    metrics = Metrics()
    warnings = SelfPreferenceWarnings(limit=5)
    for i, (agent, version, model) in enumerate(names):
        seen = transcript(
            trace_id=f"{i:032x}", agent_name=agent, agent_version=version, models=(model,)
        )
        verdict = make_verdict(
            seen,
            rubric_id=RUBRIC.id,
            rubric_version=RUBRIC.version,
            judge_model=RUBRIC.judge_model,
            checks=[CheckResult("c", Outcome.PASS)],
            criteria=[CriterionResult(CRITERION, Outcome.PASS)],
            judged=True,
            sample_reason="ratio",
        )
        record_verdict(metrics, verdict)
        warnings.note(Case(RUBRIC, seen, (), SampleDecision(True, "ratio"), NO_JUDGE))
    for family in metrics.registry.collect():
        for sample in family.samples:
            assert all(len(v) <= MAX_LABEL_CHARS for v in sample.labels.values())
    assert len(warnings) <= 5
    assert all(len(m) <= MAX_KEPT_CHARS for _, m in warnings._warned)


_NUMBERS = st.sampled_from(["40", "41", "5e3", "1.5k", "1,500", "7", "0x1F", "1_000", "12.50"])
_turn_texts = st.lists(_NUMBERS | texts, max_size=3).map(" ".join)
_maybe = st.none() | _turn_texts
turns_ = st.lists(st.tuples(_maybe, _maybe, _maybe, _maybe, st.booleans()), min_size=1, max_size=12)


def _rebuilt(turns: tuple[Transcript, ...], k: int) -> Transcript:
    """Turn k's evidence rebuilt from every earlier turn (the definition, quadratic)."""
    earlier = tuple(
        ToolCall(name=f"(user input of turn {i + 1})", arguments="{}", result=t.user_input)
        for i, t in enumerate(turns[:k])
    )
    calls = tuple(c for t in turns[: k + 1] for c in t.tool_calls)
    return dataclasses.replace(turns[k], tool_calls=(*earlier, *calls), turns=())


@FUZZ
@given(turns_, st.lists(st.floats(0, 100), max_size=2))
def test_each_turn_grounds_as_its_rebuilt_evidence_does(
    spec_turns: list[tuple[str | None, str | None, str | None, str | None, bool]],
    allow: list[float],
) -> None:
    spec = GroundedNumbers(name="g", type="grounded_numbers", allow=allow)
    turns = tuple(
        transcript(
            tool_call("t", arguments, result),
            trace_id=f"{k:032x}",
            user_input=user_input,
            answer=answer,
            truncated=truncated,
        )
        for k, (arguments, result, user_input, answer, truncated) in enumerate(spec_turns)
    )
    per_turn = grounding.TurnGrounding(spec)
    for k, turn in enumerate(turns):
        expected = run_check(spec, _rebuilt(turns, k))
        found = per_turn.turn(turn)
        if turn.truncated and found.outcome is Outcome.FAIL:
            found = dataclasses.replace(found, outcome=Outcome.ERROR)
        assert found.outcome == expected.outcome, (k, found, expected)
    # Each evidence text read once, whatever the number of turns.
    assert per_turn.evidence.texts_read <= 3 * len(turns)
    assert per_turn.evidence.texts_read_in_full <= per_turn.evidence.texts_read


@FUZZ
@given(hex_ids)
def test_ids_have_one_normal_form(spelled: str) -> None:
    normal = normal_id(spelled)
    assert normal == spelled.strip().lower()
    assert normal_id(normal) == normal
    assert normal_id(spelled.upper()) == normal


@FUZZ
@given(st.lists(st.binary(max_size=300), min_size=1, max_size=4))
def test_random_requests_get_an_answer_or_a_close(requests: list[bytes]) -> None:
    async def scenario() -> None:
        server = MetricsServer(
            Metrics().registry, lambda: (True, "ok"), "127.0.0.1", 0, request_timeout_s=0.5
        )
        await server.start()
        try:
            for payload in requests:
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                writer.write(payload)
                writer.write_eof()
                try:
                    answer = await asyncio.wait_for(reader.read(), 3)
                except ConnectionError:
                    answer = b""
                writer.close()
                assert answer == b"" or answer.startswith(b"HTTP/1.1 ")
            for _ in range(100):
                if server.connections == 0:
                    break
                await asyncio.sleep(0.01)
            assert server.connections == 0
        finally:
            await server.stop()

    asyncio.run(scenario())
