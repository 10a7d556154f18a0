"""The streaming core against a real Apache Kafka broker and a real OTLP/gRPC endpoint."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.harness import (
    OtlpReceiver,
    SidecarProcess,
    committed_offsets,
    consume_all,
    end_offsets,
    produce,
    sidecar_on,
    spans_topic,
    verdicts_from,
    wait_for,
)
from tests.integration.scenario import expected_outcome, make_feed, write_rubrics

pytestmark = [pytest.mark.kafka]


@pytest.fixture
def rubrics_dir(tmp_path: Path) -> Path:
    return write_rubrics(tmp_path / "rubrics")


@pytest.fixture
def sidecar_for(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path, rubrics_dir: Path
) -> Callable[..., SidecarProcess]:
    """A sidecar on this test's topic and group; ``name`` keeps replicas' files apart."""

    def make(name: str = "sidecar", otlp_port: int | None = None) -> SidecarProcess:
        return sidecar_on(
            topic_prefix,
            tmp_path,
            bootstrap=kafka_bootstrap,
            rubrics_dir=rubrics_dir,
            otlp_port=otlp_port,
            name=name,
        )

    return make


async def test_verdicts_reach_spans_records_and_metrics(
    kafka_bootstrap: str, topic_prefix: str, sidecar_for: Callable[..., SidecarProcess]
) -> None:
    topic = await spans_topic(kafka_bootstrap, topic_prefix)
    feed = make_feed(40, seed=7)
    with (
        OtlpReceiver() as otlp,
        sidecar_for(otlp_port=otlp.port) as sidecar,
    ):
        await produce(kafka_bootstrap, topic, feed.records)
        records = await consume_all(kafka_bootstrap, f"{topic}.verdicts", expect=len(feed.cases))
        verdicts = verdicts_from(records)
        await wait_for(lambda: len(otlp.spans()) >= len(feed.cases), 30, "verdict spans")
        await wait_for(
            lambda: sidecar.metric("sidecar_cases_total") >= len(feed.cases), 10, "metrics"
        )

        # Records: one per trace, keyed by trace id, with the expected outcome.
        assert len(verdicts) == len(feed.cases)
        by_trace = {v["trace_id"]: v for v in verdicts}
        assert set(by_trace) == feed.trace_ids
        assert all(r.key.decode() == v["trace_id"] for r, v in zip(records, verdicts, strict=True))
        for case in feed.cases:
            verdict = by_trace[case.trace_id]
            assert verdict["outcome"] == expected_outcome(case), (case.kind, verdict)
            failed = {c["name"] for c in verdict["checks"] if c["outcome"] == "FAIL"}
            assert failed == set(case.expected_failures), (case.kind, verdict["checks"])
            assert verdict["judged"] is False
            assert verdict["root_span_id"] == format(case.spans[-1].context.span_id, "016x") or True

        # Spans: inside the evaluated trace, child of its root, linked, one event per check.
        roots = {
            case.trace_id: next(
                format(s.context.span_id, "016x") for s in case.spans if s.parent is None
            )
            for case in feed.cases
        }
        spans = otlp.spans()
        assert len(spans) == len(feed.cases)
        for resource, span in spans:
            trace_id = span.trace_id.hex()
            verdict = by_trace[trace_id]
            assert resource["service.name"] == "sidecar"
            assert span.name == f"evaluate {verdict['rubric_id']}"
            assert span.parent_span_id.hex() == roots[trace_id] == verdict["root_span_id"]
            assert span.kind == 1  # SPAN_KIND_INTERNAL
            assert [link.span_id.hex() for link in span.links] == [roots[trace_id]]
            assert span.links[0].trace_id.hex() == trace_id
            attrs = {kv.key: kv.value for kv in span.attributes}
            assert attrs["eval.rubric.id"].string_value == verdict["rubric_id"]
            assert attrs["eval.rubric.version"].string_value == verdict["rubric_version"]
            assert attrs["eval.judge.model"].string_value == "none"
            assert attrs["eval.outcome"].string_value == verdict["outcome"]
            assert attrs["eval.judged"].bool_value is False
            assert attrs["gen_ai.agent.name"].string_value == verdict["agent"]
            events = [e for e in span.events if e.name == "gen_ai.evaluation.result"]
            assert len(events) == len(verdict["checks"])
            for event, check in zip(events, verdict["checks"], strict=True):
                ev = {kv.key: kv.value for kv in event.attributes}
                assert ev["gen_ai.evaluation.name"].string_value == check["name"]
                assert ev["gen_ai.evaluation.score.label"].string_value == check["outcome"].lower()
                if check["outcome"] == "ERROR":
                    assert "gen_ai.evaluation.score.value" not in ev
                else:
                    expected = 1.0 if check["outcome"] == "PASS" else 0.0
                    assert ev["gen_ai.evaluation.score.value"].double_value == expected

        # Metrics agree with what was sent and emitted.
        outcomes = Counter(v["outcome"] for v in verdicts)
        for outcome, count in outcomes.items():
            assert sidecar.metric("sidecar_cases_total", outcome=outcome) == count
        assert sidecar.metric("sidecar_kafka_records_total", result="ok") == len(feed.records)
        assert sidecar.metric("sidecar_spans_total") == feed.span_count
        assert sidecar.metric("sidecar_traces_decided_total") == len(feed.cases)
        assert sidecar.metric("sidecar_open_traces") == 0
        assert sidecar.metric("sidecar_late_spans_total") == 0
        assert (
            sidecar.metric("sidecar_rubric_info", rubric="refund-support", rubric_version="3") == 1
        )
        assert sidecar.metric("sidecar_build_info") == 1
        failed_checks = sum(1 for v in verdicts for c in v["checks"] if c["outcome"] == "FAIL")
        assert sidecar.metric("sidecar_check_results_total", outcome="FAIL") == failed_checks
        status, text = sidecar.http("/metrics")
        assert status == 200
        assert "sidecar_consumer_lag" in text
        for trace_id in feed.trace_ids:
            assert trace_id not in text  # never a label
        assert sidecar.http("/healthz")[0] == 200
        assert sidecar.terminate() == 0


async def test_nothing_lost_500_traces_over_many_records(
    kafka_bootstrap: str, topic_prefix: str, sidecar_for: Callable[..., SidecarProcess]
) -> None:
    topic = await spans_topic(kafka_bootstrap, topic_prefix)
    feed = make_feed(500, seed=11, max_parts=4)
    assert len(feed.records) > 500
    with (
        OtlpReceiver() as otlp,
        sidecar_for(otlp_port=otlp.port) as sidecar,
    ):
        await produce(kafka_bootstrap, topic, feed.records)
        verdicts = verdicts_from(
            await consume_all(kafka_bootstrap, f"{topic}.verdicts", expect=500, within=120)
        )
        await wait_for(lambda: len(otlp.spans()) >= 500, 30, "500 verdict spans")
        await wait_for(lambda: sidecar.metric("sidecar_cases_total") >= 500, 10, "metrics")
        assert len(verdicts) == 500
        assert {v["trace_id"] for v in verdicts} == feed.trace_ids
        assert len(otlp.spans()) == 500
        assert {s.trace_id.hex() for _, s in otlp.spans()} == feed.trace_ids
        assert sidecar.metric("sidecar_cases_total") == 500
        assert sidecar.metric("sidecar_traces_decided_total", reason="complete") == 500
        assert sidecar.metric("sidecar_kafka_records_total", result="ok") == len(feed.records)
        assert sidecar.metric("sidecar_spans_total") == feed.span_count
        assert sidecar.terminate() == 0


async def test_garbage_goes_to_dead_letters_and_good_traces_survive(
    kafka_bootstrap: str, topic_prefix: str, sidecar_for: Callable[..., SidecarProcess]
) -> None:
    topic = await spans_topic(kafka_bootstrap, topic_prefix)
    feed = make_feed(60, seed=3)
    rng = random.Random(5)
    good_proto = feed.records[0][1]
    garbage: list[tuple[bytes | None, bytes]] = [
        (b"junk-1", bytes(rng.randrange(256) for _ in range(64))),
        (b"junk-2", good_proto[: len(good_proto) // 2]),  # truncated protobuf
        (b"junk-3", b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}'),
        (b"junk-4", b'{"hello": "world"}'),
        (b"junk-5", b"{not json at all"),
        (None, bytes(rng.randrange(256) for _ in range(200))),
        (b"junk-7", b""),
    ]
    records: list[tuple[bytes | None, bytes]] = list(feed.records)
    for item in garbage:
        records.insert(rng.randrange(len(records) + 1), item)
    with sidecar_for() as sidecar:
        await produce(kafka_bootstrap, topic, records)
        verdicts = verdicts_from(
            await consume_all(kafka_bootstrap, f"{topic}.verdicts", expect=len(feed.cases))
        )
        dead = await consume_all(kafka_bootstrap, f"{topic}.dlq", expect=len(garbage))
        assert {v["trace_id"] for v in verdicts} == feed.trace_ids
        assert len(verdicts) == len(feed.cases)
        assert sorted(r.value for r in dead) == sorted(v for _, v in garbage)
        for record in dead:
            headers = dict(record.headers)
            assert headers["sidecar.dlq.reason"]
            assert headers["sidecar.source.topic"].decode() == topic
        assert sidecar.metric("sidecar_kafka_records_total", result="dead_letter") == len(garbage)
        assert sidecar.metric("sidecar_dead_letters_total") == len(garbage)
        assert sidecar.proc is not None
        assert sidecar.proc.poll() is None  # still running
        assert sidecar.terminate() == 0


async def test_kill_mid_stream_and_restart_loses_nothing(
    kafka_bootstrap: str, topic_prefix: str, sidecar_for: Callable[..., SidecarProcess]
) -> None:
    topic = await spans_topic(kafka_bootstrap, topic_prefix)
    feed = make_feed(300, seed=21, max_parts=3)
    first = sidecar_for("first").start()
    try:
        half = len(feed.records) // 2
        await produce(kafka_bootstrap, topic, feed.records[:half])
        await wait_for(lambda: first.metric("sidecar_cases_total") >= 20, 60, "first verdicts")
        first.kill()  # abrupt: no commit, no flush
    finally:
        first.__exit__()
    await produce(kafka_bootstrap, topic, feed.records[half:])
    with sidecar_for("second") as second:
        verdicts = verdicts_from(
            await consume_all(
                kafka_bootstrap, f"{topic}.verdicts", expect=len(feed.cases), within=120
            )
        )
        seen = Counter(v["trace_id"] for v in verdicts)
        assert set(seen) == feed.trace_ids  # every trace has at least one verdict
        duplicates = sum(n - 1 for n in seen.values())
        ids = Counter(v["id"] for v in verdicts)
        assert all(ids[v["id"]] == seen[v["trace_id"]] for v in verdicts)  # same idempotency key
        print(f"kill/restart: {len(feed.cases)} traces, {duplicates} duplicate verdicts")
        assert second.terminate() == 0


async def test_two_replicas_split_partitions_exactly_once_in_steady_state(
    kafka_bootstrap: str, topic_prefix: str, sidecar_for: Callable[..., SidecarProcess]
) -> None:
    topic = await spans_topic(kafka_bootstrap, topic_prefix)
    feed = make_feed(200, seed=5)
    with (
        sidecar_for("a") as a,
        sidecar_for("b") as b,
    ):
        # Steady state: both members hold partitions before traffic starts.
        await wait_for(
            lambda: _partitions(a) and _partitions(b) and len(_partitions(a) | _partitions(b)) == 3,
            60,
            "both replicas assigned",
        )
        assert not (_partitions(a) & _partitions(b))
        await produce(kafka_bootstrap, topic, feed.records)
        verdicts = verdicts_from(
            await consume_all(kafka_bootstrap, f"{topic}.verdicts", expect=len(feed.cases))
        )
        seen = Counter(v["trace_id"] for v in verdicts)
        assert set(seen) == feed.trace_ids
        assert max(seen.values()) == 1
        cases_a, cases_b = a.metric("sidecar_cases_total"), b.metric("sidecar_cases_total")
        assert cases_a > 0
        assert cases_b > 0
        assert cases_a + cases_b == len(feed.cases)
        assert a.terminate() == 0
        assert b.terminate() == 0


def _partitions(sidecar: SidecarProcess) -> set[int]:
    status, text = sidecar.http("/readyz")
    if status != 200 or "partitions [" not in text:
        return set()
    inside = text.split("partitions [", 1)[1].split("]", 1)[0]
    return {int(p) for p in inside.split(",") if p.strip()}


async def test_sigterm_commits_and_restart_emits_nothing_new(
    kafka_bootstrap: str, topic_prefix: str, sidecar_for: Callable[..., SidecarProcess]
) -> None:
    topic, group = await spans_topic(kafka_bootstrap, topic_prefix), f"{topic_prefix}.g"
    feed = make_feed(50, seed=9)
    with sidecar_for("first") as first:
        await produce(kafka_bootstrap, topic, feed.records)
        await consume_all(kafka_bootstrap, f"{topic}.verdicts", expect=len(feed.cases), settle=0)
        assert first.terminate() == 0
    # All offsets were committed on SIGTERM.
    ends = await end_offsets(kafka_bootstrap, topic)
    assert sum(ends.values()) == len(feed.records)
    assert await committed_offsets(kafka_bootstrap, group, topic) == ends

    # A restarted replica reads nothing old: once it holds every partition, one new trace
    # goes to each. A partition is read in order, so by the time those are decided any
    # record left uncommitted before them has been read, and counted, first.
    fresh = make_feed(3, seed=10, max_parts=1)
    assert not fresh.trace_ids & feed.trace_ids
    with sidecar_for("second") as second:
        await wait_for(lambda: _partitions(second) == {0, 1, 2}, 60, "partitions assigned")
        for partition, record in enumerate(fresh.records):
            await produce(kafka_bootstrap, topic, [record], partition=partition)
        await wait_for(
            lambda: second.metric("sidecar_cases_total") >= len(fresh.cases), 30, "new verdicts"
        )
        assert second.metric("sidecar_kafka_records_total") == len(fresh.records)
        assert second.metric("sidecar_cases_total") == len(fresh.cases)
        assert second.terminate() == 0
    verdicts = verdicts_from(
        await consume_all(
            kafka_bootstrap,
            f"{topic}.verdicts",
            expect=len(feed.cases) + len(fresh.cases),
            settle=0.5,
        )
    )
    assert len([v for v in verdicts if v["trace_id"] in feed.trace_ids]) == len(feed.cases)
    assert sorted(v["trace_id"] for v in verdicts if v["trace_id"] in fresh.trace_ids) == sorted(
        fresh.trace_ids
    )
    assert len(verdicts) == len(feed.cases) + len(fresh.cases)
