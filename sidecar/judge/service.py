"""The judge service: one guarded model call per request, turned into strict verdicts.

Entry points, all through the same guarded call:

- :meth:`JudgeService.judge`: one case (rubric, transcript and the case's
  precomputed :class:`~sidecar.judge.screen.Screening`);
- :meth:`JudgeService.judge_request`: the same for a request built already
  (``sidecar judge`` prints it first);
- :meth:`JudgeService.judge_pair`: one pairwise request of
  :mod:`sidecar.judge.pairwise` (``sidecar compare``); its answer carries
  its attempts as :class:`~sidecar.model.JudgeCallRecord` with purpose
  ``pairwise``.

Order of work for one case (each step may end it)::

    build_request -> cache lookup                      (hit: cached verdicts)
    -> breaker check                                   (open: unavailable)
    -> concurrency slot -> rate limits -> backend call (retried with backoff)
    -> blocked? truncated? too large? -> parse_answer -> injection policy -> cache put

The service does not screen: the pipeline screens each case once, before
sampling, and the injection policy applies that screening, joined with the
judge's own ``data_tried_to_instruct`` report (a ``true`` counts as a hit).

A judge that cannot be reached ends as ``on_judge_unavailable`` says:
``error`` returns ERROR for every criterion with reason ``judge_unavailable``;
``pause`` raises ``JudgeUnavailable`` so the pipeline stops consuming, waits
on :meth:`JudgeService.wait_available` and submits the case again. A pairwise
request never raises: its order becomes ERROR with the failure's reason.

Retries happen only for the reasons in ``RETRIABLE``; every failed HTTP call
counts against the model's circuit breaker, every answered one resets it.

Provenance: a result carries the ``model_version`` that served it (the
backend's report, ``unknown`` when an answer did not say, ``None`` when no
answer arrived); a cached result carries the version that produced it. Each
answer that names another version than the last one for its model is
reported (:class:`~sidecar.telemetry.ModelVersionServed`), so a dashboard
can mark when an alias moved.

Spans: every attempt at the model (and every cache hit) is kept on the
result as a :class:`~sidecar.model.JudgeCallRecord` (wall-clock times from
``wall_ns``, tokens, served version, failure reason, attempt number), plain
data the verdict span's emitter turns into the judge's own child spans. The
backend names its provider (``provider_name``, ``gen_ai.provider.name``).

Telemetry: every call, cache lookup, breaker change and failed case is
reported as an event of :mod:`sidecar.telemetry`, tagged with the purpose
the calls are made for (production, canary, shadow).
``use_cache=False`` (the canary) neither reads nor fills the cache, so a
re-judged case asks the model afresh. :meth:`JudgeService.for_purpose`
gives another caller (the scheduled canary) the same guarded path with its
calls reported under its own purpose, so that production figures hold
production calls only.
"""

from __future__ import annotations

import asyncio
import copy
import random
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Protocol

from sidecar.errors import JudgeUnavailable
from sidecar.evaluate.rubric import Rubric
from sidecar.judge import JudgeResult, all_error, apply_injection_policy
from sidecar.judge.cache import VerdictCache
from sidecar.judge.config import JudgeSettings, UnavailablePolicy
from sidecar.judge.limits import BreakerState, CircuitBreaker, RateLimiter
from sidecar.judge.pairwise import PairwiseAnswer, failed, parse_pairwise
from sidecar.judge.parse import parse_answer
from sidecar.judge.prompt import JudgeRequest, build_request
from sidecar.judge.screen import Screening, with_judge_report
from sidecar.model import CriterionResult, JudgeCallRecord, Outcome, Transcript
from sidecar.retry import Backoff
from sidecar.telemetry import (
    PAIRWISE,
    PRODUCTION,
    SHADOW,
    BreakerChanged,
    CacheLookup,
    InjectionFlagged,
    JudgeCall,
    JudgeFailed,
    ModelVersionServed,
    NullTelemetry,
    Telemetry,
)

# Failure reasons worth another attempt; other 4xx answers will not change.
RETRIABLE = frozenset({"timeout", "transport", "http_408", "http_429", "http_5xx"})

JUDGE_UNAVAILABLE = "judge_unavailable"
# The judge answered with a redirect, which is never followed: a setting to
# fix, not an outage to wait out, so it is an ERROR under either policy.
REDIRECT = "redirect"
BREAKER_OPEN = "breaker_open"
BLOCKED = "blocked"
TRUNCATED = "truncated"
ANSWER_TOO_LARGE = "answer_too_large"
INJECTION_REVIEW = "injection_suspected"
# An answer that did not say which model version served it.
UNKNOWN_VERSION = "unknown"
# gen_ai.provider.name of a backend that does not say which it is.
UNKNOWN_PROVIDER = "unknown"


@dataclass(frozen=True, slots=True)
class BackendReply:
    """One model answer as the backend received it.

    ``blocked``: the provider's safety filters stopped the answer (or the
    prompt). ``truncated``: the output token limit cut it off. ``too_large``:
    the HTTP answer passed the backend's size cap and was dropped unread.
    Token counts are 0 when the provider did not report them.
    """

    text: str | None
    finish_reason: str | None
    input_tokens: int
    output_tokens: int
    blocked: bool = False
    truncated: bool = False
    model_version: str | None = None  # what the service says served it; None: not said
    too_large: bool = False


class Backend(Protocol):
    """One HTTP request per ``generate``; failures raise ``JudgeUnavailable(reason)``."""

    async def generate(self, model: str, request: JudgeRequest) -> BackendReply: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class _Cached:
    criteria: tuple[CriterionResult, ...]  # before the injection policy
    raw_output: str | None
    model_version: str
    instructed: bool = False  # the judge's data_tried_to_instruct


class JudgeService:
    """Implements ``sidecar.judge.Judge`` on top of a ``Backend``.

    Seams: ``clock`` (monotonic seconds), ``sleep`` and ``rand`` default to
    the real ones; tests pass a fake clock whose sleep advances it. The
    service reports cache lookups, judge errors by reason, request durations,
    tokens and cost (``telemetry``); criterion verdict counts are left to the
    verdict stage.
    """

    def __init__(
        self,
        backend: Backend,
        settings: JudgeSettings,
        telemetry: Telemetry | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rand: Callable[[], float] = random.random,
        wall_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self._backend = backend
        # Wall-clock nanoseconds for the judge's spans (the monotonic clock paces the calls).
        self._wall_ns = wall_ns
        self._provider = str(getattr(backend, "provider_name", UNKNOWN_PROVIDER))
        self._settings = settings
        self._telemetry: Telemetry = telemetry if telemetry is not None else NullTelemetry()
        self._purpose = PRODUCTION
        self._clock = clock
        self._sleep = sleep
        self._rand = rand
        self._backoff = Backoff(settings.backoff_base_s, settings.backoff_max_s, 1.0, rand)
        self._slots = asyncio.Semaphore(settings.concurrency)
        self._limiter = RateLimiter(
            settings.requests_per_minute, settings.tokens_per_minute, clock()
        )
        self._breakers: dict[str, CircuitBreaker] = {}
        self._cache: VerdictCache[_Cached] | None = (
            VerdictCache(settings.cache_max_entries) if settings.cache_max_entries > 0 else None
        )
        # The model version last seen per judge model (the info gauge shows only it).
        self._versions: dict[str, str] = {}

    def for_purpose(self, purpose: str) -> JudgeService:
        """This service for another caller (the canary): the same backend, slots, rate
        limits, breakers and served versions; its calls reported under ``purpose``;
        no cache. Close only the original: they share the backend.
        """
        view = copy.copy(self)
        view._purpose = purpose
        view._cache = None
        return view

    def for_shadow(self, concurrency: int) -> JudgeService:
        """Another service on this backend for the shadow model (:mod:`sidecar.judge.shadow`).

        Its own ``concurrency`` slots, rate limits and breakers (the shadow model
        has its own quota, and must not take the primary's slots), no cache,
        calls reported under purpose ``shadow``. Close only the original.
        """
        settings = self._settings.model_copy(update={"concurrency": concurrency})
        view = JudgeService(
            self._backend,
            settings,
            self._telemetry,
            clock=self._clock,
            sleep=self._sleep,
            rand=self._rand,
            wall_ns=self._wall_ns,
        )
        view._purpose = SHADOW
        view._cache = None
        return view

    def _report(self, event: object) -> None:
        self._telemetry.event(event)

    def _failure(self, model: str, reason: str) -> None:
        self._report(JudgeFailed(model, self._purpose, reason))

    async def __aenter__(self) -> JudgeService:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._backend.aclose()

    # --- availability (for on_judge_unavailable: pause) ---------------------

    def _breaker(self, model: str) -> CircuitBreaker:
        breaker = self._breakers.get(model)
        if breaker is None:
            breaker = CircuitBreaker(
                self._settings.breaker_failures, self._settings.breaker_reset_s
            )
            self._breakers[model] = breaker
        return breaker

    def retry_after(self, now: float | None = None) -> float:
        """Seconds until every model's breaker lets a call through (0: now)."""
        at = self._clock() if now is None else now
        return max((b.retry_after(at) for b in self._breakers.values()), default=0.0)

    def available(self, now: float | None = None) -> bool:
        return self.retry_after(now) == 0.0

    async def wait_available(self) -> None:
        """Return once a judge call may be attempted again."""
        while (delay := self.retry_after()) > 0:
            await self._sleep(delay)

    # --- judging ------------------------------------------------------------

    async def judge(
        self,
        rubric: Rubric,
        transcript: Transcript,
        screening: Screening,
        *,
        use_cache: bool = True,
    ) -> JudgeResult:
        """Judge one case; ``screening`` is the case's, from ``screen_case``."""
        request = self.request(rubric, transcript)
        return await self.judge_request(rubric, request, screening, use_cache=use_cache)

    def request(self, rubric: Rubric, transcript: Transcript) -> JudgeRequest:
        """The request :meth:`judge` sends for this case (the shadow judge sends it twice)."""
        return build_request(
            rubric,
            transcript,
            max_block_chars=self._settings.max_block_chars,
            max_request_chars=self._settings.max_request_chars,
        )

    def unavailable(self, rubric: Rubric, request: JudgeRequest, reason: str) -> JudgeResult:
        """The result of a case the judge could not be asked about (every criterion ERROR)."""
        return self._failed(rubric, request, reason, None)

    async def judge_request(
        self,
        rubric: Rubric,
        request: JudgeRequest,
        screening: Screening,
        *,
        use_cache: bool = True,
    ) -> JudgeResult:
        """Judge a request built by ``build_request`` (``sidecar judge`` shows it first)."""
        if rubric.judge is None:
            raise ValueError(f"rubric {rubric.id!r} has no judge block")
        model = rubric.judge.model
        cache = self._cache if use_cache else None

        cached = cache.get(request.cache_key) if cache is not None else None
        if cache is not None:
            self._report(CacheLookup(self._purpose, hit=cached is not None))
        if cached is not None:
            now = self._wall_ns()
            hit = JudgeCallRecord(
                model,
                self._provider,
                now,
                now,
                response_model=(
                    None if cached.model_version == UNKNOWN_VERSION else cached.model_version
                ),
                cached=True,
                purpose=self._purpose,
            )
            return self._verdicts(
                rubric,
                request,
                screening,
                cached.criteria,
                cached.raw_output,
                cached=True,
                model_version=cached.model_version,
                instructed=cached.instructed,
                calls=(hit,),
            )

        attempts: list[JudgeCallRecord] = []
        try:
            reply = await self._call(model, request, attempts)
        except JudgeUnavailable as exc:
            self._failure(model, exc.reason)
            calls = tuple(attempts)
            if exc.reason == REDIRECT:
                return self._failed(rubric, request, REDIRECT, None, calls)
            if self._settings.on_judge_unavailable is UnavailablePolicy.PAUSE:
                raise
            return self._failed(rubric, request, JUDGE_UNAVAILABLE, None, calls)
        calls = tuple(attempts)

        # Precedence: a blocked answer says nothing; a truncated one is incomplete
        # even if it happens to parse; a too large one was not read; only then is
        # the text parsed.
        if reply.blocked:
            failure: str | None = BLOCKED
        elif reply.truncated:
            failure = TRUNCATED
        elif reply.too_large:
            failure = ANSWER_TOO_LARGE
        else:
            parsed = parse_answer(reply.text, request, rubric)
            criteria, failure = parsed.criteria, parsed.failure
        if failure is not None:
            self._failure(model, failure)
            # The call answered; the answer could not be used: its span says why.
            calls = (*calls[:-1], replace(calls[-1], error=failure)) if calls else calls
            return self._failed(rubric, request, failure, reply, calls)

        if cache is not None and all(c.outcome is not Outcome.ERROR for c in criteria):
            cache.put(
                request.cache_key,
                _Cached(criteria, reply.text, _served_by(reply), parsed.instructed),
            )
        return self._verdicts(
            rubric,
            request,
            screening,
            criteria,
            reply.text,
            reply=reply,
            model_version=_served_by(reply),
            instructed=parsed.instructed,
            calls=calls,
        )

    async def judge_pair(self, model: str, request: JudgeRequest) -> PairwiseAnswer:
        """Send a request of ``build_pairwise_request``; every failure is an ERROR answer.

        Same slots, limits, retries, breaker and metrics as a graded case; no
        cache (each order is asked afresh) and no injection policy (``sidecar
        compare`` lists suspected pairs and keeps their verdicts).
        """
        attempts: list[JudgeCallRecord] = []
        try:
            reply = await self._call(model, request, attempts)
        except JudgeUnavailable as exc:
            self._failure(model, exc.reason)
            return replace(failed(exc.reason), calls=_pairwise(attempts))
        # The same precedence as for a graded case.
        if reply.blocked:
            answer = failed(BLOCKED)
        elif reply.truncated:
            answer = failed(TRUNCATED)
        elif reply.too_large:
            answer = failed(ANSWER_TOO_LARGE)
        else:
            answer = parse_pairwise(reply.text)
        if answer.reason is not None:
            self._failure(model, answer.reason)
            # The call answered; the answer could not be used: its span says why.
            attempts[-1] = replace(attempts[-1], error=answer.reason)
        return replace(answer, calls=_pairwise(attempts))

    def _verdicts(
        self,
        rubric: Rubric,
        request: JudgeRequest,
        screening: Screening,
        criteria: tuple[CriterionResult, ...],
        raw_output: str | None,
        *,
        cached: bool = False,
        reply: BackendReply | None = None,
        model_version: str,
        instructed: bool = False,
        calls: tuple[JudgeCallRecord, ...] = (),
    ) -> JudgeResult:
        assert rubric.judge is not None
        model = rubric.judge.model
        # The judge's own report is a second line: it counts like a screening hit.
        final, review = apply_injection_policy(
            criteria, with_judge_report(screening, instructed), rubric.judge.on_injection_suspected
        )
        for reason in sorted({c.reason or "unknown" for c in final if c.outcome is Outcome.ERROR}):
            self._failure(model, reason)
        # Suspected and reviewed cases are counted once per case by the pipeline; a case
        # only the judge's report flagged is counted here, as the pipeline did not see it.
        # Calls accounted apart (canaries) never reach the production counters.
        if instructed and not screening.suspected and self._purpose == PRODUCTION:
            self._report(InjectionFlagged(rubric.id))
        return JudgeResult(
            criteria=final,
            judged=True,
            review=review,
            raw_output=raw_output,
            error_reason=None,
            model=model,
            input_tokens=reply.input_tokens if reply else 0,
            output_tokens=reply.output_tokens if reply else 0,
            cached=cached,
            nonce=request.nonce,
            model_version=model_version,
            judge_flagged=instructed,
            calls=calls,
        )

    def _failed(
        self,
        rubric: Rubric,
        request: JudgeRequest,
        reason: str,
        reply: BackendReply | None,
        calls: tuple[JudgeCallRecord, ...] = (),
    ) -> JudgeResult:
        return JudgeResult(
            criteria=all_error(rubric, reason),
            judged=False,
            review=False,
            raw_output=reply.text if reply else None,
            error_reason=reason,
            model=rubric.judge_model,
            input_tokens=reply.input_tokens if reply else 0,
            output_tokens=reply.output_tokens if reply else 0,
            nonce=request.nonce,
            model_version=_served_by(reply) if reply else None,
            calls=calls,
        )

    def _attempt(
        self,
        model: str,
        attempt: int,
        start_ns: int | None,
        error: str | None,
        reply: BackendReply | None,
    ) -> JudgeCallRecord:
        """One attempt, ending now; ``start_ns`` None: refused before any call (no duration)."""
        end_ns = self._wall_ns()
        return JudgeCallRecord(
            model,
            self._provider,
            end_ns if start_ns is None else min(start_ns, end_ns),
            end_ns,
            attempt=attempt,
            response_model=reply.model_version if reply is not None else None,
            input_tokens=reply.input_tokens if reply is not None else None,
            output_tokens=reply.output_tokens if reply is not None else None,
            error=error,
            purpose=self._purpose,
        )

    async def _call(
        self, model: str, request: JudgeRequest, attempts: list[JudgeCallRecord] | None = None
    ) -> BackendReply:
        """One guarded call, retried; each attempt is appended to ``attempts`` (its span)."""
        made = attempts if attempts is not None else []
        breaker = self._breaker(model)
        estimate = _estimate_tokens(request, self._settings.max_output_tokens)
        failure: JudgeUnavailable | None = None
        async for _ in self._backoff.attempts(self._sleep, limit=self._settings.max_attempts):
            number = len(made) + 1
            async with self._slots:
                # Checked once a slot is free: calls queued behind an outage fail fast.
                if not breaker.allow(self._clock()):
                    made.append(self._attempt(model, number, None, BREAKER_OPEN, None))
                    raise JudgeUnavailable(BREAKER_OPEN, f"circuit breaker for {model} is open")
                while (wait := self._limiter.reserve(estimate, self._clock())) > 0:
                    await self._sleep(wait)
                started = self._clock()
                started_ns = self._wall_ns()
                failure = None
                try:
                    reply = await self._backend.generate(model, request)
                except JudgeUnavailable as exc:
                    failure = exc
                finished = self._clock()
                made.append(
                    self._attempt(
                        model,
                        number,
                        started_ns,
                        failure.reason if failure is not None else None,
                        reply if failure is None else None,
                    )
                )
            seconds = max(0.0, finished - started)
            if failure is None:
                breaker.record_success()
                self._breaker_state(model, breaker, finished)
                self._served(model, _served_by(reply))
                self._limiter.settle(estimate, reply.input_tokens + reply.output_tokens, finished)
                self._report(
                    JudgeCall(
                        model,
                        self._purpose,
                        seconds,
                        input_tokens=reply.input_tokens,
                        output_tokens=reply.output_tokens,
                        cost_usd=self._cost(model, reply),
                    )
                )
                return reply
            breaker.record_failure(finished)
            self._breaker_state(model, breaker, finished)
            self._limiter.settle(estimate, 0, finished)
            self._report(JudgeCall(model, self._purpose, seconds, error=failure.reason))
            if failure.reason not in RETRIABLE:
                break
        assert failure is not None
        raise failure

    def _served(self, model: str, version: str) -> None:
        previous = self._versions.get(model)
        if previous == version:
            return
        self._report(ModelVersionServed(model, version, previous))
        self._versions[model] = version

    def _breaker_state(self, model: str, breaker: CircuitBreaker, now: float) -> None:
        closed = breaker.state(now) is BreakerState.CLOSED
        self._report(BreakerChanged(model, open=not closed))

    def _cost(self, model: str, reply: BackendReply) -> float:
        price = self._settings.prices.get(model)
        if price is None:
            return 0.0
        return (
            reply.input_tokens * price.input_per_mtok + reply.output_tokens * price.output_per_mtok
        ) / 1_000_000


def _pairwise(attempts: list[JudgeCallRecord]) -> tuple[JudgeCallRecord, ...]:
    # A comparison's spans say so, whoever the service reports its calls for.
    return tuple(replace(a, purpose=PAIRWISE) for a in attempts)


def _served_by(reply: BackendReply) -> str:
    return reply.model_version or UNKNOWN_VERSION


def _estimate_tokens(request: JudgeRequest, max_output_tokens: int) -> int:
    # About four characters per token for the prompt; the answer is a short JSON
    # object per criterion. ``settle`` corrects the estimate with real usage.
    prompt = (len(request.system_instruction) + len(request.user_text)) // 4
    return prompt + min(max_output_tokens, 80 * len(request.criteria))


# --- self-preference ----------------------------------------------------------

# Model name prefixes by vendor lineage. A judge grading its own lineage tends to
# prefer it, so this errs towards "same" (Gemma is distilled from Gemini).
_FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("google", re.compile(r"^(?:gemini|gemma|palm|bison|learnlm)")),
    ("openai", re.compile(r"^(?:gpt|chatgpt|o\d|davinci|babbage|text-davinci)")),
    ("anthropic", re.compile(r"^claude")),
    ("meta", re.compile(r"^(?:llama|meta-llama|codellama)")),
    ("mistral", re.compile(r"^(?:mistral|mixtral|codestral|ministral|magistral|pixtral|devstral)")),
    ("qwen", re.compile(r"^(?:qwen|qwq)")),
    ("deepseek", re.compile(r"^deepseek")),
    ("cohere", re.compile(r"^(?:command|aya)")),
    ("xai", re.compile(r"^grok")),
    ("microsoft", re.compile(r"^phi")),
)
_PROVIDER_PATH = re.compile(r"^.*/")


def model_family(model: str) -> str:
    """Vendor family of a model name, e.g. ``gemini-2.5-flash`` -> ``google``.

    Provider paths (``models/``, ``publishers/google/models/``, ``openai/``)
    are ignored. An unknown name is its own family, keyed by its first word.
    """
    name = _PROVIDER_PATH.sub("", model.strip().lower())
    for family, pattern in _FAMILIES:
        if pattern.match(name):
            return family
    first = re.split(r"[-_:.\s]", name, maxsplit=1)[0]
    return first or name


def same_family(judge_model: str, agent_model: str) -> bool:
    """True when the judge and the agent's model come from the same lineage."""
    if not judge_model.strip() or not agent_model.strip():
        return False
    return model_family(judge_model) == model_family(agent_model)
