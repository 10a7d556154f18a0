"""Judge outage under ``on_judge_unavailable: pause``: consumption stops, nothing is lost."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tests.gemini_server import JudgeServer, Reply, status
from tests.integration.harness import (
    consume_all,
    produce,
    sidecar_on,
    spans_topic,
    verdicts_from,
    wait_for,
    write_rubric,
)
from tests.integration.scenario import JUDGE_RUBRIC, answer_like_a_judge, make_feed

pytestmark = [pytest.mark.kafka]


async def test_judge_outage_pauses_partitions_and_loses_no_sample(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    rubrics = write_rubric(
        tmp_path, "refund", JUDGE_RUBRIC.replace("judge_ratio: 0.5", "judge_ratio: 1.0")
    )
    topic = await spans_topic(kafka_bootstrap, topic_prefix)
    feed = make_feed(40, seed=23, max_parts=1)
    refund = [c for c in feed.cases if c.kind.startswith("refund")]
    outage = threading.Event()
    outage.set()

    def respond(path: str, body: Any) -> Reply:
        return status(503, "judge down") if outage.is_set() else answer_like_a_judge(path, body)

    server = JudgeServer(responder=respond).start()
    try:
        with sidecar_on(
            topic_prefix,
            tmp_path,
            bootstrap=kafka_bootstrap,
            rubrics_dir=rubrics,
            env={"GOOGLE_API_KEY": "test-key", "GOOGLE_GEMINI_BASE_URL": server.base_url},
            extra={
                "kafka": {"max_poll_records": 2},
                "max_inflight_traces": 4,
                "judge": {
                    "api_version": "v1beta",
                    "on_judge_unavailable": "pause",
                    "max_attempts": 2,
                    "backoff_base_s": 0.05,
                    "backoff_max_s": 0.1,
                    "breaker_failures": 2,
                    "breaker_reset_s": 1.0,
                },
            },
        ) as sidecar:
            first, rest = feed.records[:12], feed.records[12:]
            await produce(kafka_bootstrap, topic, first)
            await wait_for(
                lambda: sidecar.metric("sidecar_judge_breaker_open") == 1, 30, "breaker open"
            )
            await wait_for(
                lambda: sidecar.metric("sidecar_judge_queue_depth") >= 4, 30, "in-flight bound"
            )
            # The in-flight bound is reached: partitions are paused, so new records stay unread.
            await produce(kafka_bootstrap, topic, rest)
            # The waiting cases probe the judge each time its breaker half-opens
            # (breaker_reset_s apart). Two more probes after the records were acknowledged
            # mean the sidecar ran on for a breaker period with them on the broker, its
            # loop fetching every fetch_timeout_ms: had its partitions not been paused,
            # it would have read them.
            probes = len(server.requests)
            await wait_for(lambda: len(server.requests) >= probes + 2, 30, "two more probes")
            assert sidecar.metric("sidecar_cases_total") == 0
            assert sidecar.metric("sidecar_kafka_records_total") <= len(first)
            assert sidecar.metric("sidecar_judge_errors_total") > 0  # http_5xx, breaker_open

            outage.clear()
            verdicts = verdicts_from(
                await consume_all(
                    kafka_bootstrap, f"{topic}.verdicts", expect=len(refund), within=90
                )
            )
            assert {v["trace_id"] for v in verdicts} == {c.trace_id for c in refund}
            assert len(verdicts) == len(refund)
            assert all(v["judged"] for v in verdicts)
            assert all(c["outcome"] != "ERROR" for v in verdicts for c in v["criteria"])
            assert sidecar.metric("sidecar_kafka_records_total") == len(feed.records)
            assert sidecar.metric("sidecar_judge_breaker_open") == 0
            assert sidecar.terminate() == 0
    finally:
        server.stop()
