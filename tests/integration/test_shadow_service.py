"""``judge.shadow`` in a running service: real Kafka, the sidecar process, the real google-genai client.

The local judge server answers per model: the rubric's model passes
``correct_amount`` unless the amount is wrong, the shadow model fails it
everywhere. Every verdict record on the verdict topic is the rubric's
model's; the shadow's comparison shows on the metrics only.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from sidecar.drift.shadow_agreement import shadow_selected
from tests.agents.genai_spans import recorder, refund_turn
from tests.gemini_server import JudgeServer, Reply, gemini_json, judged_response, requested_model
from tests.integration.harness import (
    SidecarProcess,
    consume_all,
    produce,
    spans_topic,
    verdicts_from,
    wait_for,
)
from tests.integration.scenario import REFUND_JUDGE_CRITERIA, refund_criteria

pytestmark = [pytest.mark.kafka]

MODEL = "gemini-2.5-flash"
SHADOW = "gemini-3-flash"
WRONG = "999.95"
RUBRIC = f"""
id: refund-shadowed
version: "1"
applies_to: {{service.name: refund-agent}}
sampling: {{judge_ratio: 1.0}}
judge:
  model: {MODEL}
{REFUND_JUDGE_CRITERIA}"""
SHARE = 0.5
N = 40


def two_judges(path: str, body: Any) -> Reply:
    shadow = requested_model(path) == SHADOW
    fail = shadow or WRONG in judged_response(body)
    criteria = refund_criteria(fail, evidence="refunded")
    return gemini_json({"criteria": criteria}, model_version="shadow-1" if shadow else "primary-1")


def _trace(n: int) -> tuple[str, bytes]:
    rec = recorder("refund-agent", "1.4.2", seed=f"shadow/{n}")
    trace_id = refund_turn(rec.provider, f"S{n}", WRONG if n % 4 == 0 else "40.25")
    return trace_id, encode_spans(rec.spans()).SerializeToString()


async def test_the_service_runs_a_shadow_judge_beside_the_verdicts(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = f"s{uuid.uuid4().hex[:10]}"
    topic = await spans_topic(kafka_bootstrap, prefix)
    rubrics = tmp_path / "rubrics"
    rubrics.mkdir()
    (rubrics / "refund.yaml").write_text(RUBRIC)
    server = JudgeServer(responder=two_judges).start()
    sidecar = SidecarProcess(
        tmp_path,
        bootstrap=kafka_bootstrap,
        topic=topic,
        group=f"{prefix}.g",
        rubrics_dir=rubrics,
        env={"GOOGLE_API_KEY": "test-key", "GOOGLE_GEMINI_BASE_URL": server.base_url},
        extra={
            "judge": {
                "requests_per_minute": 100_000,
                "max_attempts": 1,
                "shadow": {"model": SHADOW, "share": SHARE, "max_inflight": 100},
            }
        },
    )
    traces = [_trace(n) for n in range(N)]
    expected = {t: "FAIL" if n % 4 == 0 else "PASS" for n, (t, _) in enumerate(traces)}
    chosen = [t for t, _ in traces if shadow_selected(t, SHARE)]
    labels = {
        "rubric": "refund-shadowed",
        "criterion": "correct_amount",
        "judge_model": MODEL,
        "shadow_model": SHADOW,
    }
    try:
        with sidecar:
            await produce(kafka_bootstrap, topic, [(t.encode(), v) for t, v in traces])
            records = verdicts_from(
                await consume_all(kafka_bootstrap, f"{topic}.verdicts", expect=N, settle=0.5)
            )

            def compared() -> bool:
                return sidecar.metric("sidecar_shadow_comparisons_total", **labels) >= len(chosen)

            await wait_for(compared, 30, f"the shadow comparisons\n{sidecar.log()}")
            kappa = sidecar.metric("sidecar_shadow_kappa", **labels)
            disagree = sidecar.metric(
                "sidecar_shadow_comparisons_total", **labels, outcome="disagree"
            )
            agree = sidecar.metric("sidecar_shadow_comparisons_total", **labels, outcome="agree")
            requests = sidecar.metric("sidecar_shadow_judge_requests_total", shadow_model=SHADOW)
            production = sidecar.metric("sidecar_judge_request_duration_seconds_count")
            assert sidecar.terminate() == 0
        log = sidecar.log_path.read_text(errors="replace")
    finally:
        server.stop()
    assert "shadow judge gemini-3-flash re-judges 50.0% of the judged cases" in log
    # The verdicts are the rubric's model's, whatever the shadow said.
    assert len(records) == N
    for record in records:
        assert record["judge_model"] == MODEL
        assert record["judge_model_version"] == "primary-1"
        (amount,) = [c for c in record["criteria"] if c["name"] == "correct_amount"]
        assert amount["outcome"] == expected[record["trace_id"]]
    passes = sum(
        c["outcome"] == "PASS"
        for r in records
        if r["trace_id"] in chosen
        for c in r["criteria"]
        if c["name"] == "correct_amount"
    )
    assert 0 < passes < len(chosen)
    # The shadow fails every case: it agrees on the primary's FAILs only.
    assert disagree == passes
    assert agree == len(chosen) - passes
    assert requests == len(chosen)
    assert production == N  # the shadow's calls are not production calls
    # p_o = share of FAILs, p_e = that share as well (the shadow says FAIL always): kappa 0.
    assert kappa == pytest.approx(0.0)
    print(
        f"\nshadow in the service: {len(chosen)} of {N} cases shadowed, agree {agree:.0f}, "
        f"disagree {disagree:.0f}, kappa {kappa:.3f}"
    )
