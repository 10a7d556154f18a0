"""The shadow judge's metric families (judge versus judge, :mod:`sidecar.drift.shadow_agreement`).

Labels: rubric and criterion (from rubric files), ``judge_model`` (the
rubric's) and ``shadow_model`` (``judge.shadow.model``): closed sets. The
comparison state is a :class:`~sidecar.drift.shadow_agreement.ShadowBoard`, bounded to
``max_keys`` keys; comparisons of further keys are counted as dropped
(reason ``over_keys``). With ``--workers`` each worker compares its own
share of the traffic; the gauges show the largest.
"""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, Counter, Gauge

from sidecar.drift.shadow_agreement import ShadowBoard, ShadowKey, ShadowPair
from sidecar.judge.config import ShadowSettings
from sidecar.telemetry import JudgeCall, ShadowDropped, ShadowJudged

_KEY = ["rubric", "criterion", "judge_model", "shadow_model"]


class ShadowMetrics:
    def __init__(self, registry: CollectorRegistry, settings: ShadowSettings | None = None) -> None:
        s = settings or ShadowSettings()
        self.board = ShadowBoard(
            window=s.window, max_disagreement=s.max_disagreement, alpha=s.alpha
        )
        r = registry
        self.comparisons = Counter(
            "sidecar_shadow_comparisons_total",
            "Criteria judged by both the rubric's judge and the shadow model, by outcome "
            "(agree, disagree: both PASS/FAIL; error: either side gave no PASS/FAIL).",
            [*_KEY, "outcome"],
            registry=r,
        )
        self.kappa = Gauge(
            "sidecar_shadow_kappa",
            "Cohen's kappa between the rubric's judge and the shadow model over the latest "
            "judge.shadow.window compared cases (NaN while undefined).",
            _KEY,
            multiprocess_mode="livemax",
            registry=r,
        )
        self.disagreement = Gauge(
            "sidecar_shadow_disagreement",
            "Share of the latest judge.shadow.window compared cases where the shadow model's "
            "verdict differs from the judge's.",
            _KEY,
            multiprocess_mode="livemax",
            registry=r,
        )
        self.evalue = Gauge(
            "sidecar_shadow_disagreement_evalue",
            "Evidence that the shadow model disagrees with the judge more often than "
            "judge.shadow.max_disagreement (1: none; the alarm is at 2/alpha).",
            _KEY,
            multiprocess_mode="livemax",
            registry=r,
        )
        self.alarms = Counter(
            "sidecar_shadow_alarms_total",
            "Alarms of the shadow disagreement detector (the disagreement rate is shown to be "
            "above judge.shadow.max_disagreement).",
            _KEY,
            registry=r,
        )
        self.threshold = Gauge(
            "sidecar_shadow_evalue_threshold",
            "The e-value at which the shadow disagreement detector alarms (2 / alpha).",
            multiprocess_mode="livemax",
            registry=r,
        )
        self.threshold.set(2.0 / s.alpha)
        self.dropped = Counter(
            "sidecar_shadow_dropped_total",
            "Cases chosen for the shadow model but not compared (over_budget: "
            "judge.shadow.max_inflight calls waiting; shutdown; failed: the call raised; "
            "over_keys: too many rubric x criterion keys).",
            ["rubric", "reason"],
            registry=r,
        )
        self.calls = Counter(
            "sidecar_shadow_judge_requests_total",
            "Calls to the shadow model, by result (ok, or the failure reason).",
            ["shadow_model", "result"],
            registry=r,
        )
        self.cost = Counter(
            "sidecar_shadow_judge_cost_usd_total",
            "Estimated cost of the shadow model's calls (judge.prices).",
            ["shadow_model"],
            registry=r,
        )

    def judged(self, event: ShadowJudged) -> None:
        before = self.board.dropped
        found = self.board.add(
            event.rubric,
            event.model,
            event.shadow_model,
            (ShadowPair(c, p, s) for c, p, s in event.pairs),
        )
        if self.board.dropped > before:
            self.dropped.labels(event.rubric, "over_keys").inc(self.board.dropped - before)
        for key, outcome, alarm in found:
            labels = (key.rubric, key.criterion, key.model, key.shadow_model)
            self.comparisons.labels(*labels, outcome).inc()
            alarms = self.alarms.labels(*labels)  # 0 from the first comparison on
            if alarm is not None:
                alarms.inc()
            self._show(key, labels)

    def _show(self, key: ShadowKey, labels: tuple[str, str, str, str]) -> None:
        agreement = self.board.keys[key]
        kappa = agreement.kappa
        self.kappa.labels(*labels).set(math.nan if kappa is None else kappa)
        share = agreement.disagreement
        if share is not None:
            self.disagreement.labels(*labels).set(share)
        self.evalue.labels(*labels).set(agreement.e_value)

    def dropped_case(self, event: ShadowDropped) -> None:
        self.dropped.labels(event.rubric, event.reason).inc()

    def call(self, event: JudgeCall) -> None:
        self.calls.labels(event.model, event.error or "ok").inc()
        if event.cost_usd > 0:
            self.cost.labels(event.model).inc(event.cost_usd)
