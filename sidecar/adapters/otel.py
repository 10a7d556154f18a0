"""Verdict spans through the OpenTelemetry SDK.

Each verdict becomes a span ``evaluate {rubric_id}`` inside the evaluated
trace: its parent is the trace's root span (a remote parent with the SAMPLED
flag, so parent-based samplers keep it) and it links to that span too. One
``gen_ai.evaluation.result`` event is added per check and per criterion.
Provenance, when the verdict has it: ``eval.rubric.hash`` on the
span and on every event, ``eval.judge.model_version`` on the span and on every
criterion event. Every event also names its evaluator
(:func:`evaluator_attributes`: ``gen_ai.evaluation.evaluator.id``, ``.version``,
``.type``) and the version of the conventions followed (``EVALUATION_SCHEMA``).

Each judge call behind the verdict (every attempt, and a cache hit) is a child
span of the verdict span in the GenAI client conventions: ``chat {model}``,
kind CLIENT, ``gen_ai.operation.name``, ``gen_ai.provider.name``,
``gen_ai.request.model``, ``gen_ai.response.model`` (the served version),
``gen_ai.usage.input_tokens``/``output_tokens``, ``error.type`` and an ERROR
status on failure, ``sidecar.judge.attempt``, ``sidecar.judge.cache_hit`` and
``sidecar.judge.purpose`` (:func:`judge_call_attributes`). No prompt or
answer text goes on them. The verdict span starts at its first judge call.

Canary cases (:meth:`VerdictSpans.record_canary`, ``canary {rubric_id}``) and
compared pairs (:meth:`VerdictSpans.record_compare`, ``compare {pair id}``)
are not live traces: each is the root of a trace of its own, with its judge
calls' spans as children, and no evaluation events (the evidence quotes the
transcript). ``sidecar run`` records them when it exports verdict spans; the
one-off commands only when the environment asks for export (:func:`command_spans`).

A conversation verdict goes into the last turn's trace, under its
root, and links to every other turn's root (``eval.link: conversation_turn``,
``eval.turn``); it adds ``eval.scope``, ``gen_ai.conversation.id``,
``eval.conversation.turns`` and ``eval.conversation.revision``.

Export follows the standard OpenTelemetry environment (:func:`exporter_from_env`):

- ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``: no export;
- ``OTEL_TRACES_EXPORTER`` ``otlp`` (the default; gRPC unless
  ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``/``OTEL_EXPORTER_OTLP_PROTOCOL`` says
  ``http/protobuf``), ``otlp_proto_grpc``, ``otlp_proto_http`` or ``console``;
  anything else is a configuration error;
- the OTLP exporters read ``OTEL_EXPORTER_OTLP_*`` (endpoint, headers,
  timeout, compression, certificates) themselves, as the SDK does.

Flushing and shutting down are bounded (``timeout_s``): an unreachable
collector costs at most that long at shutdown; spans not exported by then
are dropped, with a warning.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    set_span_in_context,
)
from opentelemetry.util.types import AttributeValue

from sidecar import __version__
from sidecar.drift.shadow_agreement import compare
from sidecar.errors import ConfigError
from sidecar.evaluate.verdict import Verdict
from sidecar.ingest.otlpjson import request_to_json_line
from sidecar.judge import JudgeResult
from sidecar.judge.pairwise import PairOutcome, PairResult
from sidecar.model import CheckResult, CriterionResult, JudgeCallRecord, Outcome
from sidecar.telemetry import CANARY, PAIRWISE, SHADOW, ShadowJudged

EVENT_NAME = "gen_ai.evaluation.result"
# The GenAI conventions' event text followed (still experimental): semantic-conventions
# 1.38.0's gen_ai.evaluation.result (now kept in semantic-conventions-genai), plus the
# evaluator provenance attributes proposed there in PR #359. Stamped on every event
# (SCHEMA_ATTRIBUTE), so a rename upstream is one line here and visible in the data.
EVALUATION_SCHEMA = "1.38.0+genai-pr359"
SCHEMA_ATTRIBUTE = "sidecar.semconv.evaluation_schema"
EVALUATOR_ID = "gen_ai.evaluation.evaluator.id"
EVALUATOR_VERSION = "gen_ai.evaluation.evaluator.version"
EVALUATOR_TYPE = "gen_ai.evaluation.evaluator.type"
# gen_ai.evaluation.evaluator.type values; human labels are not emitted as events (yet).
LLM_JUDGE, DETERMINISTIC, HUMAN = "llm_judge", "deterministic", "human"
RUBRIC_HASH = "eval.rubric.hash"
JUDGE_MODEL_VERSION = "eval.judge.model_version"
# The judge's own span (GenAI client span conventions, same version as above).
CHAT = "chat"
JUDGE_ATTEMPT = "sidecar.judge.attempt"
JUDGE_CACHE_HIT = "sidecar.judge.cache_hit"
JUDGE_PURPOSE = "sidecar.judge.purpose"
# Canary cases and compared pairs: their spans start traces of their own.
CANARY_TRACE_ID = "eval.canary.trace_id"
SHADOW_TRACE_ID = "sidecar.shadow.trace_id"
COMPARE_PAIR_ID = "sidecar.compare.pair_id"
COMPARE_OUTCOME = "sidecar.compare.outcome"
COMPARE_ORDER = "sidecar.compare.order"

log = logging.getLogger(__name__)


def otlp_exporter(
    environ: Mapping[str, str] | None = None, protocol: str | None = None
) -> SpanExporter:
    env = os.environ if environ is None else environ
    protocol = protocol or (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    )
    if protocol.startswith("http"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http

        return Http()
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc

    return Grpc()


# OTEL_TRACES_EXPORTER values sidecar can honour, and the exporter each builds.
_EXPORTERS: dict[str, Callable[[Mapping[str, str]], SpanExporter]] = {
    "otlp": otlp_exporter,
    "otlp_proto_grpc": lambda env: otlp_exporter(env, "grpc"),
    "otlp_proto_http": lambda env: otlp_exporter(env, "http/protobuf"),
    "console": lambda env: ConsoleSpanExporter(),
}


def exporter_from_env(environ: Mapping[str, str] | None = None) -> SpanExporter | None:
    """The verdict-span exporter the standard variables ask for; None when export is off."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",")]
    names = [n for n in names if n]
    if not names or "none" in names:
        return None
    unknown = [n for n in names if n not in _EXPORTERS]
    if unknown:
        raise ConfigError(
            f"OTEL_TRACES_EXPORTER: {', '.join(unknown)} is not supported for verdict spans; "
            f"use one of {', '.join([*_EXPORTERS, 'none'])}"
        )
    if len(names) > 1:
        log.warning("OTEL_TRACES_EXPORTER lists %s; verdict spans go to %s only", names, names[0])
    return _EXPORTERS[names[0]](env)


def verdict_spans(
    *,
    enabled: bool,
    service_name: str,
    timeout_s: float,
    environ: Mapping[str, str] | None = None,
) -> VerdictSpans:
    """Verdict spans for ``sidecar run``: exported as the environment says, or nowhere."""
    exporter = exporter_from_env(environ) if enabled else None
    if exporter is None:
        return VerdictSpans.disabled()
    return VerdictSpans(tracer_provider(exporter, service_name=service_name), timeout_s=timeout_s)


# Variables that show a command-line user asked for span export (the service exports by default).
_EXPORT_ASKED = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
)


def command_spans(
    *,
    enabled: bool,
    service_name: str,
    timeout_s: float,
    environ: Mapping[str, str] | None = None,
) -> VerdictSpans:
    """Spans for a one-off command (``sidecar canary``, ``sidecar compare``).

    As for ``sidecar run``, but only when the environment names an exporter or
    an OTLP endpoint: a CI run without a collector must not wait on one.
    """
    env = os.environ if environ is None else environ
    if not any(env.get(name, "").strip() for name in _EXPORT_ASKED):
        return VerdictSpans.disabled()
    return verdict_spans(
        enabled=enabled, service_name=service_name, timeout_s=timeout_s, environ=env
    )


class JsonLinesSpanExporter(SpanExporter):
    """Writes spans as OTLP/JSON lines (the Collector file exporter's format; ``replay`` reads it)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        line = request_to_json_line(encode_spans(spans))
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        with self._lock:
            self._file.close()


def tracer_provider(
    exporter: SpanExporter, *, service_name: str = "sidecar", batch: bool = True
) -> TracerProvider:
    resource = Resource.create({"service.name": service_name, "service.version": __version__})
    provider = TracerProvider(resource=resource)
    processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    return provider


class VerdictSpans:
    """Emits one verdict span per verdict into the evaluated trace.

    ``flush`` and ``shutdown`` wait at most ``timeout_s`` (the exporter may
    block far longer on an unreachable endpoint); they run the SDK's call on
    a daemon thread and return False when it did not finish in time.
    """

    def __init__(
        self, provider: TracerProvider, *, timeout_s: float = 5.0, enabled: bool = True
    ) -> None:
        self._provider = provider
        self._tracer = provider.get_tracer("sidecar", __version__)
        self.timeout_s = timeout_s
        self.enabled = enabled
        # Set once a bounded call ran out of time: the exporter is stuck, waiting again is futile.
        self._stuck = False

    @classmethod
    def disabled(cls) -> VerdictSpans:
        """No spans at all (``otel.enabled: false``, or no exporter configured): emit is a no-op."""
        return cls(TracerProvider(), enabled=False)

    def emit(self, verdict: Verdict) -> bool:
        """Record the span; False when disabled or the trace has no root span id to attach to."""
        return self.record(verdict) is not None

    def record(self, verdict: Verdict) -> str | None:
        """Record the span; its span id (16 hex digits), or None when no span was recorded."""
        if not self.enabled or verdict.root_span_id is None:
            return None
        parent = SpanContext(
            trace_id=int(verdict.trace_id, 16),
            span_id=int(verdict.root_span_id, 16),
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
        attributes: dict[str, AttributeValue] = {
            **_verdict_attributes(verdict),
            "eval.sample_reason": verdict.sample_reason,
            "eval.injection_suspected": verdict.injection_suspected,
            "eval.review": verdict.review,
            "eval.truncated": verdict.truncated,
        }
        provenance = _provenance(verdict)
        attributes.update(provenance)
        if verdict.agent is not None:
            attributes["gen_ai.agent.name"] = verdict.agent
        if verdict.agent_version is not None:
            attributes["gen_ai.agent.version"] = verdict.agent_version
        if verdict.flags:
            attributes["eval.flags"] = list(verdict.flags)
        links = [Link(parent, {"eval.link": "evaluated_root"})]
        if verdict.conversation_id is not None:
            attributes.update(_conversation(verdict))
            links.extend(_turn_links(verdict, parent))
        now = time.time_ns()
        calls = verdict.judge_calls
        # The verdict span covers its judge calls, so they nest inside it on a timeline.
        start = min([now, *(c.start_unix_nano for c in calls)])
        end = max([now, *(c.end_unix_nano for c in calls)])
        span = self._tracer.start_span(
            f"evaluate {verdict.rubric_id}",
            context=set_span_in_context(NonRecordingSpan(parent)),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=links,
            start_time=start,
        )
        self._chat_spans(span, [(call, judge_call_attributes(verdict, call)) for call in calls])
        rubric_only = {k: v for k, v in provenance.items() if k == RUBRIC_HASH}
        for check in verdict.checks:
            evaluator = evaluator_attributes(verdict, check.name, DETERMINISTIC)
            span.add_event(EVENT_NAME, {**_check_event(check), **rubric_only, **evaluator})
        for criterion in verdict.criteria:
            if criterion.outcome is not Outcome.SKIPPED:
                evaluator = evaluator_attributes(verdict, criterion.name, LLM_JUDGE)
                span.add_event(
                    EVENT_NAME, {**_criterion_event(criterion), **provenance, **evaluator}
                )
        span.end(end_time=end)
        return f"{span.get_span_context().span_id:016x}"

    def record_canary(self, verdict: Verdict) -> str | None:
        """One canary case: a root span ``canary {rubric_id}`` over its judge calls.

        The canary case was recorded long ago, so the span starts a trace of
        its own; the case's trace id is an attribute (``eval.canary.trace_id``).
        No ``gen_ai.evaluation.result`` events: the evidence quotes the
        transcript, and the canary's figures are metrics already. Its span id,
        or None when disabled.
        """
        if not self.enabled:
            return None
        attributes: dict[str, AttributeValue] = {
            **_verdict_attributes(verdict),
            CANARY_TRACE_ID: verdict.trace_id,
            JUDGE_PURPOSE: CANARY,
            **_provenance(verdict),
        }
        if verdict.judge_error is not None:
            attributes["error.type"] = verdict.judge_error
        return self._root_with_calls(
            f"canary {verdict.rubric_id}",
            attributes,
            [(call, judge_call_attributes(verdict, call)) for call in verdict.judge_calls],
            error=verdict.judge_error,
        )

    def record_shadow(self, event: ShadowJudged, result: JudgeResult) -> str | None:
        """One shadow judgment: a root span ``shadow {rubric}`` over the shadow's ``chat`` calls.

        A trace of its own (the shadow runs after the verdict); the case's trace
        id is an attribute (``sidecar.shadow.trace_id``), with both models and
        the counts of agreeing and disagreeing criteria. Its span id, or None
        when disabled.
        """
        if not self.enabled:
            return None
        outcomes = [compare(p, s) for _, p, s in event.pairs]
        attributes: dict[str, AttributeValue] = {
            "eval.rubric.id": event.rubric,
            SHADOW_TRACE_ID: event.trace_id,
            "eval.judge.model": event.model,
            "sidecar.shadow.model": event.shadow_model,
            JUDGE_PURPOSE: SHADOW,
            "sidecar.shadow.agree": outcomes.count("agree"),
            "sidecar.shadow.disagree": outcomes.count("disagree"),
            "sidecar.shadow.error": outcomes.count("error"),
        }
        if event.shadow_model_version is not None:
            attributes[JUDGE_MODEL_VERSION] = event.shadow_model_version
        if event.error is not None:
            attributes["error.type"] = event.error
        children = [
            (call, {**_call_attributes(call), "eval.rubric.id": event.rubric})
            for call in result.calls
        ]
        return self._root_with_calls(f"shadow {event.rubric}", attributes, children, event.error)

    def record_compare(self, result: PairResult, model: str) -> str | None:
        """One compared pair: a root span ``compare {pair id}`` over both orders' judge calls.

        Each call's span says its order (``sidecar.compare.order``: ``first``,
        the candidate shown as A, or ``second``). Ids, outcome and the judge's
        choices only: no prompt, answer or evidence. Its span id, or None when disabled.
        """
        if not self.enabled:
            return None
        attributes: dict[str, AttributeValue] = {
            COMPARE_PAIR_ID: result.case_id,
            COMPARE_OUTCOME: result.outcome.value,
            "eval.judge.model": model,
            JUDGE_PURPOSE: PAIRWISE,
        }
        children: list[tuple[JudgeCallRecord, dict[str, AttributeValue]]] = []
        for order, answer in (("first", result.first), ("second", result.second)):
            attributes[f"sidecar.compare.{order}"] = answer.winner.value
            for call in answer.calls:
                child = {
                    **_call_attributes(call),
                    COMPARE_PAIR_ID: result.case_id,
                    COMPARE_ORDER: order,
                }
                children.append((call, child))
        error = result.outcome.value if result.outcome is PairOutcome.ERROR else None
        return self._root_with_calls(f"compare {result.case_id}", attributes, children, error)

    def _root_with_calls(
        self,
        name: str,
        attributes: dict[str, AttributeValue],
        children: Sequence[tuple[JudgeCallRecord, dict[str, AttributeValue]]],
        error: str | None = None,
    ) -> str:
        now = time.time_ns()
        start = min([now, *(c.start_unix_nano for c, _ in children)])
        end = max([now, *(c.end_unix_nano for c, _ in children)])
        span = self._tracer.start_span(
            name,
            context=Context(),  # a new trace, whatever span is current
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=start,
        )
        self._chat_spans(span, children)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=end)
        return f"{span.get_span_context().span_id:016x}"

    def _chat_spans(
        self,
        parent: Span,
        children: Sequence[tuple[JudgeCallRecord, dict[str, AttributeValue]]],
    ) -> None:
        """The judge's own spans, ``chat {model}`` CLIENT children of ``parent``."""
        inside = set_span_in_context(parent)
        for call, attributes in children:
            child = self._tracer.start_span(
                f"{CHAT} {call.model}",
                context=inside,
                kind=SpanKind.CLIENT,
                attributes=attributes,
                start_time=call.start_unix_nano,
            )
            if call.error is not None:
                child.set_status(Status(StatusCode.ERROR, call.error))
            child.end(end_time=call.end_unix_nano)

    def flush(self, timeout_ms: int | None = None) -> bool:
        """Export what is queued; False when it did not finish within the bound."""
        timeout = self.timeout_s if timeout_ms is None else timeout_ms / 1000
        return self._bounded(
            lambda: self._provider.force_flush(int(timeout * 1000)), timeout, "flush"
        )

    def shutdown(self) -> bool:
        """Export what is queued and stop; False when it did not finish within the bound.

        After a flush that ran out of time the exporter is stuck: shutdown is
        started but not waited for, so the two together stay within one bound.
        """
        return self._bounded(
            self._provider.shutdown, 0.0 if self._stuck else self.timeout_s, "shutdown"
        )

    def _bounded(self, call: Callable[[], object], timeout_s: float, what: str) -> bool:
        if not _bounded(call, timeout_s, what):
            self._stuck = True
            return False
        return True


def _bounded(call: Callable[[], object], timeout_s: float, what: str) -> bool:
    done = threading.Event()

    def run() -> None:
        try:
            call()
        finally:
            done.set()

    threading.Thread(target=run, name=f"sidecar-spans-{what}", daemon=True).start()
    if done.wait(timeout_s):
        return True
    log.warning(
        "verdict spans: %s did not finish within %.1fs; unexported spans are dropped",
        what,
        timeout_s,
    )
    return False


def judge_call_attributes(verdict: Verdict, call: JudgeCallRecord) -> dict[str, AttributeValue]:
    """The judge span's attributes: what was asked, what served it, usage, how it ended.

    No prompt and no answer: the transcript stays out of the judge's spans.
    """
    return {**_call_attributes(call), "eval.id": verdict.id, "eval.rubric.id": verdict.rubric_id}


def _call_attributes(call: JudgeCallRecord) -> dict[str, AttributeValue]:
    """What every judge span says about its call, whoever the call was made for."""
    attrs: dict[str, AttributeValue] = {
        "gen_ai.operation.name": CHAT,
        "gen_ai.provider.name": call.provider,
        "gen_ai.request.model": call.model,
        JUDGE_ATTEMPT: call.attempt,
        JUDGE_CACHE_HIT: call.cached,
        JUDGE_PURPOSE: call.purpose,
        SCHEMA_ATTRIBUTE: EVALUATION_SCHEMA,
    }
    if call.response_model is not None:
        attrs["gen_ai.response.model"] = call.response_model
    if call.input_tokens is not None:
        attrs["gen_ai.usage.input_tokens"] = call.input_tokens
    if call.output_tokens is not None:
        attrs["gen_ai.usage.output_tokens"] = call.output_tokens
    if call.error is not None:
        attrs["error.type"] = call.error
    return attrs


def evaluator_attributes(verdict: Verdict, name: str, kind: str) -> dict[str, AttributeValue]:
    """Who made one result: ``{rubric}/{check or criterion}``, ``{version}+{hash[:12]}``, type."""
    version = verdict.rubric_version
    if verdict.rubric_hash:
        version = f"{version}+{verdict.rubric_hash[:12]}"
    return {
        EVALUATOR_ID: f"{verdict.rubric_id}/{name}",
        EVALUATOR_VERSION: version,
        EVALUATOR_TYPE: kind,
        SCHEMA_ATTRIBUTE: EVALUATION_SCHEMA,
    }


def _verdict_attributes(verdict: Verdict) -> dict[str, AttributeValue]:
    """What a verdict and a canary case span both say of their verdict."""
    return {
        "eval.rubric.id": verdict.rubric_id,
        "eval.rubric.version": verdict.rubric_version,
        "eval.judge.model": verdict.judge_model,
        "eval.outcome": verdict.outcome.value,
        "eval.judged": verdict.judged,
        "eval.id": verdict.id,
    }


def _provenance(verdict: Verdict) -> dict[str, AttributeValue]:
    attrs: dict[str, AttributeValue] = {}
    if verdict.rubric_hash is not None:
        attrs[RUBRIC_HASH] = verdict.rubric_hash
    if verdict.judge_model_version is not None:
        attrs[JUDGE_MODEL_VERSION] = verdict.judge_model_version
    return attrs


def _score(
    outcome: Outcome, name: str, explanation: str, kind: str, gate: bool
) -> dict[str, AttributeValue]:
    attrs: dict[str, AttributeValue] = {
        "gen_ai.evaluation.name": name,
        "gen_ai.evaluation.score.label": outcome.value.lower(),
        "eval.kind": kind,
        "eval.gate": gate,
    }
    if outcome is Outcome.PASS:
        attrs["gen_ai.evaluation.score.value"] = 1.0
    elif outcome is Outcome.FAIL:
        attrs["gen_ai.evaluation.score.value"] = 0.0
    else:
        attrs["error.type"] = "check_error" if kind == "check" else "criterion_error"
    if explanation:
        attrs["gen_ai.evaluation.explanation"] = explanation
    return attrs


def _check_event(check: CheckResult) -> dict[str, AttributeValue]:
    return _score(check.outcome, check.name, check.detail, "check", check.gate)


def _criterion_event(criterion: CriterionResult) -> dict[str, AttributeValue]:
    explanation = criterion.evidence or criterion.reason or ""
    attrs = _score(criterion.outcome, criterion.name, explanation, "criterion", criterion.gate)
    if criterion.outcome is Outcome.ERROR:
        attrs["error.type"] = criterion.reason or "error"
    return attrs


def _conversation(verdict: Verdict) -> dict[str, AttributeValue]:
    return {
        "eval.scope": verdict.scope,
        "gen_ai.conversation.id": verdict.conversation_id or "",
        "eval.conversation.turns": verdict.turns or 0,
        "eval.conversation.revision": verdict.revision or 1,
    }


def _turn_links(verdict: Verdict, parent: SpanContext) -> list[Link]:
    """A link to every turn's root span but the last (the parent, linked already)."""
    links: list[Link] = []
    for number, (trace_id, root) in enumerate(
        zip(verdict.trace_ids, verdict.root_span_ids, strict=False), start=1
    ):
        if root is None or (int(trace_id, 16), int(root, 16)) == (parent.trace_id, parent.span_id):
            continue
        context = SpanContext(
            trace_id=int(trace_id, 16),
            span_id=int(root, 16),
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
        links.append(Link(context, {"eval.link": "conversation_turn", "eval.turn": number}))
    return links
