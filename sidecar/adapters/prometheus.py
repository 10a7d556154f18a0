"""Every Prometheus metric sidecar exports, declared in one place.

Names follow ``sidecar_<subsystem>_<name>_<unit>``; counters end in ``_total``.
Label values come only from closed sets: rubric ids and versions, judge models,
check and criterion names (all from rubric files), outcome enums, and agent
names/versions capped at ``max_agents`` distinct values (overflow -> ``other``).
Values that come from traces or the model service (agent name and version,
judge model version) are also cut to ``MAX_LABEL_CHARS`` characters, the cut
marked with ``…``, so one 200 KB agent name cannot swell every scrape.
Trace ids and transcript text never become labels.

The judge model version (what the model service says served an answer) is a
label only on the families that need it: ``sidecar_criterion_verdicts_total``
(``none`` when no answer arrived) and the info gauge
``sidecar_judge_model_version_info``; never on trace-level counters. Its
values come from the model service, so they are capped too
on the counter (``max_model_versions`` per process, overflow -> ``other``);
the gauge holds one series per judge model at a time.

``sidecar_criterion_verdicts_total{outcome}`` is PASS, FAIL, ERROR, SKIPPED, or
HELD: a PASS in a case flagged ``injection_suspected`` (by the screening or the
judge's own report), which is not a pass until a person reviews it. Pass-rate
queries select ``outcome="PASS"`` and ``outcome=~"PASS|FAIL"``, so HELD stays
out of both; it is its own count.

The verdict families and ``sidecar_verdict_latency_seconds`` carry exemplars
(trace and span id of a recent verdict; :mod:`sidecar.adapters.exemplars`),
shown in the OpenMetrics exposition only.

The verdict families (cases, check results, criterion verdicts) carry a
``scope`` label: ``trace`` or ``conversation``. The conversation
stage's own families are in :class:`ConversationMetrics`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from sidecar import __version__
from sidecar.adapters.exemplars import ExemplarMemory, bucket_bound, verdict_exemplar
from sidecar.adapters.shadow_metrics import ShadowMetrics
from sidecar.conversation.stage import ConversationStats
from sidecar.drift.attribute import (
    CAUSES,
    CriterionDrift,
    DriftMonitor,
    DriftSettings,
    Observation,
    StreamKey,
    verdict_observation,
)
from sidecar.drift.fingerprint import check_fingerprint
from sidecar.engine.deliver import DeliveryStats
from sidecar.engine.flight import FlightStats
from sidecar.engine.partitions import EngineStats
from sidecar.engine.traces import TraceStats
from sidecar.evaluate.decision import Decision
from sidecar.evaluate.rubric import Rubric
from sidecar.evaluate.verdict import Verdict
from sidecar.ingest.assemble import AssemblerStats
from sidecar.judge.config import ShadowSettings
from sidecar.model import Outcome
from sidecar.ports import AccessRefused
from sidecar.telemetry import (
    CANARY,
    PRODUCTION,
    SHADOW,
    AgreementChanged,
    BreakerChanged,
    CacheLookup,
    CanaryRan,
    ConsumerLag,
    ConversationDecided,
    ConversationEmitted,
    DeadLettered,
    DeliveryRefused,
    FaultRaised,
    InjectionFlagged,
    JudgeCall,
    JudgeFailed,
    LabelRead,
    ModelVersionServed,
    Readiness,
    Rebalanced,
    ReviewRouted,
    SelfPreference,
    ShadowDropped,
    ShadowJudged,
    StateRestored,
    StateWritten,
    TraceDecided,
    TracePlanned,
    TurnRead,
    TurnsPublished,
    TurnsReread,
    VerdictEmitted,
)

log = logging.getLogger("sidecar.drift")

# The longest label value taken from a trace or the model service (longer ones are cut).
MAX_LABEL_CHARS = 128
CUT_MARK = "…"


def bounded_label(value: str) -> str:
    """``value`` cut to MAX_LABEL_CHARS characters, the cut marked (``value`` when shorter)."""
    if len(value) <= MAX_LABEL_CHARS:
        return value
    return value[: MAX_LABEL_CHARS - len(CUT_MARK)] + CUT_MARK


# Label value of judge_model_version when no answer arrived (not judged, judge unreachable).
NO_MODEL_VERSION = "none"
# The criterion outcome label of an injection-suspected PASS (see the module docstring).
HELD = "HELD"

JUDGE_DURATION_BUCKETS = (
    0.1,
    0.25,
    0.5,
    1.0,
    2.0,
    3.0,
    5.0,
    8.0,
    13.0,
    20.0,
    30.0,
    45.0,
    60.0,
    90.0,
    120.0,
)

# The service's drift monitor remembers its latest decisions only (each is also a log
# line and a count in sidecar_drift_alarms_total).
DRIFT_DECISIONS_KEPT = 1000

# From a trace's end to its verdict (the decision wait, judging, queueing).
VERDICT_LATENCY_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)


# A labelled family whose children the per-verdict paths keep (Metrics.child).
_Family = TypeVar("_Family", Counter, Gauge, Histogram)


class Metrics:
    """The metric families, bound to one registry (a fresh one per test).

    ``exemplar_memory``: set in ``--workers`` workers, where the multiprocess
    files drop exemplars; the latest exemplar of each verdict series is kept
    there too, for the supervisor (:mod:`sidecar.adapters.exemplars`).
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        max_agents: int = 50,
        max_model_versions: int = 50,
        drift: DriftSettings | None = None,
        shadow: ShadowSettings | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        # Before any family: a scrape lets the drift attribution gauges catch up first.
        self.registry.register(_DriftRefresh(self))
        self._monotonic = monotonic
        # (time of the latest drift observation, monotonic time it was fed).
        self._drift_clock: tuple[float, float] | None = None
        self.max_agents = max_agents
        self.max_model_versions = max_model_versions
        self._agents: set[tuple[str, str]] = set()
        self._model_versions: set[str] = {NO_MODEL_VERSION}
        # Labelled children of the per-verdict counters, by family and label values
        # (``labels()`` per verdict, check and criterion showed in profiles).
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        r = self.registry

        # Outcomes
        self.cases = Counter(
            "sidecar_cases_total",
            "Evaluated (trace, rubric) and (conversation, rubric) cases by outcome.",
            [
                "rubric",
                "rubric_version",
                "judge_model",
                "agent",
                "agent_version",
                "outcome",
                "scope",
            ],
            registry=r,
        )
        self.check_results = Counter(
            "sidecar_check_results_total",
            "Deterministic check results.",
            ["rubric", "rubric_version", "check", "outcome", "scope"],
            registry=r,
        )
        self.criterion_verdicts = Counter(
            "sidecar_criterion_verdicts_total",
            "Judge criterion verdicts (SKIPPED when the case was not judged; HELD: an"
            " injection-suspected PASS, not a pass until reviewed), by the model version"
            " that served them (none: no answer).",
            [
                "rubric",
                "rubric_version",
                "judge_model",
                "judge_model_version",
                "criterion",
                "gate",
                "outcome",
                "scope",
            ],
            registry=r,
        )
        self.verdict_latency = Histogram(
            "sidecar_verdict_latency_seconds",
            "From the end of the evaluated trace to its verdict decided (decision wait, "
            "judging, queueing), per trace-scope verdict; exemplars name the trace.",
            ["rubric"],
            buckets=VERDICT_LATENCY_BUCKETS,
            registry=r,
        )
        self.exemplar_memory: ExemplarMemory | None = None
        self.duplicate_verdicts = Counter(
            "sidecar_duplicate_verdicts_total",
            "Verdicts emitted again for an idempotency key seen before (at-least-once redelivery).",
            registry=r,
        )

        self.internal_errors = Counter(
            "sidecar_internal_errors_total",
            "Unexpected failures while evaluating a trace (a bug; see the logs).",
            ["stage"],
            registry=r,
        )

        # Judge
        self.judge_errors = Counter(
            "sidecar_judge_errors_total",
            "Judge calls that ended in ERROR, by reason.",
            ["judge_model", "reason"],
            registry=r,
        )
        self.judge_duration = Histogram(
            "sidecar_judge_request_duration_seconds",
            "Wall time of one judge HTTP request.",
            ["judge_model"],
            buckets=JUDGE_DURATION_BUCKETS,
            registry=r,
        )
        self.judge_tokens = Counter(
            "sidecar_judge_tokens_total",
            "Tokens used by the judge, by kind (input|output).",
            ["judge_model", "kind"],
            registry=r,
        )
        self.judge_cost = Counter(
            "sidecar_judge_cost_usd_total",
            "Judge cost in US dollars from the configured price table.",
            ["judge_model"],
            registry=r,
        )
        self.judge_breaker_open = Gauge(
            "sidecar_judge_breaker_open",
            "1 while the judge circuit breaker is open.",
            ["judge_model"],
            multiprocess_mode="livemax",
            registry=r,
        )
        self.judge_enabled = Gauge(
            "sidecar_judge_enabled",
            "1 while the LLM judge is on; 0 while it is off, with the reason "
            "(configured|no_credentials|no_judge_criteria). Off with no_credentials: "
            "the rubrics' judge criteria are SKIPPED.",
            ["reason"],
            multiprocess_mode="livemax",
            registry=r,
        )
        self.judge_model_version_info = Gauge(
            "sidecar_judge_model_version_info",
            "1 for the model version that last answered for a judge model (what the model "
            "service says served it; unknown when it did not say); the one it replaced is removed.",
            ["judge_model", "judge_model_version"],
            multiprocess_mode="livemax",
            registry=r,
        )
        self.self_preference = Counter(
            "sidecar_judge_self_preference_total",
            "Cases where the judge model is of the same family as the agent's model.",
            ["rubric", "judge_model"],
            registry=r,
        )
        self.sampling_decisions = Counter(
            "sidecar_sampling_decisions_total",
            "Judge sampling decisions.",
            ["rubric", "decision", "reason"],
            registry=r,
        )
        self.injection_suspected = Counter(
            "sidecar_injection_suspected_total",
            "Cases whose data looked like an injection attempt.",
            ["rubric"],
            registry=r,
        )
        self.review_cases = Counter(
            "sidecar_review_cases_total",
            "Cases routed to human review, by reason.",
            ["rubric", "reason"],
            registry=r,
        )
        self.cache_requests = Counter(
            "sidecar_verdict_cache_requests_total",
            "Judge verdict cache lookups (hit|miss).",
            ["result"],
            registry=r,
        )
        self.human_agreement = Gauge(
            "sidecar_judge_human_agreement",
            "Rolling agreement between judge and human labels (kappa|agreement).",
            ["rubric", "rubric_version", "judge_model", "criterion", "statistic"],
            multiprocess_mode="livemostrecent",
            registry=r,
        )
        self.human_labels = Counter(
            "sidecar_human_labels_total",
            "Human labels received for reviewed cases.",
            ["rubric", "criterion"],
            registry=r,
        )

        self.human_labels_unmatched = Counter(
            "sidecar_human_labels_unmatched_total",
            "Human labels that matched no remembered judged case (or were malformed).",
            ["reason"],
            registry=r,
        )

        # Pipeline
        self.trace_decisions = Counter(
            "sidecar_trace_decisions_total",
            "Traces read, by the one path each took (closed set: "
            + "|".join(Decision)
            + "); they add up to the traces read, dead_lettered counting records.",
            ["decision"],
            registry=r,
        )
        for decision in Decision:
            self.trace_decisions.labels(decision=decision.value)
        self.flagged_traces = Counter(
            "sidecar_flagged_traces_total",
            "Traces evaluated with evidence flagged incomplete or suspect, by flag "
            "(incomplete|partial|duplicate_span_ids|impossible_timing|unreadable_values).",
            ["flag"],
            registry=r,
        )
        self.rebalances = Counter(
            "sidecar_kafka_rebalances_total",
            "Partitions handed to or taken from this replica by the consumer group "
            "(event=assigned|revoked); steady growth means replicas miss their heartbeats.",
            ["event"],
            registry=r,
        )
        self.ready = Gauge(
            "sidecar_ready",
            "1 while this process is ready (consumer joined, records acknowledged); "
            "with --workers, the sum over live workers.",
            multiprocess_mode="livesum",
            registry=r,
        )
        self.content_not_captured = Counter(
            "sidecar_content_not_captured_total",
            "Traces evaluated with content not captured by the producer, by field "
            "(input|answer|tool_calls|tool_call_arguments|tool_call_results); "
            "the warning log names the producer setting.",
            ["field"],
            registry=r,
        )
        self.content_unreadable = Counter(
            "sidecar_content_unreadable_total",
            "Traces evaluated with content captured in a shape no reader understands, by "
            "field (input|answer|tool_calls|tool_call_arguments|tool_call_results); the "
            "warning log names the attribute or event and the span.",
            ["field"],
            registry=r,
        )
        self.fragment_traces = Counter(
            "sidecar_fragment_traces_total",
            "Traces that are one LLM call without an agent span, under a rubric that "
            "expects an agent run (flagged incomplete; the agent needs a span around each run).",
            ["rubric"],
            registry=r,
        )
        self.rubric_info = Gauge(
            "sidecar_rubric_info",
            "Loaded rubrics (value 1).",
            ["rubric", "rubric_version", "judge_model"],
            multiprocess_mode="livemax",
            registry=r,
        )
        self.rubric_unversioned_changes = Counter(
            "sidecar_rubric_unversioned_changes_total",
            "Rubrics loaded whose content changed without a version bump "
            "(hash differs from the fingerprint recorded for that version).",
            ["rubric", "rubric_version"],
            registry=r,
        )
        self.build_info = Gauge(
            "sidecar_build_info",
            "Build information.",
            ["version"],
            multiprocess_mode="livemax",
            registry=r,
        )
        self.build_info.labels(version=__version__).set(1)

        # Canary sets: apart from the production families above.
        self.canary_agreement = Gauge(
            "sidecar_canary_agreement",
            "Judge against human labels on the rubric's canary set, last run "
            "(statistic: kappa|agreement|error_rate|flip_rate).",
            [
                "rubric",
                "rubric_version",
                "judge_model",
                "judge_model_version",
                "criterion",
                "statistic",
            ],
            multiprocess_mode="livemostrecent",
            registry=r,
        )
        self.canary_kappa_threshold = Gauge(
            "sidecar_canary_kappa_threshold",
            "Kappa a gated criterion's canary must reach (the rubric's calibration threshold, "
            "else 0.4).",
            ["rubric", "criterion"],
            multiprocess_mode="livemax",
            registry=r,
        )
        # Drift: the detectors of sidecar.drift.attribute, fed by verdicts and canary cases.
        self.drift = DriftMonitor(drift, remember=DRIFT_DECISIONS_KEPT)
        # By the stream's base key (one set of series per check or criterion).
        self._drift_children: dict[StreamKey, _DriftSeries] = {}
        self.drift_evalue = Gauge(
            "sidecar_drift_evalue",
            "Evidence that a stream moved from its baseline (1: none; the alarm is at 2/alpha): "
            "stream agent = the pass rate of a gated check or criterion (down), judge = the "
            "judge's disagreement with the human labels on canary cases (up).",
            ["rubric", "criterion", "stream"],
            multiprocess_mode="livemax",
            registry=r,
        )
        self.drift_attribution = Gauge(
            "sidecar_drift_attribution",
            "1 on the cause of the latest drift alarm of a check or criterion (none|agent|judge), "
            "held for the guard window after it was decided; 0 on the others.",
            ["rubric", "criterion", "cause"],
            multiprocess_mode="livemax",
            registry=r,
        )
        self.drift_alarms = Counter(
            "sidecar_drift_alarms_total",
            "Drift alarms by attribution (stream: the detector that alarmed).",
            ["rubric", "criterion", "stream", "attribution"],
            registry=r,
        )
        self.drift_threshold = Gauge(
            "sidecar_drift_evalue_threshold",
            "The e-value at which a drift detector alarms (2 / alpha).",
            multiprocess_mode="livemax",
            registry=r,
        )
        self.drift_threshold.set(2.0 / self.drift.settings.alpha)
        self.canary_runs = Counter(
            "sidecar_canary_runs_total",
            "Canary runs, by result (passed|failed: a gated criterion under its threshold or "
            "too many judge errors).",
            ["rubric", "result"],
            registry=r,
        )
        self.canary_judge = CanaryJudgeAccounting(r, self.cache_requests)
        self.conversations = ConversationMetrics(r)
        self.shadow = ShadowMetrics(r, shadow)
        self.undeliverable = Counter(
            "sidecar_undeliverable_records_total",
            "Output records Kafka refused for good (too large, not authorised past "
            "kafka.delivery.operator_wait_s, ...), by kind and reason; result=dead_lettered "
            "went to the dead-letter topic, lost did not (see the logs).",
            ["kind", "reason", "result"],
            registry=r,
        )
        self.delivery_refusals = Counter(
            "sidecar_delivery_refusals_total",
            "Records refused by Kafka on one attempt, by kind and reason (retried unless "
            "dead-lettered).",
            ["kind", "reason"],
            registry=r,
        )

        # Statistics read at scrape time, and event counts shown with them.
        self._watched: list[Callable[[], object]] = []
        self._counted: Samples = {family.name: {} for family in STAT_FAMILIES}
        # Canary agreement series written by each (rubric, criterion)'s last run.
        self._canary_series: dict[tuple[str, str], set[tuple[str, ...]]] = {}
        r.register(_StatsCollector(self))

    # -- the telemetry port (sidecar.telemetry) ------------------------------------------

    def watch(self, stats: Callable[[], object]) -> None:
        """Read ``stats()`` (a statistics object, or a list of them) at every scrape."""
        self._watched.append(stats)

    def stat_samples(self) -> Samples:
        found: list[object] = []
        for read in self._watched:
            value = read()
            found.extend(value if isinstance(value, list | tuple) else [value])
        samples = _samples(found, self._counted)
        samples["sidecar_drift_streams"][()] = float(len(self.drift.streams))
        samples["sidecar_drift_streams_retired_total"][()] = float(self.drift.retired)
        samples["sidecar_drift_results_dropped_total"][()] = float(self.drift.dropped)
        return samples

    def _count(self, name: str, *labels: str, amount: float = 1.0) -> None:
        series = self._counted[name]
        series[labels] = series.get(labels, 0.0) + amount

    def event(self, event: object) -> None:
        """Count one event of :mod:`sidecar.telemetry` in its families."""
        match event:
            case VerdictEmitted():
                record_verdict(self, event.verdict, event.span_id)
                if not event.duplicate:
                    self._drift(verdict_observation(event.verdict))
                if event.duplicate:
                    self.duplicate_verdicts.inc()
            case TracePlanned():
                for flag in event.flags:
                    self.flagged_traces.labels(flag=flag).inc()
                for content in event.transcript.capture.missing:
                    self.content_not_captured.labels(field=content.value).inc()
                for content in event.transcript.capture.unreadable_fields:
                    self.content_unreadable.labels(field=content.value).inc()
                for case in event.cases:
                    if case.fragment:
                        self.fragment_traces.labels(rubric=case.rubric).inc()
                    record_sampling(self, case.rubric, case.decision, case.reason)
                    if case.injection_suspected:
                        self.injection_suspected.labels(rubric=case.rubric).inc()
            case TraceDecided():
                decision = Decision(event.decision).value
                self.child(self.trace_decisions, decision).inc(event.count)
            case SelfPreference():
                self.self_preference.labels(
                    rubric=event.rubric, judge_model=event.judge_model
                ).inc()
            case FaultRaised():
                self.internal_errors.labels(stage=event.stage).inc(event.count)
            case DeliveryRefused():
                self.delivery_refusals.labels(kind=event.kind, reason=event.reason).inc(event.count)
                self.internal_errors.labels(stage="emit").inc(event.count)
            case DeadLettered():
                result = "dead_lettered" if event.delivered else "lost"
                self.undeliverable.labels(kind=event.kind, reason=event.reason, result=result).inc()
            case Rebalanced():
                self.rebalances.labels(event=event.event).inc()
            case Readiness():
                self.ready.set(1 if event.ready else 0)
            case ReviewRouted():
                for reason in event.reasons:
                    self.review_cases.labels(rubric=event.rubric, reason=reason).inc()
            case LabelRead():
                if event.reason:
                    self.human_labels_unmatched.labels(reason=event.reason).inc()
                else:
                    self.human_labels.labels(rubric=event.rubric, criterion=event.criterion).inc()
            case AgreementChanged():
                labels = (event.rubric, event.rubric_version, event.judge_model, event.criterion)
                if event.kappa is not None:
                    self.human_agreement.labels(*labels, "kappa").set(event.kappa)
                if event.agreement is not None:
                    self.human_agreement.labels(*labels, "agreement").set(event.agreement)
            case TurnsPublished():
                if event.published:
                    self._count(
                        "sidecar_conversation_turns_total", "published", amount=event.published
                    )
                if event.without_key:
                    self._count(
                        "sidecar_conversation_turns_total", "no_key", amount=event.without_key
                    )
            case TurnRead():
                self._count("sidecar_conversation_turns_total", event.result)
            case ConversationDecided():
                self.conversations.decided.labels(reason=event.reason).inc()
                self.conversations.turns_per_conversation.observe(event.turns)
            case ConversationEmitted():
                self.conversations.verdict_seconds.observe(event.seconds)
            case StateWritten():
                self.conversations.state_records.labels(kind=event.kind).inc()
            case StateRestored():
                self.conversations.restored.inc(event.conversations)
                self.conversations.restore_seconds.observe(event.seconds)
            case TurnsReread():
                result = "complete" if event.complete else "partial"
                self.conversations.rereads.labels(result=result).inc()
            case ShadowJudged():
                self.shadow.judged(event)
            case ShadowDropped():
                self.shadow.dropped_case(event)
            case JudgeCall() if event.purpose == SHADOW:
                self.shadow.call(event)
            case JudgeFailed() if event.purpose == SHADOW:
                pass  # counted by outcome (error) in sidecar_shadow_comparisons_total
            case JudgeCall():
                self._judge_call(event)
            case JudgeFailed():
                accounts = self.canary_judge if event.purpose == CANARY else self
                accounts.judge_errors.labels(judge_model=event.model, reason=event.reason).inc()
            case CacheLookup():
                self.cache_requests.labels(result="hit" if event.hit else "miss").inc()
            case BreakerChanged():
                self.judge_breaker_open.labels(judge_model=event.model).set(1 if event.open else 0)
            case ModelVersionServed():
                info = self.judge_model_version_info
                if event.previous is not None:
                    retire(info, event.model, bounded_label(event.previous), last=math.nan)
                served = bounded_label(event.version)
                info.labels(judge_model=event.model, judge_model_version=served).set(1)
            case InjectionFlagged():
                self.injection_suspected.labels(rubric=event.rubric).inc()
            case CanaryRan():
                self._canary(event)
                for verdict, human in event.cases:
                    self._drift(verdict_observation(verdict, human))
            case _:
                pass

    def _judge_call(self, call: JudgeCall) -> None:
        if call.purpose not in (PRODUCTION, CANARY):
            return
        accounts = self.canary_judge if call.purpose == CANARY else self
        if call.seconds is not None:
            accounts.judge_duration.labels(judge_model=call.model).observe(call.seconds)
        if call.error is None:
            tokens = accounts.judge_tokens
            tokens.labels(judge_model=call.model, kind="input").inc(call.input_tokens)
            tokens.labels(judge_model=call.model, kind="output").inc(call.output_tokens)
            if call.cost_usd > 0:
                accounts.judge_cost.labels(judge_model=call.model).inc(call.cost_usd)

    def _drift(self, observation: Observation | None) -> None:
        if observation is None:
            return
        monitor = self.drift
        decided = monitor.observe(observation) + monitor.settle(observation.time)
        for d in decided:
            self.drift_alarms.labels(d.key.rubric, d.key.name, d.stream, d.attribution).inc()
            # One line per alarm (the gauges restart at 1 once a detector alarmed); info, as
            # the repeat filter would hold back the second alarm of a warning's template.
            log.info(
                "drift alarm: %s %s %s (%s%s): %s %s -> %s; e-value %.1f (agent %.1f, judge %s); %s",
                d.key.rubric,
                d.key.kind,
                d.key.name,
                d.key.scope,
                f", agent version {d.key.agent_version}" if d.key.agent_version else "",
                d.measure,
                d.direction,
                d.attribution,
                d.alarm.e_value,
                d.agent_e_value,
                "-" if d.judge_e_value is None else f"{d.judge_e_value:.1f}",
                d.reason,
            )
        for base in monitor.take_gone():
            # A check or criterion with no stream left (retired): its series go too.
            if self._drift_children.pop(base, None) is not None:
                for stream_label in ("agent", "judge"):
                    retire(self.drift_evalue, base.rubric, base.name, stream_label, last=math.nan)
                for cause in CAUSES:
                    retire(self.drift_attribution, base.rubric, base.name, cause, last=math.nan)
        now = max(observation.time, self._drift_now())
        self._drift_clock = (now, self._monotonic())
        rubric = observation.rubric
        # The streams the observation fed: a verdict's are its agent version's; a canary
        # case's, the criterion's own.
        for stream in monitor.fed:
            base = stream.base
            shown = self._drift_children.get(base)
            if shown is None:
                # Bounded as the monitor's streams are (max_streams), and gone with them.
                name = base.name
                shown = self._drift_children[base] = _DriftSeries(
                    self.drift_evalue.labels(rubric, name, "agent"),
                    self.drift_evalue.labels(rubric, name, "judge"),
                    [self.drift_attribution.labels(rubric, name, c) for c in CAUSES],
                )
            # One series per criterion: the strongest evidence, and the gravest cause
            # (judge before agent), over its agent versions' streams. A gauge is written
            # when its value moves (a steady stream's e-value stays put for long runs).
            siblings = monitor.siblings_of(base)
            fed = [s.passes.e_value for s in siblings if s.passes.seen]
            evidence = max(fed, default=stream.passes.e_value)
            if shown.agent_value != evidence:
                shown.agent_value = evidence
                shown.agent.set(evidence)
            if stream.canaries:
                judged = stream.judge.e_value
                if shown.judge_value != judged:
                    shown.judge_value = judged
                    shown.judge.set(judged)
            # On the detectors' clock, which never goes back: a verdict decided out of
            # order does not bring back a cause a scrape has already let go.
            shown.show_cause(siblings, now)

    def _drift_now(self) -> float:
        """The detectors' clock: the latest observation's time, moved on since it came."""
        if self._drift_clock is None:
            return -math.inf
        seen, at = self._drift_clock
        return seen + max(0.0, self._monotonic() - at)

    def refresh_drift(self) -> None:
        """Let the attribution gauges drop a cause whose guard window has passed.

        A decision is shown for one guard window; a criterion that sees no more
        verdicts (its rubric removed, its traffic stopped) must not show it for
        ever, or its alert would never resolve. Run at every scrape (first, by
        ``_DriftRefresh``) and every sync of a worker: the detectors' clock, the
        time of the latest observation, is moved on by the time passed since.
        """
        if self._drift_clock is None:
            return
        now = self._drift_now()
        monitor = self.drift
        for base, shown in self._drift_children.items():
            shown.show_cause(monitor.siblings_of(base), now)

    def _canary(self, run: CanaryRan) -> None:
        self.canary_runs.labels(
            rubric=run.rubric, result="passed" if run.passed else "failed"
        ).inc()
        gauge = self.canary_agreement
        for row in run.criteria:
            base = (
                run.rubric,
                run.rubric_version,
                run.judge_model,
                run.judge_model_version,
                row.criterion,
            )
            written: set[tuple[str, ...]] = set()
            for statistic, value in row.statistics.items():
                if value is None:
                    continue
                labels = (*base, statistic)
                gauge.labels(*labels).set(value)
                written.add(labels)
            key = (run.rubric, row.criterion)
            # Series of an earlier version, or undefined now, go: alerts never see stale values.
            for stale in self._canary_series.get(key, set()) - written:
                retire(gauge, *stale, last=math.nan)
            self._canary_series[key] = written
            if row.gate:
                self.canary_kappa_threshold.labels(rubric=run.rubric, criterion=row.criterion).set(
                    row.threshold
                )

    def child(self, family: _Family, *values: str) -> _Family:
        """``family.labels(*values)``, remembered: these children are never removed.

        The memory is bounded: past 10,000 children it starts again (a miss
        only costs a ``labels()`` call).
        """
        key = (id(family), values)
        found: _Family | None = self._children.get(key)
        if found is None:
            if len(self._children) >= 10_000:
                self._children.clear()
            found = self._children[key] = family.labels(*values)
        return found

    def agent_labels(self, agent: str | None, version: str | None) -> tuple[str, str]:
        """Cap agent label cardinality: after ``max_agents`` pairs, new ones read ``other``."""
        pair = (bounded_label(agent or "unknown"), bounded_label(version or "unknown"))
        if pair in self._agents:
            return pair
        if len(self._agents) < self.max_agents:
            self._agents.add(pair)
            return pair
        return ("other", "other")

    def model_version_label(self, version: str | None) -> str:
        """Cap judge model version label values; ``none`` when no answer arrived."""
        value = bounded_label(version or NO_MODEL_VERSION)
        if value in self._model_versions:
            return value
        if len(self._model_versions) <= self.max_model_versions:
            self._model_versions.add(value)
            return value
        return "other"


class ConversationMetrics:
    """The conversation stage and the turns the trace stage hands it."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.decided = Counter(
            "sidecar_conversations_decided_total",
            "Conversations handed on for evaluation, by reason (idle|turn_limit|max_age|evicted).",
            ["reason"],
            registry=registry,
        )
        self.turns_per_conversation = Histogram(
            "sidecar_conversation_length_turns",
            "Turns per decided conversation.",
            buckets=(1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 200, 500),
            registry=registry,
        )
        self.verdict_seconds = Histogram(
            "sidecar_conversation_verdict_seconds",
            "From deciding a conversation to its verdict emitted (checks, judge, delivery).",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0),
            registry=registry,
        )
        self.state_records = Counter(
            "sidecar_conversation_state_records_total",
            "Records written to the conversation state topic, by kind (state|tombstone).",
            ["kind"],
            registry=registry,
        )
        self.restored = Counter(
            "sidecar_conversation_state_restored_total",
            "Decided conversations restored from the state topic on partition assignment.",
            registry=registry,
        )
        self.restore_seconds = Histogram(
            "sidecar_conversation_state_restore_seconds",
            "Time to read the state topic's assigned partitions on assignment.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
            registry=registry,
        )
        self.rereads = Counter(
            "sidecar_conversation_rereads_total",
            "Re-opened conversations whose earlier turns were read back from eval_turns, by "
            "result (complete|partial: some were gone).",
            ["result"],
            registry=registry,
        )


class CanaryJudgeAccounting:
    """What canary judge calls cost and how they ended, counted apart from production."""

    def __init__(self, registry: CollectorRegistry, cache_requests: Counter) -> None:
        self.judge_errors = Counter(
            "sidecar_canary_judge_errors_total",
            "Canary judge calls that ended in ERROR, by reason.",
            ["judge_model", "reason"],
            registry=registry,
        )
        self.judge_duration = Histogram(
            "sidecar_canary_judge_request_duration_seconds",
            "Wall time of one canary judge HTTP request.",
            ["judge_model"],
            buckets=JUDGE_DURATION_BUCKETS,
            registry=registry,
        )
        self.judge_tokens = Counter(
            "sidecar_canary_judge_tokens_total",
            "Tokens used by canary judge calls, by kind (input|output).",
            ["judge_model", "kind"],
            registry=registry,
        )
        self.judge_cost = Counter(
            "sidecar_canary_judge_cost_usd_total",
            "Canary judge cost in US dollars from the configured price table.",
            ["judge_model"],
            registry=registry,
        )
        # Canary calls bypass the verdict cache, so this is never written for them.
        self.cache_requests = cache_requests


@dataclass(slots=True)
class _DriftSeries:
    """The drift gauges of one check or criterion, and the values they were last set to."""

    agent: Gauge
    judge: Gauge
    causes: list[Gauge]
    agent_value: float | None = None
    judge_value: float | None = None
    cause: str = ""

    def show_cause(self, siblings: Sequence[CriterionDrift], now: float) -> None:
        """The gravest cause held now by any of the criterion's agent versions' streams."""
        held = {s.current(now) for s in siblings}
        cause = "judge" if "judge" in held else "agent" if "agent" in held else "none"
        if self.cause != cause:
            self.cause = cause
            for label, child in zip(CAUSES, self.causes, strict=True):
                child.set(float(label == cause))


def record_verdict(metrics: Metrics, verdict: Verdict, span_id: str | None = None) -> None:
    """Count one emitted verdict in the outcome families, with its exemplar."""
    agent, agent_version = metrics.agent_labels(verdict.agent, verdict.agent_version)
    rubric, rubric_version, scope = verdict.rubric_id, verdict.rubric_version, verdict.scope
    exemplar = verdict_exemplar(verdict.trace_id, span_id)
    count = _exemplified(metrics, exemplar)
    count(
        metrics.cases,
        rubric,
        rubric_version,
        verdict.judge_model,
        agent,
        agent_version,
        verdict.outcome.value,
        scope,
    )
    for check in verdict.checks:
        count(metrics.check_results, rubric, rubric_version, check.name, check.outcome.value, scope)
    version = metrics.model_version_label(verdict.judge_model_version)
    for criterion in verdict.criteria:
        held = verdict.injection_suspected and criterion.outcome is Outcome.PASS
        count(
            metrics.criterion_verdicts,
            rubric,
            rubric_version,
            verdict.judge_model,
            version,
            criterion.name,
            "true" if criterion.gate else "false",
            HELD if held else criterion.outcome.value,
            scope,
        )
    record_latency(metrics, verdict, exemplar)


def _exemplified(metrics: Metrics, exemplar: dict[str, str]) -> Callable[..., None]:
    """``count(family, *labels)``: one increment with ``exemplar`` (remembered for workers)."""
    memory = metrics.exemplar_memory
    now = time.time()

    def count(family: Counter, *values: str) -> None:
        metrics.child(family, *values).inc(exemplar=exemplar)
        if memory is not None:
            labels = dict(zip(family._labelnames, values, strict=True))
            memory.remember(family._name + "_total", labels, exemplar, 1.0, now)

    return count


def record_latency(metrics: Metrics, verdict: Verdict, exemplar: dict[str, str]) -> None:
    """Observe a trace verdict's latency (trace end to decision), when both times are known."""
    if verdict.scope != "trace" or verdict.trace_end is None or verdict.decided_at is None:
        return
    seconds = max(0.0, (verdict.decided_at - verdict.trace_end) / 1e9)
    metrics.child(metrics.verdict_latency, verdict.rubric_id).observe(seconds, exemplar=exemplar)
    if metrics.exemplar_memory is not None:
        labels = {"rubric": verdict.rubric_id, "le": bucket_bound(seconds, VERDICT_LATENCY_BUCKETS)}
        metrics.exemplar_memory.remember(
            "sidecar_verdict_latency_seconds_bucket", labels, exemplar, seconds, time.time()
        )


def record_sampling(metrics: Metrics, rubric: str, decision: str, reason: str) -> None:
    metrics.child(metrics.sampling_decisions, rubric, decision, reason).inc()


def record_rubrics(metrics: Metrics, rubrics: Iterable[Rubric]) -> None:
    """The loaded rubrics: the info gauge, and each one edited without a version bump counted."""
    for rubric in rubrics:
        metrics.rubric_info.labels(
            rubric=rubric.id, rubric_version=rubric.version, judge_model=rubric.judge_model
        ).set(1)
        if check_fingerprint(rubric).warning:
            metrics.rubric_unversioned_changes.labels(
                rubric=rubric.id, rubric_version=rubric.version
            ).inc()


# -- statistics read at scrape time --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StatFamily:
    """A family whose samples are read from components' statistics when scraped.

    ``mode`` is how ``--workers`` combine a gauge's samples (one of
    prometheus-client's multiprocess modes, :data:`GAUGE_MODES`); every gauge
    declares one, so a new gauge cannot silently get a mode that keeps exited
    workers' values. Counters are summed.
    """

    name: str
    documentation: str
    kind: str  # "counter" | "gauge"
    labels: tuple[str, ...] = ()
    mode: str = ""

    def __post_init__(self) -> None:
        if self.kind == "gauge" and self.mode not in GAUGE_MODES:
            raise ValueError(
                f"gauge {self.name} must declare how --workers combine it: mode= one of "
                f"{sorted(GAUGE_MODES)}, got {self.mode!r}"
            )


# How ``--workers`` may combine a gauge: only over workers alive now, so the value of a
# worker that exited never lingers.
GAUGE_MODES = frozenset({"livesum", "livemax", "livemin", "livemostrecent"})


STAT_FAMILIES: tuple[StatFamily, ...] = (
    StatFamily(
        "sidecar_kafka_records_total",
        "Kafka records consumed, by result (ok|dead_letter).",
        "counter",
        ("result",),
    ),
    StatFamily(
        "sidecar_dead_letters_total",
        "Records sent to the dead-letter topic, by reason.",
        "counter",
        ("reason",),
    ),
    StatFamily("sidecar_spans_total", "Spans decoded.", "counter"),
    StatFamily(
        "sidecar_traces_decided_total",
        "Traces handed from the assembler to evaluation, by reason.",
        "counter",
        ("reason",),
    ),
    StatFamily(
        "sidecar_evictions_total",
        "Bound hits (open_traces|spans_per_trace|open_conversations|conversation_state).",
        "counter",
        ("kind",),
    ),
    StatFamily("sidecar_open_traces", "Traces being assembled.", "gauge", mode="livesum"),
    StatFamily(
        "sidecar_drift_streams",
        "Drift streams watched (one per check or criterion and agent version; at most "
        "drift.max_streams per process).",
        "gauge",
        mode="livesum",
    ),
    StatFamily(
        "sidecar_drift_streams_retired_total",
        "Drift streams retired after a week without a verdict (an agent version that stopped "
        "serving, a check or criterion removed).",
        "counter",
    ),
    StatFamily(
        "sidecar_drift_results_dropped_total",
        "Check and criterion results not fed to a drift detector: drift.max_streams streams "
        "were in use.",
        "counter",
    ),
    StatFamily(
        "sidecar_late_spans_total", "Spans that arrived after their trace was decided.", "counter"
    ),
    StatFamily("sidecar_logs_total", "Log records decoded from the logs topic.", "counter"),
    StatFamily(
        "sidecar_late_logs_total",
        "Log records that arrived after their trace was decided (ignored).",
        "counter",
    ),
    StatFamily(
        "sidecar_logs_without_trace_total",
        "Log records without a trace id (ignored: they join no trace).",
        "counter",
    ),
    StatFamily(
        "sidecar_orphan_traces_total",
        "Traces decided without their root span (check partition_traces_by_id).",
        "counter",
    ),
    StatFamily(
        "sidecar_consumer_lag",
        "Records behind the partition end.",
        "gauge",
        ("partition",),
        mode="livesum",
    ),
    StatFamily(
        "sidecar_judge_queue_depth",
        "Traces decided and not yet released (planning, judging, sending).",
        "gauge",
        mode="livesum",
    ),
    StatFamily(
        "sidecar_kafka_refused",
        "1 while Kafka refuses this service's principal an operation (READ, WRITE, DESCRIBE) "
        "on a topic or consumer group it is configured to use (one of topic, group is set): "
        "grant the ACL.",
        "gauge",
        labels=("topic", "group", "operation"),
        mode="livemax",
    ),
    StatFamily(
        "sidecar_delivery_failing",
        "1 while records (verdicts, reviews, dead letters) are not acknowledged by Kafka.",
        "gauge",
        mode="livemax",
    ),
    StatFamily(
        "sidecar_conversation_turns_total",
        "Turn records, by result: published|no_key (trace stage); "
        "accepted|duplicate|malformed|unknown_rubric (conversation stage).",
        "counter",
        ("result",),
    ),
    StatFamily(
        "sidecar_open_conversations",
        "Conversations holding turns, not yet decided.",
        "gauge",
        mode="livesum",
    ),
    StatFamily(
        "sidecar_open_conversations_limit",
        "The bound on open conversations (max_open_conversations); over it the least "
        "recently active one is decided early.",
        "gauge",
        mode="livemax",
    ),
    StatFamily(
        "sidecar_conversation_held_turns",
        "Turns held by open conversations.",
        "gauge",
        mode="livesum",
    ),
    StatFamily(
        "sidecar_conversations_reopened_total",
        "Decided conversations re-opened by a late turn (the next verdict is revision n+1).",
        "counter",
    ),
    StatFamily(
        "sidecar_conversations_forgotten_total",
        "Decided conversations dropped from memory (decided_memory); a later turn "
        "starts a new conversation.",
        "counter",
    ),
    StatFamily(
        "sidecar_conversations_partial_total",
        "Conversations opened without some of their earlier turns (flagged partial).",
        "counter",
    ),
    StatFamily(
        "sidecar_conversation_state_conversations",
        "Decided conversations known by place (revision, turn offsets) on this replica; "
        "at most conversations.max_known_per_partition per eval_turns partition.",
        "gauge",
        mode="livesum",
    ),
)

Samples = dict[str, dict[tuple[str, ...], float]]


def _samples(found: Sequence[object], counted: Samples) -> Samples:
    """Every stat family's samples from the components' statistics and the counted events."""
    out: Samples = {family.name: {} for family in STAT_FAMILIES}
    for name, values in counted.items():
        out[name].update(values)

    def add(name: str, value: float, *labels: str) -> None:
        series = out[name]
        series[labels] = series.get(labels, 0.0) + value

    for stats in found:
        match stats:
            case AssemblerStats():
                add("sidecar_spans_total", stats.spans)
                add("sidecar_late_spans_total", stats.late_spans)
                add("sidecar_logs_total", stats.logs)
                add("sidecar_late_logs_total", stats.late_logs)
                add("sidecar_logs_without_trace_total", stats.logs_without_trace)
                add("sidecar_orphan_traces_total", stats.orphan_traces)
                add("sidecar_evictions_total", stats.evicted_open_traces, "open_traces")
                add("sidecar_evictions_total", stats.span_limit_hits, "spans_per_trace")
                add("sidecar_open_traces", stats.open)
            case TraceStats():
                for reason, count in stats.decided.items():
                    add("sidecar_traces_decided_total", count, reason)
            case EngineStats():
                dead = sum(stats.dead_letters.values())
                add("sidecar_kafka_records_total", stats.records - dead, "ok")
                add("sidecar_kafka_records_total", dead, "dead_letter")
                for reason, count in stats.dead_letters.items():
                    add("sidecar_dead_letters_total", count, reason)
            case FlightStats():
                add("sidecar_judge_queue_depth", stats.waiting + stats.planning + stats.finishing)
            case DeliveryStats():
                add("sidecar_delivery_failing", 1.0 if stats.failing else 0.0)
            case AccessRefused():
                topic, group = (stats.name, "") if stats.resource == "topic" else ("", stats.name)
                out["sidecar_kafka_refused"][(topic, group, stats.operation)] = 1.0
            case ConsumerLag():
                for partition, lag in stats.partitions.items():
                    add("sidecar_consumer_lag", lag, str(partition))
            case ConversationStats():
                store = stats.store
                add("sidecar_conversation_turns_total", store.turns, "accepted")
                add("sidecar_conversation_turns_total", store.duplicates, "duplicate")
                add("sidecar_conversation_turns_total", store.unknown_rubric, "unknown_rubric")
                add("sidecar_conversations_reopened_total", store.reopened)
                add("sidecar_conversations_forgotten_total", store.forgotten)
                add("sidecar_conversations_partial_total", store.partial)
                add("sidecar_evictions_total", store.evicted, "open_conversations")
                add("sidecar_evictions_total", store.state_evicted, "conversation_state")
                add("sidecar_open_conversations", stats.open)
                add("sidecar_conversation_held_turns", stats.held_turns)
                add("sidecar_conversation_state_conversations", stats.known)
                out["sidecar_open_conversations_limit"][()] = stats.limit
    for family in STAT_FAMILIES:
        if not family.labels and family.kind == "counter" and () not in out[family.name]:
            out[family.name][()] = 0.0
    return out


class _DriftRefresh:
    """A collector with no samples, registered first: each scrape refreshes the drift causes."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        self._metrics.refresh_drift()
        return iter(())

    def describe(self) -> Iterator[Metric]:
        return iter(())


class _StatsCollector:
    """Reads the watched statistics at every scrape (a prometheus-client custom collector)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        samples = self._metrics.stat_samples()
        for family in STAT_FAMILIES:
            metric: Metric
            if family.kind == "counter":
                metric = CounterMetricFamily(
                    family.name, family.documentation, labels=family.labels
                )
            else:
                metric = GaugeMetricFamily(family.name, family.documentation, labels=family.labels)
            for labels, value in sorted(samples[family.name].items()):
                metric.add_metric(list(labels), value)
            yield metric

    def describe(self) -> Iterator[Metric]:
        return iter(())


def retire(gauge: Gauge, *labels: str, last: float = 0.0) -> None:
    """Remove a gauge's series.

    With ``--workers`` each worker's values live in a file that a removal does
    not reach, so the series is first set to ``last``: 0 for gauges summed
    over workers, NaN for the rest (NaN compares false, so a retired series
    never fires an alert).
    """
    gauge.labels(*labels).set(last)
    gauge.remove(*labels)
