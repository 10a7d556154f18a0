"""The human review loop through the real broker: cases out on eval_review, labels back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.gemini_server import JudgeServer
from tests.integration.harness import (
    consume_all,
    produce,
    sidecar_on,
    spans_topic,
    wait_for,
    write_rubric,
)
from tests.integration.scenario import JUDGE_RUBRIC, answer_like_a_judge, make_feed

pytestmark = [pytest.mark.kafka]


async def test_reviewed_cases_go_out_and_labels_change_agreement(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    rubrics = write_rubric(
        tmp_path, "refund", JUDGE_RUBRIC.replace("judge_ratio: 0.5", "judge_ratio: 1.0")
    )
    review_topic, labels_topic = f"{topic_prefix}.review", f"{topic_prefix}.labels"
    topic = await spans_topic(kafka_bootstrap, topic_prefix, review_topic, labels_topic)
    feed = make_feed(40, seed=17)
    refund = [c for c in feed.cases if c.kind.startswith("refund")]
    server = JudgeServer(responder=answer_like_a_judge).start()
    try:
        with sidecar_on(
            topic_prefix,
            tmp_path,
            bootstrap=kafka_bootstrap,
            rubrics_dir=rubrics,
            env={"GOOGLE_API_KEY": "test-key", "GOOGLE_GEMINI_BASE_URL": server.base_url},
            extra={
                "judge": {"api_version": "v1beta"},
                "review": {"topic": review_topic, "labels_topic": labels_topic, "audit_share": 1.0},
            },
        ) as sidecar:
            await produce(kafka_bootstrap, topic, feed.records)
            reviews = [
                json.loads(r.value)
                for r in await consume_all(kafka_bootstrap, review_topic, expect=len(refund))
            ]
            # Every judged case was audited (audit_share 1.0) with transcript and verdict.
            assert {r["trace_id"] for r in reviews} == {c.trace_id for c in refund}
            for review in reviews:
                assert "audit" in review["reasons"]
                assert review["verdict"]["judged"] is True
                assert review["transcript"]["user_input"]
                assert review["transcript"]["tool_calls"]
            assert sidecar.metric("sidecar_review_cases_total", reason="audit") == len(refund)

            # People agree with the judge on every case: agreement 1.0.
            def label(review: dict, agree: bool) -> tuple[bytes, bytes]:  # type: ignore[type-arg]
                judged = next(c for c in review["verdict"]["criteria"] if c["name"] == "polite")
                human = (
                    judged["outcome"]
                    if agree
                    else ("FAIL" if judged["outcome"] == "PASS" else "PASS")
                )
                body = {
                    "trace_id": review["trace_id"],
                    "criterion": "polite",
                    "rater": "ana",
                    "label": human,
                }
                return review["trace_id"].encode(), json.dumps(body).encode()

            first = reviews[:10]
            await produce(kafka_bootstrap, labels_topic, [label(r, True) for r in first])
            selector = {
                "criterion": "polite",
                "statistic": "agreement",
                "judge_model": "gemini-2.5-flash",
            }
            await wait_for(
                lambda: sidecar.metric("sidecar_human_labels_total", criterion="polite") == 10,
                30,
                "10 labels",
            )
            assert sidecar.metric("sidecar_judge_human_agreement", **selector) == 1.0

            # Then they disagree on ten more: agreement over the window drops to 0.5.
            second = reviews[10:20]
            assert len(second) == 10
            await produce(kafka_bootstrap, labels_topic, [label(r, False) for r in second])
            await wait_for(
                lambda: sidecar.metric("sidecar_human_labels_total", criterion="polite") == 20,
                30,
                "20 labels",
            )
            assert sidecar.metric("sidecar_judge_human_agreement", **selector) == 0.5
            # A label for a case nobody reviewed is counted, not fatal.
            await produce(
                kafka_bootstrap,
                labels_topic,
                [
                    (b"x", b'{"trace_id": "ffff", "criterion": "polite", "label": "PASS"}'),
                    (b"y", b"{bad"),
                ],
            )
            await wait_for(
                lambda: sidecar.metric("sidecar_human_labels_unmatched_total") == 2, 30, "unmatched"
            )
            assert sidecar.terminate() == 0
    finally:
        server.stop()
