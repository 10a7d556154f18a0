"""Judged verdicts end to end: real Kafka, the real google-genai client, a local Gemini-protocol server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.gemini_server import JudgeServer
from tests.integration.harness import (
    OtlpReceiver,
    SidecarProcess,
    consume_all,
    produce,
    spans_topic,
    verdicts_from,
    wait_for,
)
from tests.integration.scenario import JUDGE_RUBRIC, answer_like_a_judge, make_feed

pytestmark = [pytest.mark.kafka]


async def test_sampled_cases_are_judged_on_spans_records_and_metrics(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    rubrics = tmp_path / "rubrics"
    rubrics.mkdir()
    (rubrics / "refund.yaml").write_text(JUDGE_RUBRIC)
    topic = await spans_topic(kafka_bootstrap, topic_prefix)
    feed = make_feed(80, seed=13)
    refund_cases = [c for c in feed.cases if c.kind.startswith("refund")]
    server = JudgeServer(responder=answer_like_a_judge).start()
    try:
        with (
            OtlpReceiver() as otlp,
            SidecarProcess(
                tmp_path,
                bootstrap=kafka_bootstrap,
                topic=topic,
                group=f"{topic_prefix}.g",
                rubrics_dir=rubrics,
                otlp_port=otlp.port,
                env={"GOOGLE_API_KEY": "test-key", "GOOGLE_GEMINI_BASE_URL": server.base_url},
                extra={"judge": {"api_version": "v1beta", "timeout_s": 10}},
            ) as sidecar,
        ):
            await produce(kafka_bootstrap, topic, feed.records)
            verdicts = verdicts_from(
                await consume_all(kafka_bootstrap, f"{topic}.verdicts", expect=len(refund_cases))
            )
            await wait_for(lambda: len(otlp.spans()) >= len(refund_cases), 20, "verdict spans")

            assert len(verdicts) == len(refund_cases)
            judged = [v for v in verdicts if v["judged"]]
            skipped = [v for v in verdicts if not v["judged"]]
            assert judged
            assert skipped
            assert len(server.requests) == len(judged)
            for request in server.requests:
                assert request.path == "/v1beta/models/gemini-2.5-flash:generateContent"
                assert request.body["generationConfig"]["temperature"] == 0
                assert "tools" not in request.body
            for v in judged:
                assert v["sample_reason"] in {"ratio", "error"}
                by_name = {c["name"]: c for c in v["criteria"]}
                assert [c["name"] for c in v["criteria"]] == ["correct_amount", "polite"]
                assert by_name["polite"]["gate"] is False
                assert "raw_output" in v
                json.loads(v["raw_output"])
            for v in skipped:
                assert v["sample_reason"] == "not_sampled"
                assert all(c["outcome"] == "SKIPPED" for c in v["criteria"])
            wrong = [v for v in judged if _criterion(v, "correct_amount") == "FAIL"]
            for v in wrong:
                assert v["outcome"] == "unacceptable"
            # The verdict span of a judged case has one event per check and per criterion.
            spans = {s.trace_id.hex(): s for _, s in otlp.spans()}
            for v in judged:
                span = spans[v["trace_id"]]
                names = [
                    {kv.key: kv.value.string_value for kv in e.attributes}["gen_ai.evaluation.name"]
                    for e in span.events
                ]
                assert names == ["allowed_tools", "correct_amount", "polite"]
            metric = sidecar.metric
            assert metric(
                "sidecar_criterion_verdicts_total", judge_model="gemini-2.5-flash"
            ) == 2 * len(verdicts)
            assert metric("sidecar_criterion_verdicts_total", outcome="SKIPPED") == 2 * len(skipped)
            assert metric(
                "sidecar_criterion_verdicts_total", criterion="correct_amount", outcome="FAIL"
            ) == len(wrong)
            assert metric("sidecar_sampling_decisions_total", decision="judge") == len(judged)
            assert metric("sidecar_judge_request_duration_seconds_count") == len(judged)
            assert metric("sidecar_judge_tokens_total", kind="input") == 120 * len(judged)
            assert metric("sidecar_verdict_cache_requests_total", result="miss") == len(judged)
            assert metric("sidecar_judge_errors_total") == 0
            assert sidecar.terminate() == 0
    finally:
        server.stop()


def _criterion(verdict: dict[str, Any], name: str) -> str:
    return next(c["outcome"] for c in verdict["criteria"] if c["name"] == name)
