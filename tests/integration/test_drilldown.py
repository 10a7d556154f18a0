"""From a metric to the failing trace, with real parts: Kafka, Prometheus 3, Jaeger v2.

The sidecar reads generated agent traces from Kafka and judges them with the
Gemini stand-in; Prometheus 3 (exemplar storage on) scrapes its ``/metrics`` in
OpenMetrics, and Jaeger receives its verdict spans over OTLP. The test walks the
drill-down path of docs/drill-down.md: the exemplars of the verdict counters name
trace ids of verdict records (an unacceptable series names an unacceptable
verdict), and in Jaeger the verdict span of that trace is found by tag search,
with the judge's own ``chat`` span as its child. The trace decisions add up to
the traces sent.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.gemini_server import JudgeServer
from tests.integration import realparts_obs as obs
from tests.integration.harness import (
    SidecarProcess,
    consume_all,
    produce,
    spans_topic,
    verdicts_from,
    wait_for,
)
from tests.integration.scenario import JUDGE_RUBRIC, answer_like_a_judge, make_feed

pytestmark = [pytest.mark.kafka]

JUDGE_MODEL = "gemini-2.5-flash"
SERVICE = "sidecar"


def exemplar_ids(prom_url: str, promql: str, since: float) -> dict[str, str]:
    """trace_id -> span_id of every exemplar of ``promql`` since ``since``."""
    found = obs.query_exemplars(prom_url, promql, since - 60, time.time() + 60)
    return {
        e["labels"]["trace_id"]: e["labels"].get("span_id", "")
        for series in found
        for e in series["exemplars"]
    }


def spans_by_name(trace: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    by_name: dict[str, list[dict[str, Any]]] = {}
    for span in trace["spans"]:
        by_name.setdefault(span["operationName"], []).append(span)
    return by_name


async def test_an_exemplar_leads_to_the_verdict_span_and_its_judge_span(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    rubrics = tmp_path / "rubrics"
    rubrics.mkdir()
    (rubrics / "refund.yaml").write_text(JUDGE_RUBRIC)
    topic = await spans_topic(kafka_bootstrap, topic_prefix)
    feed = make_feed(40, seed=24)
    refund = [c for c in feed.cases if c.kind.startswith("refund")]
    server = JudgeServer(responder=answer_like_a_judge).start()
    started = time.time()
    try:
        with obs.start_jaeger(obs.jaeger(), tmp_path) as jaeger:
            otlp_port = int(jaeger.otlp_grpc.rsplit(":", 1)[1])
            with SidecarProcess(
                tmp_path,
                bootstrap=kafka_bootstrap,
                topic=topic,
                group=f"{topic_prefix}.g",
                rubrics_dir=rubrics,
                otlp_port=otlp_port,
                env={"GOOGLE_API_KEY": "test-key", "GOOGLE_GEMINI_BASE_URL": server.base_url},
                extra={"judge": {"api_version": "v1beta", "timeout_s": 10}},
            ) as sidecar:
                target = f"127.0.0.1:{sidecar.metrics_port}"
                with obs.start_prometheus(obs.prometheus3(), tmp_path, [target]) as prom:
                    await produce(kafka_bootstrap, topic, feed.records)
                    records = await consume_all(
                        kafka_bootstrap, f"{topic}.verdicts", expect=len(refund)
                    )
                    verdicts = {v["trace_id"]: v for v in verdicts_from(records)}
                    assert len(verdicts) == len(refund), sidecar.log()
                    await wait_for(
                        lambda: (
                            prom_sum(prom.url, "sidecar_trace_decisions_total") >= len(feed.cases)
                        ),
                        30,
                        "every trace's decision scraped",
                    )
                    # 1. The funnel adds up to the traces sent (airline traces match no rubric).
                    decisions = {
                        r["metric"]["decision"]: float(r["value"][1])
                        for r in obs.query(
                            prom.url, "sum by (decision) (sidecar_trace_decisions_total)"
                        )
                    }
                    assert sum(decisions.values()) == len(feed.cases)
                    judged = [v for v in verdicts.values() if v["judged"]]
                    assert decisions["evaluated"] == len(judged) > 0
                    assert decisions["no_rubric"] == len(feed.cases) - len(refund)

                    # 2. Exemplars of the verdict counters name trace ids of verdict records.
                    cases = 'sidecar_cases_total{rubric="refund-support"}'
                    anywhere = obs.wait_until(
                        lambda: exemplar_ids(prom.url, cases, started), 30, "exemplars"
                    )
                    assert set(anywhere) <= set(verdicts)
                    failing = exemplar_ids(
                        prom.url,
                        'sidecar_cases_total{rubric="refund-support", outcome="unacceptable"}',
                        started,
                    )
                    assert failing, "no exemplar on the unacceptable series"
                    for trace_id in failing:
                        assert verdicts[trace_id]["outcome"] == "unacceptable"
                    criteria = exemplar_ids(
                        prom.url,
                        'sidecar_criterion_verdicts_total{criterion="correct_amount",'
                        ' outcome=~"PASS|FAIL"}',
                        started,
                    )
                    assert criteria
                    assert all(verdicts[t]["judged"] for t in criteria)

                    # 3. Jaeger: a judged trace's verdict span (a failing one if an exemplar
                    # names one), found by tag search.
                    trace_id = next((t for t in criteria if t in failing), next(iter(criteria)))
                    verdict = verdicts[trace_id]
                    tags = {"eval.id": verdict["id"], "eval.rubric.id": "refund-support"}
                    found = obs.wait_until(
                        lambda: obs.find_traces(jaeger.query_url, SERVICE, tags),
                        30,
                        "the verdict span in Jaeger",
                    )
                    assert [t["traceID"] for t in found] == [trace_id]
                    judge_tags = {"gen_ai.operation.name": "chat", "eval.id": verdict["id"]}
                    found = obs.wait_until(
                        lambda: obs.find_traces(jaeger.query_url, SERVICE, judge_tags),
                        30,
                        "the judge span in Jaeger",
                    )
                    assert [t["traceID"] for t in found] == [trace_id]
                    stored = obs.get_trace(jaeger.query_url, trace_id)
                    span_id = criteria[trace_id]
                assert sidecar.terminate() == 0
    finally:
        server.stop()

    assert stored is not None
    by_name = spans_by_name(stored)
    (verdict_span,) = by_name["evaluate refund-support"]
    (judge_span,) = by_name[f"chat {JUDGE_MODEL}"]
    # The exemplar's span id is the verdict span; the verdict span sits under the trace's root.
    assert verdict_span["spanID"] == span_id
    # Its parent is the evaluated trace's root, which it also links to: Jaeger keeps the two
    # as one reference to the root (FOLLOWS_FROM), so the root is the one span it refers to.
    assert {r["spanID"] for r in verdict_span["references"]} == {verdict["root_span_id"]}
    assert obs.parent_span_id(judge_span) == verdict_span["spanID"]
    vtags, jtags = obs.span_tags(verdict_span), obs.span_tags(judge_span)
    assert vtags["eval.outcome"] == verdict["outcome"]
    assert vtags["eval.judge.model_version"] == "scripted"
    assert jtags["gen_ai.operation.name"] == "chat"
    assert jtags["gen_ai.provider.name"] == "gcp.gemini"
    assert jtags["gen_ai.request.model"] == JUDGE_MODEL
    assert jtags["gen_ai.response.model"] == "scripted"
    assert jtags["gen_ai.usage.input_tokens"] == 120
    assert jtags["gen_ai.usage.output_tokens"] == 30
    assert jtags["sidecar.judge.attempt"] == 1
    assert jtags["sidecar.judge.cache_hit"] is False
    assert "error.type" not in jtags
    assert judge_span["startTime"] >= verdict_span["startTime"]
    # No transcript content on the judge span.
    assert not any(k.startswith(("gen_ai.input", "gen_ai.output", "gen_ai.prompt")) for k in jtags)


def prom_sum(url: str, metric: str) -> float:
    result = obs.query(url, f"sum({metric})")
    return float(result[0]["value"][1]) if result else 0.0
