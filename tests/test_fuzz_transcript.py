"""Fuzz: building a transcript never raises, for every convention, whatever the spans hold.

Each registered convention (``sidecar.evaluate.conventions.CONVENTIONS``) has here the
span names, scopes and attribute keys its reader looks at; the spans get
random, deep, huge and ill-typed values under those keys, random parent
links (missing, cyclic, duplicated ids) and random times (reversed, zero,
2**64 - 1). Contract: a ``Transcript`` of well-typed fields, flags that say
what could not be read, within the per-example deadline. A test fails when a
convention is registered without a strategy here.
"""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from sidecar.evaluate.conventions import ALL_CONVENTIONS
from sidecar.evaluate.transcript import build_transcript
from sidecar.model import (
    DecideReason,
    Flag,
    Trace,
    Transcript,
)
from tests.fuzz_shapes import CONVENTION_SHAPES, spans_of, traces
from tests.fuzz_strategies import FUZZ


# What each convention's reader looks at: span names, scope names, attribute keys.
def test_every_convention_has_a_fuzz_strategy() -> None:
    assert set(CONVENTION_SHAPES) == set(ALL_CONVENTIONS)


def check_contract(transcript: Transcript, trace: Trace) -> None:
    assert transcript.trace_id == trace.trace_id
    for text in (
        transcript.user_input,
        transcript.answer,
        transcript.agent_name,
        transcript.reference,
    ):
        assert text is None or isinstance(text, str)
    for call in transcript.tool_calls:
        assert isinstance(call.name, str)
        for text in (call.arguments, call.result, call.error):
            assert text is None or isinstance(text, str)
    if transcript.latency_ms is not None:
        assert math.isfinite(transcript.latency_ms)
        assert transcript.latency_ms >= 0
    assert isinstance(transcript.input_tokens, int)
    assert set(transcript.flags) <= set(Flag)
    if Flag.INCOMPLETE in transcript.flags:
        assert transcript.answer is None
        assert transcript.latency_ms is None
    if trace.truncated or trace.partial:
        assert transcript.truncated


@FUZZ
@given(traces())
def test_transcripts_of_hostile_traces(trace: Trace) -> None:
    check_contract(build_transcript(trace, untrusted_tools=("lookup",)), trace)


@FUZZ
@given(st.sampled_from(sorted(CONVENTION_SHAPES)), st.data())
def test_transcripts_of_one_convention(convention: str, data: st.DataObject) -> None:
    spans = tuple(data.draw(spans_of(convention)) for _ in range(data.draw(st.integers(1, 4))))
    trace = Trace("5b8efff798038103d269b633813fc60c", spans, DecideReason.COMPLETE)
    check_contract(build_transcript(trace), trace)
