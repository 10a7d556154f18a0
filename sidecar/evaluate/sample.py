"""Which cases go to the judge.

Deterministic by trace id (a conversation's cases: by conversation id, given as
``sample_key``): the decision hashes the trace id (not the rubric,
not the replica, not the time), so every replica and every restart agrees, and
a lower ``judge_ratio`` always selects a subset of a higher one's traces.

Precedence, first match wins:

1. the rubric has no ``judge:`` block               -> skip  (no_judge)
2. no judge is configured (no credentials)          -> skip  (judge_disabled)
3. an ``always_judge`` rule matches                 -> judge (error | injection_suspected |
                                                              untrusted_content | check_failed)
4. warm-up: one of the first N traces of a new
   (agent, agent_version)                           -> judge (warmup)
5. trace-id hash below ``judge_ratio``              -> judge (ratio), else skip (not_sampled)

A "judge" decision then passes the budget (calls per minute and per day);
over budget it becomes skip (budget). Deterministic checks run regardless.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass

from sidecar.evaluate.rubric import AlwaysJudge, Rubric
from sidecar.model import CheckResult, Outcome, Transcript
from sidecar.settings import SamplingSettings


@dataclass(frozen=True, slots=True)
class SampleDecision:
    judge: bool
    reason: str

    @property
    def decision(self) -> str:
        return "judge" if self.judge else "skip"


def trace_fraction(trace_id: str) -> float:
    """Map a trace id to [0, 1) uniformly and reproducibly."""
    digest = hashlib.sha256(trace_id.encode("ascii", "replace")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class Sampler:
    """Sampling state: warm-up counters and the judge budget (clock passed in as ``now``)."""

    def __init__(
        self,
        *,
        judge_enabled: bool,
        per_minute: int | None = None,
        per_day: int | None = None,
        warmup_traces: int = 0,
        max_tracked_versions: int = 1_000,
        judge_all: bool = False,
    ) -> None:
        self.judge_enabled = judge_enabled
        self.per_minute = per_minute
        self.per_day = per_day
        self.warmup_traces = warmup_traces
        self.judge_all = judge_all
        self._max_versions = max_tracked_versions
        self._seen_versions: OrderedDict[tuple[str, str, str], int] = OrderedDict()
        self._minute: deque[float] = deque()
        self._day: deque[float] = deque()

    def decide(
        self,
        rubric: Rubric,
        transcript: Transcript,
        checks: Sequence[CheckResult],
        now: float,
        *,
        injection_suspected: bool = False,
        sample_key: str | None = None,
    ) -> SampleDecision:
        """``sample_key`` replaces the trace id in the hash (a conversation's id)."""
        wanted = self._wanted(rubric, transcript, checks, injection_suspected, sample_key)
        if wanted.judge and not self._take_budget(now):
            return SampleDecision(False, "budget")
        return wanted

    def _wanted(
        self,
        rubric: Rubric,
        transcript: Transcript,
        checks: Sequence[CheckResult],
        injection_suspected: bool,
        sample_key: str | None,
    ) -> SampleDecision:
        if rubric.judge is None:
            return SampleDecision(False, "no_judge")
        if not self.judge_enabled:
            return SampleDecision(False, "judge_disabled")
        for rule in rubric.sampling.always_judge:
            if _rule_matches(rule, transcript, checks, injection_suspected):
                return SampleDecision(True, rule.value)
        if self._warming_up(rubric, transcript):
            return SampleDecision(True, "warmup")
        if self.judge_all:
            return SampleDecision(True, "judge_all")
        if trace_fraction(sample_key or transcript.trace_id) < rubric.sampling.judge_ratio:
            return SampleDecision(True, "ratio")
        return SampleDecision(False, "not_sampled")

    def _warming_up(self, rubric: Rubric, transcript: Transcript) -> bool:
        if self.warmup_traces <= 0:
            return False
        key = (rubric.id, transcript.agent_name or "", transcript.agent_version or "")
        seen = self._seen_versions.get(key, 0)
        self._seen_versions[key] = seen + 1
        self._seen_versions.move_to_end(key)
        if len(self._seen_versions) > self._max_versions:
            self._seen_versions.popitem(last=False)
        return seen < self.warmup_traces

    def _take_budget(self, now: float) -> bool:
        for window, span, limit in (
            (self._minute, 60.0, self.per_minute),
            (self._day, 86_400.0, self.per_day),
        ):
            while window and now - window[0] >= span:
                window.popleft()
            if limit is not None and len(window) >= limit:
                return False
        if self.per_minute is not None:
            self._minute.append(now)
        if self.per_day is not None:
            self._day.append(now)
        return True


def _rule_matches(
    rule: AlwaysJudge,
    transcript: Transcript,
    checks: Sequence[CheckResult],
    injection_suspected: bool,
) -> bool:
    match rule:
        case AlwaysJudge.ERROR:
            return bool(transcript.error_spans) or any(c.outcome is Outcome.ERROR for c in checks)
        case AlwaysJudge.INJECTION_SUSPECTED:
            return injection_suspected
        case AlwaysJudge.UNTRUSTED_CONTENT:
            return any(call.untrusted and call.result is not None for call in transcript.tool_calls)
        case AlwaysJudge.CHECK_FAILED:
            return any(c.outcome is Outcome.FAIL for c in checks)


def build_sampler(
    settings: SamplingSettings, *, judge_enabled: bool, judge_all: bool = False
) -> Sampler:
    """The sampler with the configured budgets and warm-up; ``judge_all`` ignores sampling."""
    return Sampler(
        judge_enabled=judge_enabled,
        per_minute=settings.budget_per_minute,
        per_day=settings.budget_per_day,
        warmup_traces=settings.warmup_traces,
        judge_all=judge_all,
    )
