"""The one telemetry port: the core says what happened; one adapter counts it.

Two kinds of report:

- **events**, for things that happen (a verdict emitted, a judge call, a
  record dead-lettered): small frozen records handed to
  :meth:`Telemetry.event` as they happen. The Prometheus adapter
  (``sidecar.adapters.prometheus``) maps each to its metric families;
- **statistics**, for what components count on their hot paths (spans read,
  traces open, evictions): plain counters kept by the component itself and
  read when metrics are scraped, through a function given to
  :meth:`Telemetry.watch`. Nothing is copied on every round.

The core never sees a metric type. :class:`NullTelemetry` forgets everything
(replay without metrics, tests that do not count). Label values come from
closed sets or are bounded by the adapter; events carry the raw values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from sidecar.evaluate.verdict import Verdict
from sidecar.model import Outcome, Transcript

# Who a judge call was made for: counted apart, so canary and shadow calls do not
# move production figures.
PRODUCTION = "production"
CANARY = "canary"
SHADOW = "shadow"
# The calls of a pairwise comparison (``sidecar compare``), on their judge spans.
PAIRWISE = "pairwise"


@dataclass(frozen=True, slots=True)
class VerdictEmitted:
    """A verdict's span was recorded and its metrics are due; ``span_id`` of that span."""

    verdict: Verdict
    span_id: str | None = None
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class CasePlanned:
    """One case of a planned trace, as the metrics see it."""

    rubric: str
    decision: str
    reason: str
    injection_suspected: bool
    fragment: bool


@dataclass(frozen=True, slots=True)
class TracePlanned:
    """A trace was planned: its flags, what was not captured, and its cases."""

    transcript: Transcript
    flags: tuple[str, ...]
    cases: tuple[CasePlanned, ...]


@dataclass(frozen=True, slots=True)
class TraceDecided:
    """``count`` traces (or dead-lettered records) ended on path ``decision``.

    A value of :class:`sidecar.evaluate.decision.Decision`; every trace read is
    reported exactly once.
    """

    decision: str
    count: int = 1


@dataclass(frozen=True, slots=True)
class SelfPreference:
    """A judged case whose judge model is of the agent model's family."""

    rubric: str
    judge_model: str


@dataclass(frozen=True, slots=True)
class FaultRaised:
    """An unexpected exception at ``stage`` (a bug or unforeseen input; see the logs)."""

    stage: str
    count: int = 1


@dataclass(frozen=True, slots=True)
class RecordRead:
    """An input record was read: ``ok``, or dead-lettered for ``reason``."""

    ok: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class DeliveryRefused:
    """Records of ``kind`` were refused by the broker (retried when ``retriable``)."""

    kind: str
    reason: str
    retriable: bool
    count: int = 1


@dataclass(frozen=True, slots=True)
class DeadLettered:
    """An output record that can never be delivered went to the dead-letter topic (or was lost)."""

    kind: str
    reason: str
    delivered: bool


@dataclass(frozen=True, slots=True)
class Rebalanced:
    """Partitions were ``assigned`` or ``revoked`` by the consumer group."""

    event: str
    partitions: int


@dataclass(frozen=True, slots=True)
class Readiness:
    """The service became ready (or stopped being)."""

    ready: bool


@dataclass(frozen=True, slots=True)
class ReviewRouted:
    rubric: str
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LabelRead:
    """A human label: matched to a case (``reason`` empty) or not (why)."""

    rubric: str = ""
    criterion: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class AgreementChanged:
    """Rolling judge-human agreement of one (rubric, version, judge model, criterion)."""

    rubric: str
    rubric_version: str
    judge_model: str
    criterion: str
    kappa: float | None
    agreement: float | None


@dataclass(frozen=True, slots=True)
class TurnsPublished:
    """Turn records of a trace sent to the conversation stage, and traces without a key."""

    published: int
    without_key: int


@dataclass(frozen=True, slots=True)
class ConversationDecided:
    reason: str
    turns: int


@dataclass(frozen=True, slots=True)
class ConversationEmitted:
    """A conversation's verdict was emitted, ``seconds`` after it was decided."""

    seconds: float


@dataclass(frozen=True, slots=True)
class TurnRead:
    """A turn record was read: accepted or not (``result``)."""

    result: str


@dataclass(frozen=True, slots=True)
class StateWritten:
    """A conversation state record (or tombstone) was acknowledged."""

    kind: str


@dataclass(frozen=True, slots=True)
class StateRestored:
    conversations: int
    seconds: float


@dataclass(frozen=True, slots=True)
class TurnsReread:
    complete: bool


@dataclass(frozen=True, slots=True)
class JudgeCall:
    """One judge request: how long it took, what it cost, how it ended (``error`` None: ok)."""

    model: str
    purpose: str
    seconds: float | None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class JudgeFailed:
    """A judged case ended in ERROR for ``reason`` (after any retries)."""

    model: str
    purpose: str
    reason: str


@dataclass(frozen=True, slots=True)
class CacheLookup:
    purpose: str
    hit: bool


@dataclass(frozen=True, slots=True)
class BreakerChanged:
    model: str
    open: bool


@dataclass(frozen=True, slots=True)
class ModelVersionServed:
    """The model service said ``version`` served ``model`` (replacing ``previous``)."""

    model: str
    version: str
    previous: str | None


@dataclass(frozen=True, slots=True)
class InjectionFlagged:
    """The judge reported that the data tried to instruct it (screening had not flagged it)."""

    rubric: str


@dataclass(frozen=True, slots=True)
class CanaryCriterion:
    """One criterion of a canary run: its statistics (None: undefined this run)."""

    criterion: str
    gate: bool
    threshold: float
    statistics: Mapping[str, float | None]


@dataclass(frozen=True, slots=True)
class CanaryRan:
    """A canary run of one rubric; ``judge_model_version`` served most of its cases."""

    rubric: str
    rubric_version: str
    judge_model: str
    judge_model_version: str
    passed: bool
    criteria: tuple[CanaryCriterion, ...]
    # Each judged case with its human reference labels (criterion -> PASS/FAIL), for drift.
    cases: tuple[tuple[Verdict, Mapping[str, Outcome]], ...] = ()


@dataclass(frozen=True, slots=True)
class ShadowJudged:
    """A judged case judged again by the shadow model; each criterion as both decided it.

    ``pairs``: (criterion, primary outcome, shadow outcome). ``error``: why the
    shadow gave no verdicts (its every criterion is then ERROR), else None.
    """

    rubric: str
    trace_id: str
    model: str
    shadow_model: str
    shadow_model_version: str | None
    pairs: tuple[tuple[str, Outcome, Outcome], ...]
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ShadowDropped:
    """A case chosen for the shadow was not shadowed (``reason``: over_budget, shutdown)."""

    rubric: str
    reason: str


@dataclass(frozen=True, slots=True)
class ConsumerLag:
    """Records between each assigned partition's read position and its end (a statistic)."""

    partitions: Mapping[int, int]


Stats = Callable[[], object]


class Telemetry(Protocol):
    """Where the core reports; the Prometheus adapter is the production one."""

    def event(self, event: object) -> None:
        """Count what happened; never raises, never blocks."""
        ...

    def watch(self, stats: Stats) -> None:
        """Read ``stats()`` at every scrape (a component's counters, by their type)."""
        ...


class NullTelemetry:
    """Forgets every report."""

    def event(self, event: object) -> None:
        pass

    def watch(self, stats: Stats) -> None:
        pass


class RecordingTelemetry:
    """Keeps every event and watched source (for tests and replay summaries)."""

    def __init__(self) -> None:
        self.events: list[object] = []
        self.watched: list[Stats] = []

    def event(self, event: object) -> None:
        self.events.append(event)

    def watch(self, stats: Stats) -> None:
        self.watched.append(stats)

    def of(self, kind: type[object]) -> Sequence[object]:
        return [e for e in self.events if isinstance(e, kind)]
