"""The service with its second input: the logs topic, co-partitioned with the spans topic.

On the in-memory broker (``tests.fakes``) and a manual clock:
log records join their traces whichever topic is read first, their content
reaches the verdict, and logs offsets follow the commit rule of the spans
topic (held while a trace that read them is undecided, released once its
verdict is acknowledged); late logs, logs without a trace id and undecodable
logs records are counted and never hold a partition back.
"""

from __future__ import annotations

import json
from typing import Any

from sidecar.settings import Settings
from tests.builders import rubric, span_id, trace_id
from tests.fakes import MemoryTopic
from tests.service_rig import INTERVAL, WAIT, Rig, spans, started
from tests.service_rig import make_rig as service_rig

ANSWER = "Your refund of 12.50 USD is on its way."
RUBRIC = rubric(
    id="shop",
    checks=[{"name": "says_refund", "type": "answer_regex", "must_match": "refund of"}],
)


def logs(n: int, *, with_trace: bool = True, answer: str = ANSWER) -> bytes:
    """One OTLP/JSON logs record for trace ``n``: a details event with the answer, on its root."""
    content = {
        "key": "gen_ai.output.messages",
        "value": {
            "stringValue": json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]
            )
        },
    }
    record: dict[str, Any] = {
        "eventName": "gen_ai.client.inference.operation.details",
        "timeUnixNano": "1500",
        "attributes": [content],
    }
    if with_trace:
        record["traceId"] = trace_id(n)
        record["spanId"] = span_id(1)
    return json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [record]}]}]}).encode()


def make_rig(partitions: int = 2, **kafka: Any) -> tuple[Rig, MemoryTopic]:
    log_topic = MemoryTopic(partitions=partitions, name="otlp_logs")
    rig = service_rig(
        MemoryTopic(partitions=partitions),
        logs=log_topic,
        rubrics=[RUBRIC],
        kafka=kafka,
        review={"enabled": False},
    )
    return rig, log_topic


def _checks(rig: Rig) -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    for trace, payload in rig.sink.verdicts:
        record = json.loads(payload)
        found[trace] = {c["name"]: c["outcome"] for c in record["checks"]}
    return found


async def test_logs_before_or_after_their_spans_feed_the_verdict() -> None:
    rig, log_topic = make_rig()
    log_topic.append(0, logs(1))  # before its spans
    rig.topic.append(0, spans(1))
    rig.topic.append(1, spans(2))
    async with started(rig):
        await rig.round()
        log_topic.append(1, logs(2))  # after its spans, inside decision_wait
        await rig.round(WAIT - 1)
        await rig.round(WAIT)
        await rig.round(INTERVAL)
    assert _checks(rig) == {
        trace_id(1): {"says_refund": "PASS"},
        trace_id(2): {"says_refund": "PASS"},
    }
    assert log_topic.committed == {0: 1, 1: 1}
    assert rig.topic.committed == {0: 1, 1: 1}
    assert rig.metric("sidecar_logs_total") == 2


async def test_without_the_logs_topic_the_content_is_missing() -> None:
    rig, log_topic = make_rig(logs_topic="")
    log_topic.append(0, logs(1))
    rig.topic.append(0, spans(1))
    async with started(rig):
        await rig.round()
        await rig.round(WAIT)
        await rig.round(INTERVAL)
    assert _checks(rig) == {trace_id(1): {"says_refund": "ERROR"}}
    assert rig.metric("sidecar_logs_total") == 0


async def test_a_logs_offset_is_held_until_its_trace_is_decided() -> None:
    rig, log_topic = make_rig(partitions=1)
    log_topic.append(0, logs(1))  # offset 0: trace 1, not done yet (no root)
    log_topic.append(0, logs(2))  # offset 1: trace 2
    rig.topic.append(0, spans(2))
    rig.topic.append(0, spans(1, root=False))
    async with started(rig):
        await rig.round()
        await rig.round(WAIT)
        await rig.round(INTERVAL)
        # Trace 2 is decided; trace 1 still holds logs offset 0 and spans offset 1.
        assert list(_checks(rig)) == [trace_id(2)]
        assert log_topic.committed == {0: 0}
        assert rig.topic.committed == {0: 1}
        rig.topic.append(0, spans(1))
        await rig.round()
        await rig.round(WAIT)
        await rig.round(INTERVAL)
    assert set(_checks(rig)) == {trace_id(1), trace_id(2)}
    assert log_topic.committed == {0: 2}
    assert rig.topic.committed == {0: 3}


async def test_late_untraced_and_undecodable_logs_are_counted_and_committed() -> None:
    rig, log_topic = make_rig(partitions=1)
    rig.topic.append(0, spans(1))
    async with started(rig):
        await rig.round()
        await rig.round(WAIT)
        log_topic.append(0, logs(1))  # late: trace 1 is decided
        log_topic.append(0, logs(9, with_trace=False))
        log_topic.append(0, b'{"resourceLogs": [}')
        await rig.round()
        await rig.round(INTERVAL)
    assert _checks(rig) == {trace_id(1): {"says_refund": "ERROR"}}
    assert rig.metric("sidecar_late_logs_total") == 1
    assert rig.metric("sidecar_logs_without_trace_total") == 1
    (dead,) = rig.sink.dead_letters
    assert (dead[0].topic, dead[0].offset, dead[1]) == ("otlp_logs", 2, "bad_json")
    assert log_topic.committed == {0: 3}


async def test_revoking_a_partition_drops_traces_fed_by_its_logs_too() -> None:
    rig, log_topic = make_rig(partitions=2)
    log_topic.append(1, logs(5))  # trace 5: only its log record has come
    async with started(rig):
        await rig.round()
        assert rig.service.assembler.open_traces == 1
        await rig.source.revoke({1})
        assert rig.service.assembler.open_traces == 0
        assert rig.source.assigned() == {0}
    assert 1 not in log_topic.committed or log_topic.committed[1] == 0


def test_service_reads_logs_by_default() -> None:
    assert Settings().kafka.logs_topic == "otlp_logs"
