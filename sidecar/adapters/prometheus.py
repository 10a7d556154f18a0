"""Every Prometheus metric sidecar exports, declared in one place.

Names follow ``sidecar_<subsystem>_<name>_<unit>``; counters end in ``_total``.
Label values come only from closed sets: rubric ids and versions, judge models,
check and criterion names (all from rubric files), outcome enums, and agent
names/versions capped at ``max_agents`` distinct values (overflow -> ``other``).
Trace ids and transcript text never become labels.

The judge model version (what the model service says served an answer) is a
label only where DESIGN 13 puts it: ``sidecar_criterion_verdicts_total``
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

The verdict families (cases, check results, criterion verdicts) carry a
``scope`` label: ``trace`` or ``conversation`` (DESIGN 12). The conversation
stage's own families are in :class:`ConversationMetrics`.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from sidecar import __version__
from sidecar.drift.fingerprint import check_fingerprint
from sidecar.evaluate.rubric import Rubric
from sidecar.evaluate.verdict import Verdict
from sidecar.model import Outcome

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


class Metrics:
    """The metric families, bound to one registry (a fresh one per test)."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        max_agents: int = 50,
        max_model_versions: int = 50,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.max_agents = max_agents
        self.max_model_versions = max_model_versions
        self._agents: set[tuple[str, str]] = set()
        self._model_versions: set[str] = {NO_MODEL_VERSION}
        # Labelled children of the per-verdict counters, by family and label values
        # (``labels()`` per verdict, check and criterion showed in profiles).
        self._children: dict[tuple[int, tuple[str, ...]], Counter] = {}
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
        self.judge_model_version_info = Gauge(
            "sidecar_judge_model_version_info",
            "1 for the model version that last answered for a judge model (what the model "
            "service says served it; unknown when it did not say); the one it replaced is removed.",
            ["judge_model", "judge_model_version"],
            multiprocess_mode="livemax",
            registry=r,
        )
        self.judge_queue_depth = Gauge(
            "sidecar_judge_queue_depth",
            "Cases waiting for the judge.",
            multiprocess_mode="livesum",
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
        self.kafka_records = Counter(
            "sidecar_kafka_records_total",
            "Kafka records consumed, by result (ok|dead_letter).",
            ["result"],
            registry=r,
        )
        self.dead_letters = Counter(
            "sidecar_dead_letters_total",
            "Records sent to the dead-letter topic, by reason.",
            ["reason"],
            registry=r,
        )
        self.spans = Counter("sidecar_spans_total", "Spans decoded.", registry=r)
        self.traces_decided = Counter(
            "sidecar_traces_decided_total",
            "Traces handed from the assembler to evaluation, by reason.",
            ["reason"],
            registry=r,
        )
        self.evictions = Counter(
            "sidecar_evictions_total",
            "Bound hits (open_traces|spans_per_trace|open_conversations|conversation_state).",
            ["kind"],
            registry=r,
        )
        self.open_traces = Gauge(
            "sidecar_open_traces",
            "Traces being assembled.",
            multiprocess_mode="livesum",
            registry=r,
        )
        self.late_spans = Counter(
            "sidecar_late_spans_total",
            "Spans that arrived after their trace was decided.",
            registry=r,
        )
        self.logs = Counter(
            "sidecar_logs_total", "Log records decoded from the logs topic.", registry=r
        )
        self.late_logs = Counter(
            "sidecar_late_logs_total",
            "Log records that arrived after their trace was decided (ignored).",
            registry=r,
        )
        self.logs_without_trace = Counter(
            "sidecar_logs_without_trace_total",
            "Log records without a trace id (ignored: they join no trace).",
            registry=r,
        )
        self.orphan_traces = Counter(
            "sidecar_orphan_traces_total",
            "Traces decided without their root span (check partition_traces_by_id).",
            registry=r,
        )
        self.consumer_lag = Gauge(
            "sidecar_consumer_lag",
            "Records behind the partition end.",
            ["partition"],
            multiprocess_mode="livesum",
            registry=r,
        )
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
        self.delivery_failing = Gauge(
            "sidecar_delivery_failing",
            "1 while records (verdicts, reviews, dead letters) are not acknowledged by Kafka.",
            multiprocess_mode="livemax",
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

        # Canary sets (DESIGN 13): apart from the production families above.
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
        self.canary_runs = Counter(
            "sidecar_canary_runs_total",
            "Canary runs, by result (passed|failed: a gated criterion under its threshold or "
            "too many judge errors).",
            ["rubric", "result"],
            registry=r,
        )
        self.canary_judge = CanaryJudgeAccounting(r, self.cache_requests)
        self.conversations = ConversationMetrics(r)

    def child(self, family: Counter, *values: str) -> Counter:
        """``family.labels(*values)``, remembered: these counters are never removed.

        The memory is bounded: past 10,000 children it starts again (a miss
        only costs a ``labels()`` call).
        """
        key = (id(family), values)
        found = self._children.get(key)
        if found is None:
            if len(self._children) >= 10_000:
                self._children.clear()
            found = self._children[key] = family.labels(*values)
        return found

    def agent_labels(self, agent: str | None, version: str | None) -> tuple[str, str]:
        """Cap agent label cardinality: after ``max_agents`` pairs, new ones read ``other``."""
        pair = (agent or "unknown", version or "unknown")
        if pair in self._agents:
            return pair
        if len(self._agents) < self.max_agents:
            self._agents.add(pair)
            return pair
        return ("other", "other")

    def model_version_label(self, version: str | None) -> str:
        """Cap judge model version label values; ``none`` when no answer arrived."""
        value = version or NO_MODEL_VERSION
        if value in self._model_versions:
            return value
        if len(self._model_versions) <= self.max_model_versions:
            self._model_versions.add(value)
            return value
        return "other"


class ConversationMetrics:
    """The conversation stage and the turns the trace stage hands it (DESIGN 12)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.turns = Counter(
            "sidecar_conversation_turns_total",
            "Turn records, by result: published|no_key (trace stage); "
            "accepted|duplicate|malformed|unknown_rubric (conversation stage).",
            ["result"],
            registry=registry,
        )
        self.open = Gauge(
            "sidecar_open_conversations",
            "Conversations holding turns, not yet decided.",
            registry=registry,
        )
        self.open_limit = Gauge(
            "sidecar_open_conversations_limit",
            "The bound on open conversations (max_open_conversations); over it the least "
            "recently active one is decided early.",
            registry=registry,
        )
        self.held_turns = Gauge(
            "sidecar_conversation_held_turns",
            "Turns held by open conversations.",
            registry=registry,
        )
        self.decided = Counter(
            "sidecar_conversations_decided_total",
            "Conversations handed on for evaluation, by reason (idle|turn_limit|max_age|evicted).",
            ["reason"],
            registry=registry,
        )
        self.reopened = Counter(
            "sidecar_conversations_reopened_total",
            "Decided conversations re-opened by a late turn (the next verdict is revision n+1).",
            registry=registry,
        )
        self.forgotten = Counter(
            "sidecar_conversations_forgotten_total",
            "Decided conversations dropped from memory (decided_memory); a later turn "
            "starts a new conversation.",
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
        self.known = Gauge(
            "sidecar_conversation_state_conversations",
            "Decided conversations known by place (revision, turn offsets) on this replica; "
            "at most conversations.max_known_per_partition per eval_turns partition.",
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
        self.partial = Counter(
            "sidecar_conversations_partial_total",
            "Conversations opened without some of their earlier turns (flagged partial).",
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


def record_verdict(metrics: Metrics, verdict: Verdict) -> None:
    """Count one emitted verdict in the outcome families."""
    agent, agent_version = metrics.agent_labels(verdict.agent, verdict.agent_version)
    rubric, rubric_version, scope = verdict.rubric_id, verdict.rubric_version, verdict.scope
    child = metrics.child
    child(
        metrics.cases,
        rubric,
        rubric_version,
        verdict.judge_model,
        agent,
        agent_version,
        verdict.outcome.value,
        scope,
    ).inc()
    for check in verdict.checks:
        child(
            metrics.check_results, rubric, rubric_version, check.name, check.outcome.value, scope
        ).inc()
    version = metrics.model_version_label(verdict.judge_model_version)
    for criterion in verdict.criteria:
        held = verdict.injection_suspected and criterion.outcome is Outcome.PASS
        child(
            metrics.criterion_verdicts,
            rubric,
            rubric_version,
            verdict.judge_model,
            version,
            criterion.name,
            "true" if criterion.gate else "false",
            HELD if held else criterion.outcome.value,
            scope,
        ).inc()


def record_sampling(metrics: Metrics, rubric: str, decision: str, reason: str) -> None:
    metrics.sampling_decisions.labels(rubric=rubric, decision=decision, reason=reason).inc()


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
