"""Fuzz: the service turns any records into verdicts or counted rejections, and moves on.

Batches of records (well-formed traces of every convention with hostile
values, hostile OTLP/JSON, random bytes) go through the real service on the
in-memory broker with a manual clock. Contract: every record is counted as
read or dead-lettered with a reason; once time has passed, every trace that
was read has exactly one verdict record (well-formed JSON, a valid outcome);
the offsets are committed past every record; nothing raises.
"""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from sidecar.errors import DecodeError
from sidecar.evaluate.rubric import Rubric
from sidecar.ingest.decode import decode
from sidecar.wire.verdicts import VerdictRecord
from tests.fakes import MemoryTopic
from tests.fuzz_shapes import CONVENTION_SHAPES, otlp_json_records, spans_of
from tests.fuzz_strategies import FUZZ, embeddable
from tests.otlp_records import record
from tests.service_rig import make_rig, quiesce

RUBRIC = Rubric.model_validate(
    {
        "id": "all",
        "version": "1",
        "checks": [
            {"name": "clean", "type": "no_error_spans"},
            {"name": "fast", "type": "max_latency_ms", "limit": 1000},
            {"name": "grounded", "type": "grounded_numbers"},
            {"name": "calls", "type": "max_tool_calls", "limit": 3},
            {"name": "json", "type": "answer_json_schema", "schema": {"type": "object"}},
        ],
    }
)
TRACE_IDS = st.sampled_from([f"{n:032x}" for n in (1, 2, 3)])
OUTCOMES = {"acceptable", "unacceptable", "errored"}


@st.composite
def trace_records(draw: st.DrawFn) -> bytes:
    convention = draw(st.sampled_from(sorted(CONVENTION_SHAPES)))
    spans = draw(st.lists(spans_of(convention, embeddable, TRACE_IDS), min_size=1, max_size=3))
    return record(spans)


records = trace_records() | otlp_json_records() | st.binary(max_size=300)


@FUZZ
@given(st.lists(records, min_size=1, max_size=6))
async def test_every_record_ends_as_a_verdict_or_a_counted_rejection(batch: list[bytes]) -> None:
    topic = MemoryTopic(partitions=1)
    for payload in batch:
        topic.append(0, payload)
    rig = make_rig(
        topic,
        rubrics=[RUBRIC],
        kafka={"commit_interval_s": 0.5},
        assembler={"decision_wait_s": 1.0, "max_trace_age_s": 10.0},
        review={"enabled": False},
    )
    service, sink, clock = rig.service, rig.sink, rig.clock
    await service.start()
    try:
        for advance in (0.0, 11.0, 1.0):
            clock.advance(advance)
            await service.step()
            await quiesce()
    finally:
        await service.close()

    expected: set[str] = set()
    for payload in batch:
        try:
            expected |= {span.trace_id for span in decode(payload)}
        except DecodeError:
            continue
    registry = service.telemetry.registry
    ok = registry.get_sample_value("sidecar_kafka_records_total", {"result": "ok"}) or 0
    dead = registry.get_sample_value("sidecar_kafka_records_total", {"result": "dead_letter"}) or 0
    assert ok + dead == len(batch)
    assert len(sink.dead_letters) == dead
    assert all(reason for _, reason, _ in sink.dead_letters)
    verdicts = [json.loads(payload) for _, payload in sink.verdicts]
    assert sorted(v["trace_id"] for v in verdicts) == sorted(expected)
    for verdict in verdicts:
        assert verdict["outcome"] in OUTCOMES
        VerdictRecord.model_validate(verdict)
    assert topic.committed == {0: len(batch)}
    assert registry.get_sample_value("sidecar_internal_errors_total", {"stage": "evaluate"}) is None
