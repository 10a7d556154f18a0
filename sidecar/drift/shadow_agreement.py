"""Judge against judge: how a shadow model's verdicts agree with the primary's.

Before a rubric's judge model is switched, a share of the judged cases is
judged a second time by the candidate (the *shadow*, :mod:`sidecar.judge.shadow`).
This module keeps the comparison, per rubric x criterion x (model, shadow
model):

- each compared case is **agree** (both PASS or both FAIL), **disagree**, or
  **error** (either side is not PASS/FAIL: an ERROR, a failed call);
- **Cohen's kappa** over the latest ``window`` agreeing or disagreeing
  cases, the primary as one rater and the shadow as the other (None while
  undefined: no cases, or both raters gave one class only);
- an anytime-valid **disagreement detector**
  (:class:`~sidecar.drift.detect.Detector`, direction up, against the fixed
  rate ``max_disagreement``): its e-value is the evidence that the shadow
  disagrees with the primary more often than that; it alarms at ``2 / alpha``.

Which cases are shadowed is decided by :func:`shadow_selected`, a hash of the
case's id salted apart from the judge sampler's, so the shadowed cases are a
uniform share of the judged ones, the same on every replica and restart.
Everything here is pure: the same comparisons give the same figures.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from sidecar.calibrate.stats import Confusion
from sidecar.drift.detect import Alarm, Detector
from sidecar.evaluate.sample import trace_fraction
from sidecar.model import Outcome

ShadowOutcome = Literal["agree", "disagree", "error"]
SHADOW_OUTCOMES: tuple[ShadowOutcome, ...] = ("agree", "disagree", "error")
# Keeps the shadow's choice of cases independent of the judge sampler's.
_SALT = "shadow-judge/"
DEFAULT_MAX_KEYS = 500


def shadow_fraction(case_id: str) -> float:
    """The case's place in [0, 1), uniform and reproducible, apart from the sampler's."""
    return trace_fraction(_SALT + case_id)


def shadow_selected(case_id: str, share: float) -> bool:
    """Whether a judged case is judged again by the shadow model (a lower share: a subset)."""
    return share > 0.0 and shadow_fraction(case_id) < share


def compare(primary: Outcome, shadow: Outcome) -> ShadowOutcome:
    """One criterion's pair of verdicts; anything but PASS/FAIL on either side is ``error``."""
    decided = (Outcome.PASS, Outcome.FAIL)
    if primary not in decided or shadow not in decided:
        return "error"
    return "agree" if primary is shadow else "disagree"


@dataclass(frozen=True, slots=True, order=True)
class ShadowKey:
    rubric: str
    criterion: str
    model: str
    shadow_model: str


@dataclass(frozen=True, slots=True)
class ShadowPair:
    """One criterion of one case, as both judges decided it."""

    criterion: str
    primary: Outcome
    shadow: Outcome


@dataclass(slots=True)
class Agreement:
    """One key's comparisons: outcome counts, the kappa window and the detector."""

    window: int
    detector: Detector
    counts: dict[ShadowOutcome, int] = field(
        default_factory=lambda: dict.fromkeys(SHADOW_OUTCOMES, 0)
    )
    alarms: int = 0
    _pairs: deque[tuple[bool, bool]] = field(init=False)

    def __post_init__(self) -> None:
        self._pairs = deque(maxlen=self.window)

    def add(self, primary: Outcome, shadow: Outcome) -> tuple[ShadowOutcome, Alarm | None]:
        outcome = compare(primary, shadow)
        self.counts[outcome] += 1
        if outcome == "error":
            return outcome, None
        self._pairs.append((primary is Outcome.PASS, shadow is Outcome.PASS))
        alarm = self.detector.update(outcome == "disagree")
        if alarm is not None:
            self.alarms += 1
        return outcome, alarm

    @property
    def confusion(self) -> Confusion:
        """The window's 2x2 table, the primary as reference and the shadow as judge."""
        return Confusion.from_pairs(self._pairs)

    @property
    def kappa(self) -> float | None:
        return self.confusion.kappa

    @property
    def disagreement(self) -> float | None:
        """The window's share of disagreeing cases (None before any)."""
        agreement = self.confusion.agreement
        return None if agreement is None else 1.0 - agreement

    @property
    def e_value(self) -> float:
        return self.detector.e_value


@dataclass(frozen=True, slots=True)
class ShadowAlarm:
    key: ShadowKey
    alarm: Alarm


class ShadowBoard:
    """Every key's :class:`Agreement`, at most ``max_keys`` of them (drops counted)."""

    def __init__(
        self,
        *,
        window: int = 500,
        max_disagreement: float = 0.1,
        alpha: float = 0.01,
        max_keys: int = DEFAULT_MAX_KEYS,
    ) -> None:
        self.window = window
        self.max_disagreement = max_disagreement
        self.alpha = alpha
        self.max_keys = max_keys
        self.keys: dict[ShadowKey, Agreement] = {}
        self.dropped = 0  # comparisons of keys over the cap

    def agreement(self, key: ShadowKey) -> Agreement | None:
        found = self.keys.get(key)
        if found is None:
            if len(self.keys) >= self.max_keys:
                self.dropped += 1
                return None
            detector = Detector(self.alpha, "up", fixed=self.max_disagreement)
            found = self.keys[key] = Agreement(self.window, detector)
        return found

    def add(
        self, rubric: str, model: str, shadow_model: str, pairs: Iterable[ShadowPair]
    ) -> list[tuple[ShadowKey, ShadowOutcome, ShadowAlarm | None]]:
        """One shadowed case: each criterion's outcome and any alarm it raised."""
        out: list[tuple[ShadowKey, ShadowOutcome, ShadowAlarm | None]] = []
        for pair in pairs:
            key = ShadowKey(rubric, pair.criterion, model, shadow_model)
            found = self.agreement(key)
            if found is None:
                continue
            outcome, alarm = found.add(pair.primary, pair.shadow)
            out.append((key, outcome, ShadowAlarm(key, alarm) if alarm is not None else None))
        return out
