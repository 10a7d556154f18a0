"""Who drifted, the agent or the judge: two detectors per criterion and a guard-window rule.

For every rubric x check or criterion x scope x agent version (the verdicts'
``agent_version``; none when they do not say), a :class:`CriterionDrift` runs
:class:`~sidecar.drift.detect.Detector` s on two streams:

- the **agent** stream: the criterion's PASS share among its PASS/FAIL
  verdicts (direction down), and its ERROR share among all its verdicts
  (direction up);
- the **judge** stream (criteria only): on canary cases, whose human label
  is known, whether the judge disagreed with the label (direction up). The
  canary traces do not change when the agent does, so this stream moves only
  when the judge (its model, its prompt, the rubric) does.

The rule, for each alarm of the agent's pass-rate detector at time ``t``:

1. the judge stream alarmed within ``guard_s`` before ``t``, or alarms
   within ``guard_s`` after it -> ``judge`` (so the agent's alarm waits
   ``guard_s`` before it is decided, and is *pending* meanwhile);
2. else the judge's ``judge_model_version`` or the rubric's ``rubric_hash``
   on the alarm's verdicts differs from the baseline's -> ``judge``: the
   stream was compared across a change of the evaluator, and the change is
   reported as the evidence;
3. else -> ``agent``.

A judge alarm is reported on its own as ``judge``. A check has no judge, so
its alarms are ``agent`` (or ``judge`` by rule 2, when the rubric changed).
An alarm of the ERROR share is ``judge`` on a criterion (the judge did not
answer usably) and ``agent`` on a check (the check had nothing to read). A
criterion without canary cases still gets rule 2; its decisions say
``canaries: false``, since rule 1 could not be applied.

Agent versions: two versions serving at once are two streams, so a shift of
traffic between two steady versions is not taken for drift. A version first
seen after another version of the criterion has its reference starts testing
against that reference (the regression it ships is an alarm on its stream,
``agent``, saying so); the canaries' judge stream is the criterion's, shared
by all its versions' streams, so rule 1 applies to each of them.

Times are Unix seconds, taken from the verdicts (``decided_at``); the
caller feeds observations in time order and calls :meth:`DriftMonitor.settle`
as time passes (the service) or :meth:`DriftMonitor.finish` at end of input
(the ``sidecar drift`` command), which decides the pending alarms with what
is known.
"""

from __future__ import annotations

import logging
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from sidecar.drift.detect import (
    DEFAULT_ALPHA,
    DEFAULT_BASELINE,
    DEFAULT_EVERY,
    Alarm,
    Detector,
)
from sidecar.evaluate.verdict import Verdict
from sidecar.model import Outcome
from sidecar.settings import DriftSectionSettings
from sidecar.wire.verdicts import VerdictRecord, utc_text

log = logging.getLogger(__name__)

Cause = Literal["none", "agent", "judge"]
CAUSES: tuple[Cause, ...] = ("none", "agent", "judge")
Kind = Literal["check", "criterion"]
Stream = Literal["agent", "judge"]

DEFAULT_GUARD_S = 6 * 3600.0
DEFAULT_CANARY_BASELINE = 400
DEFAULT_CANARY_EVERY = 100
DEFAULT_MAX_STREAMS = 500
# A stream fed nothing for this long (observation time) is retired: an agent version
# that stopped serving, a check or criterion that was removed.
RETIRE_AFTER_S = 7 * 24 * 3600.0


@dataclass(frozen=True, slots=True)
class DriftSettings:
    alpha: float = DEFAULT_ALPHA
    guard_s: float = DEFAULT_GUARD_S
    baseline: int = DEFAULT_BASELINE
    every: int = DEFAULT_EVERY
    canary_baseline: int = DEFAULT_CANARY_BASELINE
    canary_every: int = DEFAULT_CANARY_EVERY
    tolerance: float = 0.0
    max_streams: int = DEFAULT_MAX_STREAMS


def drift_settings(section: DriftSectionSettings) -> DriftSettings:
    """The detectors' settings from the ``drift:`` block of the service's settings."""
    return DriftSettings(**section.model_dump())


@dataclass(frozen=True, slots=True, order=True)
class StreamKey:
    rubric: str
    kind: Kind
    name: str
    scope: str = "trace"
    agent_version: str = ""  # "" for verdicts that name no agent version (and canary cases)

    @property
    def base(self) -> StreamKey:
        """The key without its agent version: where the canaries' judge stream lives."""
        return StreamKey(self.rubric, self.kind, self.name, self.scope)


@dataclass(slots=True)
class JudgeWatch:
    """A criterion's judge stream (canary disagreement), shared by its agent versions' streams."""

    detector: Detector
    alarms: list[float] = field(default_factory=list)  # when it alarmed
    seen: bool = False  # canary cases watch this criterion


@dataclass(frozen=True, slots=True)
class Decision:
    """One alarm and who it is attributed to."""

    key: StreamKey
    time: float  # when the alarm was raised (Unix seconds)
    stream: Stream  # which detector alarmed
    measure: Literal["pass_rate", "error_rate", "disagreement"]
    direction: Literal["down", "up"]
    attribution: Cause
    alarm: Alarm
    reason: str
    canaries: bool
    agent_e_value: float
    judge_e_value: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "time": utc_text(round(self.time * 1e9)),
            "rubric": self.key.rubric,
            "name": self.key.name,
            "kind": self.key.kind,
            "scope": self.key.scope,
            "agent_version": self.key.agent_version or None,
            "stream": self.stream,
            "measure": self.measure,
            "direction": self.direction,
            "attribution": self.attribution,
            "evidence": {
                "e_value": self.alarm.e_value,
                "reason": self.reason,
                "canaries": self.canaries,
                "baseline_rate": self.alarm.baseline_rate,
                "reference": self.alarm.reference,
                "recent_rate": self.alarm.recent_rate,
                "at_case": self.alarm.at,
                "agent_e_value": self.agent_e_value,
                "judge_e_value": self.judge_e_value,
            },
        }


@dataclass(slots=True)
class _Pending:
    time: float
    alarm: Alarm
    agent_e: float


@dataclass(slots=True)
class CriterionDrift:
    """The detectors of one stream key and the guard-window rule (module docstring)."""

    key: StreamKey
    settings: DriftSettings = field(default_factory=DriftSettings)
    # Shared with the criterion's other agent versions (DriftMonitor); its own when None.
    watch: JudgeWatch | None = None
    base: StreamKey = field(init=False)  # ``key.base``, made once
    passes: Detector = field(init=False)
    errors: Detector = field(init=False)
    last: Cause = "none"
    last_at: float = 0.0  # when ``last`` was decided
    # The agent version whose reference this stream's test started from (none: its own).
    inherited: str | None = None
    _pending: list[_Pending] = field(default_factory=list)
    _baseline_versions: set[tuple[str | None, str | None]] = field(default_factory=set)
    _tested_versions: set[tuple[str | None, str | None]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.base = self.key.base
        s = self.settings
        self.passes = Detector(s.alpha, "down", s.baseline, s.every, s.tolerance)
        self.errors = Detector(s.alpha, "up", s.baseline, s.every, s.tolerance)
        if self.watch is None:
            judge = Detector(s.alpha, "up", s.canary_baseline, s.canary_every, s.tolerance)
            self.watch = JudgeWatch(judge)

    @property
    def _watch(self) -> JudgeWatch:
        assert self.watch is not None
        return self.watch

    @property
    def judge(self) -> Detector:
        """The canaries' judge detector of this criterion."""
        return self._watch.detector

    @property
    def canaries(self) -> bool:
        return self._watch.seen

    @property
    def judge_alarms(self) -> list[float]:
        return self._watch.alarms

    def inherit(self, previous: CriterionDrift) -> bool:
        """Start this (new agent version's) test from ``previous``'s reference, if it has one.

        So a regression that ships with a new agent version is tested against the
        version it replaced, instead of becoming the new version's baseline.
        """
        if self.passes.seen or not previous.passes.testing:
            return False
        self.passes.adopt(previous.passes)
        if previous.errors.testing:
            self.errors.adopt(previous.errors)
        self._baseline_versions = set(previous._baseline_versions)
        self.inherited = previous.key.agent_version or "(none)"
        return True

    def verdict(
        self,
        time: float,
        outcome: Outcome,
        judge_version: str | None = None,
        rubric_hash: str | None = None,
    ) -> list[Decision]:
        decided = self.settle(time)
        if outcome is Outcome.SKIPPED:
            return decided
        errors_alarm = self.errors.update(outcome is Outcome.ERROR)
        if errors_alarm is not None:
            cause: Cause = "judge" if self.key.kind == "criterion" else "agent"
            reason = (
                "the judge's ERROR share rose: it did not answer usably"
                if cause == "judge"
                else "the check's ERROR share rose: it had nothing to read"
            )
            decided.append(self._decision(time, "agent", errors_alarm, cause, reason, "error_rate"))
        if outcome is Outcome.ERROR:
            return decided
        version = (judge_version, rubric_hash)
        (self._tested_versions if self.passes.testing else self._baseline_versions).add(version)
        alarm = self.passes.update(outcome is Outcome.PASS)
        if alarm is not None:
            changed = self._changed()
            self._baseline_versions, self._tested_versions = set(), set()
            if self._judge_within(time):
                decided.append(self._judged(time, alarm, "the canaries' judge stream alarmed"))
            elif changed is not None:
                decided.append(self._judged(time, alarm, changed))
            elif self.key.kind == "check":
                decided.append(
                    self._decision(
                        time, "agent", alarm, "agent", "a check has no judge", "pass_rate"
                    )
                )
            else:
                self._pending.append(_Pending(time, alarm, alarm.e_value))
        return decided

    def canary(self, time: float, disagreed: bool) -> list[Decision]:
        """One canary case of this criterion: whether the judge disagreed with the human label."""
        watch = self._watch
        watch.seen = True
        decided = self.settle(time)
        alarm = watch.detector.update(disagreed)
        if alarm is None:
            return decided
        watch.alarms.append(time)
        decided += self.judge_alarmed()
        decided.append(
            self._decision(
                time,
                "judge",
                alarm,
                "judge",
                "the judge disagrees with the human labels more than in its baseline",
                "disagreement",
            )
        )
        return decided

    def judge_alarmed(self) -> list[Decision]:
        """The judge stream just alarmed: agent alarms waiting within the guard window are its."""
        decided = [
            self._judged(p.time, p.alarm, "the canaries' judge stream alarmed")
            for p in self._pending
        ]
        self._pending = []
        return decided

    def settle(self, now: float) -> list[Decision]:
        """Decide the agent alarms whose guard window has passed without a judge alarm."""
        if not self._pending:
            return []
        due = [p for p in self._pending if now - p.time >= self.settings.guard_s]
        self._pending = [p for p in self._pending if now - p.time < self.settings.guard_s]
        decided = [self._agent(p) for p in due]
        if decided:
            self.last_at = max(self.last_at, now)
        return decided

    def finish(self) -> list[Decision]:
        """End of input: the pending alarms are decided with what is known (no judge alarm)."""
        due, self._pending = self._pending, []
        return [self._agent(p) for p in due]

    def current(self, now: float) -> Cause:
        """The latest decision, held for the guard window after it was made; else none."""
        if self.last != "none" and now - self.last_at < self.settings.guard_s:
            return self.last
        return "none"

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    def _agent(self, pending: _Pending) -> Decision:
        reason = (
            "no judge alarm within the guard window"
            if self.canaries
            else "no canary cases watch this criterion's judge"
        )
        if self.inherited is not None:
            reason += f"; agent version {self.key.agent_version} tested against {self.inherited}'s"
            reason += " baseline"
        return self._decision(pending.time, "agent", pending.alarm, "agent", reason, "pass_rate")

    def _judged(self, time: float, alarm: Alarm, reason: str) -> Decision:
        return self._decision(time, "agent", alarm, "judge", reason, "pass_rate")

    def _judge_within(self, time: float) -> bool:
        guard = self.settings.guard_s
        return any(time - guard <= t <= time for t in self._watch.alarms)

    def _changed(self) -> str | None:
        new = self._tested_versions - self._baseline_versions
        if not new or not self._baseline_versions:
            return None
        parts = []
        for index, label in ((0, "judge_model_version"), (1, "rubric_hash")):
            before = sorted({str(v[index]) for v in self._baseline_versions})
            after = sorted({str(v[index]) for v in new} - set(before))
            if after:
                parts.append(f"{label} changed from {', '.join(before)} to {', '.join(after)}")
        return "; ".join(parts) or None

    def _decision(
        self,
        time: float,
        stream: Stream,
        alarm: Alarm,
        cause: Cause,
        reason: str,
        measure: Literal["pass_rate", "error_rate", "disagreement"],
    ) -> Decision:
        self.last, self.last_at = cause, max(time, self.last_at)
        return Decision(
            key=self.key,
            time=time,
            stream=stream,
            measure=measure,
            direction=alarm.direction,
            attribution=cause,
            alarm=alarm,
            reason=reason,
            canaries=self.canaries,
            agent_e_value=self.passes.e_value,
            judge_e_value=self.judge.e_value if self.canaries else None,
        )


@dataclass(frozen=True, slots=True)
class Observation:
    """What the detectors read of one verdict or canary case."""

    time: float  # Unix seconds
    rubric: str
    scope: str
    results: tuple[tuple[Kind, str, Outcome], ...]
    judge_version: str | None = None
    rubric_hash: str | None = None
    agent_version: str | None = None
    # On canary cases: the human label of each criterion.
    labels: Mapping[str, Outcome] | None = None


class DriftMonitor:
    """Every stream's :class:`CriterionDrift`, at most ``max_streams`` of them.

    Verdicts that name their agent version feed that version's streams, so two
    versions serving at once are not blended into one rate. A new version's
    stream starts testing against the reference of the version last seen on
    that criterion (:meth:`CriterionDrift.inherit`). Canary cases feed the
    criterion's judge stream, shared by all its versions' streams.

    A service runs for months while agent versions come and go: a stream fed
    nothing for :data:`RETIRE_AFTER_S` (a week of observation time) is
    retired, so the bound holds the streams that serve now. An alarm it held
    is decided then, with what is known (as at the end of input); a retired
    stream fed again starts over with a new baseline. Only while
    ``max_streams`` streams are all in use are the results of a further
    stream left out (``dropped`` counts them).
    """

    def __init__(
        self, settings: DriftSettings | None = None, *, remember: int | None = None
    ) -> None:
        self.settings = settings or DriftSettings()
        self.streams: dict[StreamKey, CriterionDrift] = {}
        self.retired = 0  # streams fed nothing for RETIRE_AFTER_S, let go
        self.dropped = 0  # results of streams over the cap, left out
        # The decisions so far, oldest first; the latest ``remember`` of them when bounded
        # (a service runs for months; ``sidecar drift`` reads every one of a file's).
        self.decisions: deque[Decision] = deque(maxlen=remember)
        # Per base key: its streams by agent version, the most recently fed last.
        self._versions: dict[StreamKey, dict[str, CriterionDrift]] = {}
        self._watches: dict[StreamKey, JudgeWatch] = {}
        # The streams by their key's fields, so an observation's results find theirs
        # without making a key; and those the latest observation fed, in its order.
        self._by_fields: dict[tuple[str, Kind, str, str, str], CriterionDrift] = {}
        self.fed: list[CriterionDrift] = []
        # Every stream and when it was last fed, the least recently fed first.
        self._last_fed: OrderedDict[StreamKey, float] = OrderedDict()
        # The streams holding an agent alarm that waits for its guard window, and when
        # each stream was made (``settle`` decides them in that order, as it always did).
        self._waiting: dict[StreamKey, CriterionDrift] = {}
        self._made: dict[StreamKey, int] = {}
        self._count = 0
        # Decisions of alarms held by streams retired during an observation, and the
        # checks and criteria left without any stream (their gauges go too).
        self._retired_decisions: list[Decision] = []
        self._gone: list[StreamKey] = []

    def _stream(self, key: StreamKey) -> CriterionDrift | None:
        found = self.streams.get(key)
        if found is None:
            s = self.settings
            if len(self.streams) >= s.max_streams:
                self.dropped += 1
                return None
            watch = self._watches.get(key.base)
            if watch is None:
                judge = Detector(s.alpha, "up", s.canary_baseline, s.canary_every, s.tolerance)
                watch = self._watches[key.base] = JudgeWatch(judge)
            found = self.streams[key] = CriterionDrift(key, s, watch)
            self._made[key] = self._count
            self._count += 1
            versions = self._versions.setdefault(key.base, {})
            if key.agent_version:
                for previous in reversed(versions.values()):
                    if previous.key.agent_version and found.inherit(previous):
                        break
            versions[key.agent_version] = found
        return found

    def _retire_idle(self, now: float) -> None:
        """Retire the streams fed nothing since ``now - RETIRE_AFTER_S``."""
        last_fed = self._last_fed
        while last_fed:
            key, fed_at = next(iter(last_fed.items()))
            if now - fed_at < RETIRE_AFTER_S:
                return
            self._retire(self.streams[key])

    def _retire(self, stream: CriterionDrift) -> None:
        key = stream.key
        self._retired_decisions += stream.finish()
        self.retired += 1
        del self.streams[key], self._last_fed[key], self._made[key]
        self._waiting.pop(key, None)
        self._by_fields.pop((key.rubric, key.kind, key.name, key.scope, key.agent_version), None)
        versions = self._versions[key.base]
        del versions[key.agent_version]
        if not versions:
            # The criterion has no stream left: its judge stream goes with them.
            del self._versions[key.base], self._watches[key.base]
            self._gone.append(key.base)
        log.info(
            "drift: stream %s %s %s (%s%s) retired: fed nothing for %.0f days",
            key.rubric,
            key.kind,
            key.name,
            key.scope,
            f", agent version {key.agent_version}" if key.agent_version else "",
            RETIRE_AFTER_S / 86400,
        )

    def take_gone(self) -> list[StreamKey]:
        """The base keys of the checks and criteria whose last stream was retired since."""
        gone, self._gone = self._gone, []
        return gone

    def _stream_of(
        self, rubric: str, kind: Kind, name: str, scope: str, version: str
    ) -> CriterionDrift | None:
        fields = (rubric, kind, name, scope, version)
        found = self._by_fields.get(fields)
        if found is None:
            found = self._stream(StreamKey(*fields))
            if found is not None:
                self._by_fields[fields] = found
        return found

    def siblings(self, key: StreamKey) -> list[CriterionDrift]:
        """The streams of ``key``'s check or criterion, one per agent version."""
        return self.siblings_of(key.base)

    def siblings_of(self, base: StreamKey) -> list[CriterionDrift]:
        """The streams of the check or criterion whose base key is ``base``."""
        return list(self._versions.get(base, {}).values())

    def _fed(self, stream: CriterionDrift) -> None:
        versions = self._versions[stream.base]
        version = stream.key.agent_version
        if next(reversed(versions)) != version:
            versions[version] = versions.pop(version)

    def observe(self, o: Observation) -> list[Decision]:
        decided: list[Decision] = []
        fed: list[CriterionDrift] = []
        self.fed = fed
        # Canary cases feed the criterion's judge stream, whatever agent they came from.
        version = (o.agent_version or "") if o.labels is None else ""
        self._retire_idle(o.time)
        last_fed = self._last_fed
        for kind, name, outcome in o.results:
            stream = self._stream_of(o.rubric, kind, name, o.scope, version)
            if stream is None:
                continue
            key = stream.key
            if last_fed.get(key, o.time) <= o.time:  # out of order: keeps its later time
                last_fed[key] = o.time
            last_fed.move_to_end(key)
            fed.append(stream)
            if o.labels is None:
                self._fed(stream)
                decided += stream.verdict(o.time, outcome, o.judge_version, o.rubric_hash)
                if stream.pending:
                    self._waiting[stream.key] = stream
            elif kind == "criterion" and outcome in (Outcome.PASS, Outcome.FAIL):
                label = o.labels.get(name)
                if label in (Outcome.PASS, Outcome.FAIL):
                    alarms = len(stream.judge_alarms)
                    decided += stream.canary(o.time, outcome is not label)
                    if len(stream.judge_alarms) > alarms:
                        for other in self.siblings_of(stream.base):
                            if other is not stream:
                                decided += other.judge_alarmed()
        if self._retired_decisions:
            decided[:0] = self._retired_decisions
            self._retired_decisions = []
        self.decisions += decided
        return decided

    def observe_all(self, observations: Iterable[Observation]) -> list[Decision]:
        out: list[Decision] = []
        for o in observations:
            out += self.observe(o)
        return out

    def settle(self, now: float) -> list[Decision]:
        # Called on every observation: only streams holding an alarm have anything to decide.
        if not self._waiting:
            return []
        made = self._made
        waiting = sorted(self._waiting.values(), key=lambda s: made[s.key])
        decided = [d for s in waiting if s.pending for d in s.settle(now)]
        self._waiting = {s.key: s for s in waiting if s.pending}
        self.decisions += decided
        return decided

    def finish(self) -> list[Decision]:
        decided = [d for s in self.streams.values() for d in s.finish()]
        self._waiting = {}
        self.decisions += decided
        return decided


def _results(
    checks: Iterable[tuple[str, Outcome, bool]], criteria: Iterable[tuple[str, Outcome]]
) -> tuple[tuple[Kind, str, Outcome], ...]:
    # Gated checks (advisory ones do not decide a case) and every criterion.
    found: list[tuple[Kind, str, Outcome]] = [("check", n, o) for n, o, gate in checks if gate]
    found += [("criterion", n, o) for n, o in criteria]
    return tuple(found)


def record_observation(record: VerdictRecord) -> Observation | None:
    """What the detectors read of a verdict or canary record; None without any time.

    The time is ``decided_at``, else ``trace_end``.
    """
    moment = record.decided_at or record.trace_end
    if moment is None:
        return None
    return Observation(
        time=moment.timestamp(),
        rubric=record.rubric_id,
        scope=record.scope or "trace",
        results=_results(
            ((c.name, c.outcome, c.gate) for c in record.checks),
            ((c.name, c.outcome) for c in record.criteria),
        ),
        judge_version=record.judge_model_version,
        rubric_hash=record.rubric_hash,
        agent_version=record.agent_version,
        labels=dict(record.labels or {}) if record.canary else None,
    )


def verdict_observation(
    verdict: Verdict, labels: Mapping[str, Outcome] | None = None
) -> Observation | None:
    """What the detectors read of a verdict the service made (``labels`` on canary cases)."""
    moment = verdict.decided_at if verdict.decided_at is not None else verdict.trace_end
    if moment is None:
        return None
    return Observation(
        time=moment / 1e9,
        rubric=verdict.rubric_id,
        scope=verdict.scope,
        results=_results(
            ((c.name, c.outcome, c.gate) for c in verdict.checks),
            ((c.name, c.outcome) for c in verdict.criteria),
        ),
        judge_version=verdict.judge_model_version,
        rubric_hash=verdict.rubric_hash,
        agent_version=verdict.agent_version,
        labels=labels,
    )
