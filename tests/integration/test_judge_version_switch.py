"""The judge's model version changes halfway through a run: the drift alarm is the judge's.

Real Kafka, the sidecar as a process, the real google-genai client against the
local judge server, a canary set re-judged every second, and small drift
settings (the ``drift:`` block) so the detectors decide within seconds. The
agent never changes: every trace refunds the right amount. In the first half
the judge answers as version ``judge-a-001``, which grades ``correct_amount``
by the amount (and agrees with the canary labels); in the second half as
``judge-b-002``, which is stricter: it fails ``correct_amount`` everywhere,
on the canary cases labelled PASS too. The service's drift metrics must
attribute the alarm to the judge, never to the agent. What the metrics
showed is printed (``-s``) and written to ``version_switch.json`` in the
test's directory.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from prometheus_client.parser import text_string_to_metric_families

from tests.agents.genai_spans import recorder, refund_turn
from tests.gemini_server import JudgeServer, Reply, gemini_json, judged_response
from tests.integration.harness import (
    SidecarProcess,
    produce,
    spans_topic,
    wait_for,
    write_canary_set,
)
from tests.integration.scenario import REFUND_JUDGE_CRITERIA, refund_criteria

pytestmark = [pytest.mark.kafka]

MODEL = "gemini-2.5-flash"
WRONG = "999.95"
RUBRIC = f"""
id: refund-judged
version: "1"
applies_to: {{service.name: refund-agent}}
sampling: {{judge_ratio: 1.0}}
judge:
  model: {MODEL}
{REFUND_JUDGE_CRITERIA}canary: {{traces: canary/traces.bin, labels: canary/labels.jsonl, every_s: 1, cases_per_run: 10}}
"""
# Small detectors: 20 cases set a baseline; alarms at an e-value of 2 / 0.05 = 40.
DRIFT = {
    "alpha": 0.05,
    "baseline": 20,
    "every": 10,
    "canary_baseline": 20,
    "canary_every": 5,
    "guard_s": 30,
}
HALF = 30  # production traces per half


class Judge:
    """The local judge's two versions; ``strict`` switches from A to B.

    ``b_version``: what version B says served it (``judge-a-001`` too: a silent bump).
    """

    def __init__(self, b_version: str = "judge-b-002") -> None:
        self.strict = False
        self.b_version = b_version

    def __call__(self, path: str, body: Any) -> Reply:
        fail = self.strict or WRONG in judged_response(body)
        criteria = refund_criteria(fail, evidence="refunded")
        version = self.b_version if self.strict else "judge-a-001"
        return gemini_json({"criteria": criteria}, model_version=version)


def _trace(order: str, amount: str, seed: str) -> tuple[str, list[bytes]]:
    rec = recorder("refund-agent", "1.4.2", seed=seed)
    trace_id = refund_turn(rec.provider, order, amount)
    return trace_id, [encode_spans(rec.spans()).SerializeToString()]


def write_canary(folder: Path) -> None:
    """Ten canary cases: C1..C6 refund the right amount (PASS), C7..C10 a wrong one (FAIL)."""

    def case(n: int) -> tuple[str, list[bytes], list[tuple[str, str]]]:
        wrong = n >= 7
        trace_id, parts = _trace(f"C{n}", WRONG if wrong else "40.25", f"switch/canary/{n}")
        return trace_id, parts, [("correct_amount", "FAIL" if wrong else "PASS")]

    write_canary_set(folder, (case(n) for n in range(1, 11)))


def samples(sidecar: SidecarProcess, *names: str) -> list[tuple[str, dict[str, str], float]]:
    _, text = sidecar.http("/metrics")
    return [
        (s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name in names
    ]


async def _half(bootstrap: str, topic: str, start: int) -> None:
    records: list[tuple[bytes | None, bytes]] = []
    for n in range(start, start + HALF):
        # Distinct orders: no verdict of the second half comes from the cache.
        trace_id, parts = _trace(f"P{n}", "40.25", f"switch/prod/{n}")
        records.extend((trace_id.encode(), p) for p in parts)
    await produce(bootstrap, topic, records)


async def _switch_run(
    kafka_bootstrap: str, tmp_path: Path, judge: Judge, server: JudgeServer
) -> dict[str, Any]:
    prefix = f"v{uuid.uuid4().hex[:10]}"
    topic = await spans_topic(kafka_bootstrap, prefix)
    rubrics = tmp_path / "rubrics"
    rubrics.mkdir()
    (rubrics / "refund.yaml").write_text(RUBRIC)
    write_canary(rubrics / "canary")
    sidecar = SidecarProcess(
        tmp_path,
        bootstrap=kafka_bootstrap,
        topic=topic,
        group=f"{prefix}.g",
        rubrics_dir=rubrics,
        env={"GOOGLE_API_KEY": "test-key", "GOOGLE_GEMINI_BASE_URL": server.base_url},
        extra={
            "drift": DRIFT,
            "judge": {"requests_per_minute": 100_000, "max_attempts": 1},
        },
    )

    def judged(outcome: str) -> Callable[[], bool]:
        def enough() -> bool:
            found = sidecar.metric(
                "sidecar_criterion_verdicts_total", criterion="correct_amount", outcome=outcome
            )
            return found >= HALF

        return enough

    with sidecar:
        # Half A: the baselines of both streams fill with version A's verdicts.
        await _half(kafka_bootstrap, topic, 0)
        await wait_for(judged("PASS"), 40, f"version A's verdicts\n{sidecar.log()}")
        await wait_for(
            lambda: sidecar.metric("sidecar_canary_runs_total") >= 3, 20, "three canary runs"
        )
        before = samples(sidecar, "sidecar_drift_alarms_total")
        judge.strict = True  # the model behind the alias changes
        await _half(kafka_bootstrap, topic, HALF)
        await wait_for(judged("FAIL"), 40, f"version B's verdicts\n{sidecar.log()}")

        def judge_alarms() -> bool:
            return (
                sidecar.metric("sidecar_drift_alarms_total", stream="judge", attribution="judge")
                >= 1
                and sidecar.metric("sidecar_drift_alarms_total", stream="agent") >= 1
            )

        await wait_for(judge_alarms, 30, f"the drift alarms\n{sidecar.log()}")
        await asyncio.sleep(1.5)  # one more canary run: nothing changes the attribution
        after = samples(
            sidecar,
            "sidecar_drift_alarms_total",
            "sidecar_drift_attribution",
            "sidecar_drift_evalue",
            "sidecar_drift_evalue_threshold",
            "sidecar_criterion_verdicts_total",
            "sidecar_judge_model_version_info",
        )
        assert sidecar.terminate() == 0  # its log is flushed at exit
        log = sidecar.log_path.read_text(errors="replace")
    return {
        "alarms_before_switch": before,
        "after": after,
        "alarm_lines": [line for line in log.splitlines() if "drift alarm:" in line],
    }


@pytest.mark.parametrize(
    ("b_version", "reason"),
    [
        # The new version says so: rule 2 (or the canaries) makes the agent alarm the judge's.
        pytest.param("judge-b-002", "", id="named-version"),
        # A silent bump: the same version label, only the canaries can tell.
        pytest.param("judge-a-001", "the canaries' judge stream alarmed", id="silent-bump"),
    ],
)
async def test_a_judge_version_switch_is_attributed_to_the_judge(
    kafka_bootstrap: str, tmp_path: Path, b_version: str, reason: str
) -> None:
    judge = Judge(b_version)
    server = JudgeServer(responder=judge).start()
    try:
        seen = await _switch_run(kafka_bootstrap, tmp_path, judge, server)
    finally:
        server.stop()
    after = seen["after"]

    def values(name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
        return [
            (found, value)
            for metric, found, value in after
            if metric == name and all(found.get(k) == v for k, v in labels.items())
        ]

    alarms = {
        (found["criterion"], found["stream"], found["attribution"]): value
        for found, value in values("sidecar_drift_alarms_total")
        if value
    }
    report: dict[str, Any] = {
        "alarms_before_switch": {
            f"{f['criterion']}/{f['stream']}/{f['attribution']}": v
            for name, f, v in seen["alarms_before_switch"]
            if v
        },
        "alarms_by_attribution": {"/".join(k): v for k, v in sorted(alarms.items())},
        "attribution_gauge": {
            f"{f['criterion']}/{f['cause']}": v for f, v in values("sidecar_drift_attribution")
        },
        "evalue_gauge_after": {
            f"{f['criterion']}/{f['stream']}": round(v, 3)
            for f, v in values("sidecar_drift_evalue")
        },
        "threshold": [v for _, v in values("sidecar_drift_evalue_threshold")],
        "criterion_verdicts_by_version": {
            f"{f['criterion']}/{f['judge_model_version']}/{f['outcome']}": v
            for f, v in values("sidecar_criterion_verdicts_total")
            if v
        },
        "judge_model_version_info": {
            f["judge_model_version"]: v for f, v in values("sidecar_judge_model_version_info")
        },
        "alarm_log_lines": [line.split("drift alarm: ", 1)[1] for line in seen["alarm_lines"]],
    }
    print(f"\nversion switch run ({b_version}):", json.dumps(report, indent=2))
    (tmp_path / "version_switch.json").write_text(json.dumps(report, indent=2))

    assert not report["alarms_before_switch"]  # version A alone raised nothing
    # Both of correct_amount's streams alarmed, and every alarm is the judge's.
    assert alarms.get(("correct_amount", "judge", "judge"), 0) >= 1
    assert alarms.get(("correct_amount", "agent", "judge"), 0) >= 1
    assert not [k for k in alarms if k[2] == "agent"], alarms
    assert report["attribution_gauge"]["correct_amount/judge"] == 1
    assert report["attribution_gauge"]["correct_amount/agent"] == 0
    # polite never moved: no alarm on it.
    assert not [k for k in alarms if k[0] == "polite"]
    versions = report["criterion_verdicts_by_version"]
    assert versions["correct_amount/judge-a-001/PASS"] >= HALF
    assert versions[f"correct_amount/{b_version}/FAIL"] >= HALF
    assert report["threshold"] == [pytest.approx(40.0)]
    agent_lines = [line for line in report["alarm_log_lines"] if "pass_rate down" in line]
    assert agent_lines
    assert all("-> judge" in line for line in agent_lines)
    assert all(reason in line for line in agent_lines)
