"""Anytime-valid drift detectors: testing by betting on a stream of yes/no outcomes.

A :class:`Detector` watches one stream of binary outcomes (a criterion's
PASS among its PASS/FAIL verdicts, a judged case's ERROR, a canary case's
judge-versus-human disagreement) and raises an alarm when the stream's rate
has moved, in one chosen direction, away from its own baseline. The alarm is
*anytime-valid*: however often the evidence is looked at, and however long
the stream runs, the chance that a stream which never moved raises it is at
most ``alpha``.

How it works (testing by betting, Shafer; Waudby-Smith and Ramdas, "Estimating
means of bounded random variables by betting", 2023):

1. **Baseline.** The first ``baseline`` outcomes fix the reference rate. For
   a drop (``direction="down"``) the reference is the exact (Clopper-Pearson)
   lower confidence bound of the baseline's rate at level ``alpha / 2``,
   less ``tolerance``; for a rise (``"up"``) the outcomes are flipped and the
   same is done. The truth is at least the reference except with probability
   ``alpha / 2``.
2. **Betting.** A gambler starts with wealth 1 and, before each new outcome
   ``x``, stakes a fraction ``lam`` in ``[0, 1/2]`` of its wealth on "the
   rate is below the reference ``p0``": the wealth is multiplied by
   ``1 + lam * (p0 - x) / (1 - p0)``, so an outcome of 1 loses the stake
   (the factor stays at least 1/2) and an outcome of 0 wins ``p0 / (1 - p0)``
   times it, the odds that are fair at rate ``p0``. While the
   rate is at least ``p0`` each factor has expectation at most 1, so the
   wealth is a nonnegative supermartingale and, by Ville's inequality, it
   ever reaches ``2 / alpha`` with probability at most ``alpha / 2``.
   Together with the baseline's ``alpha / 2`` the false-alarm level is
   ``alpha``. The stake is chosen by online Newton steps (ONS, Cutkosky and
   Orabona 2018), from past outcomes only, so it grows when the outcomes keep
   coming out below the reference and shrinks to nothing when they do not.
3. **Late changes.** A single gambler that has bet through a long stable
   stretch has lost a little, and would need longer to catch a drop that
   starts late. So a new gambler joins every ``every`` outcomes, the k-th
   (k = 1, 2, ...) with a share ``1 / (k (k + 1))`` of the unit stake (the
   shares sum to at most 1); the e-value is the total wealth. A weighted sum
   of test supermartingales started at fixed times is one too, and leaving a
   gambler out (at most ``MAX_GAMBLERS`` are kept; the poorest is let go)
   only makes the sum smaller, so the level holds.

4. **A fixed reference.** Given ``reference`` (a rate on the stream's own
   scale), there is no baseline: the test starts at once against that rate
   ("the rate is at most ``reference``" for ``up``, "at least" for
   ``down``), and after an alarm it starts over against the same rate. The
   threshold stays ``2 / alpha``, so the level is then ``alpha / 2``. The
   shadow judge's disagreement rate is tested this way (is it above what a
   migration may change?).

The **e-value** is the total wealth: large values are evidence of a move
(``1 / e`` is an anytime-valid p-value). The detector alarms once when it
reaches ``2 / alpha`` and then starts over (a new baseline from the outcomes
that follow), so a stream that stays moved is not reported again and again.
Everything here is pure and deterministic: the same outcomes give the same
alarms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

Direction = Literal["down", "up"]

DEFAULT_ALPHA = 0.01
DEFAULT_BASELINE = 1000
DEFAULT_EVERY = 500
MAX_GAMBLERS = 32
MAX_STAKE = 0.5
# The ONS step constant of Cutkosky and Orabona for stakes in [0, 1/2].
_ONS = 2.0 / (2.0 - math.log(3.0))
# A gambler whose wealth fell below this is let go (it can only make the sum smaller).
_LOG_FLOOR = -30.0


def _log_binomial_upper_tail(k: int, n: int, p: float) -> float:
    """log P(Binomial(n, p) >= k)."""
    if k <= 0:
        return 0.0
    if p <= 0.0:
        return -math.inf
    if p >= 1.0:
        return 0.0
    lp, lq = math.log(p), math.log1p(-p)
    terms = [
        math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq
        for i in range(k, n + 1)
    ]
    top = max(terms)
    return top + math.log(sum(math.exp(t - top) for t in terms))


def lower_bound(successes: int, n: int, delta: float) -> float:
    """The exact (Clopper-Pearson) one-sided lower ``1 - delta`` bound of a binomial rate.

    The smallest ``p`` with ``P(Binomial(n, p) >= successes) >= delta``; 0 when
    there are no successes.
    """
    if not 0 <= successes <= n or n <= 0:
        raise ValueError(f"need 0 <= successes <= n and n > 0, got {successes} of {n}")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if successes == 0:
        return 0.0
    target = math.log(delta)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if _log_binomial_upper_tail(successes, n, mid) < target:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(slots=True)
class _Gambler:
    """One ONS bettor: its share of the stake, its log wealth and its next stake."""

    log_share: float
    log_wealth: float = 0.0
    stake: float = 0.0
    curvature: float = 1.0


def _log_sum(values: list[float]) -> float:
    if not values:
        return -math.inf
    top = max(values)
    return top + math.log(sum(map(math.exp, [v - top for v in values])))


@dataclass(frozen=True, slots=True)
class Alarm:
    """The detector reached its threshold at outcome ``at`` (1-based, since it started)."""

    at: int
    e_value: float
    baseline_rate: float  # the baseline's observed rate of the stream's outcome (unflipped)
    reference: float  # the bound tested against, on the same scale as ``baseline_rate``
    recent_rate: float  # the rate since the test started
    direction: Direction


@dataclass(slots=True)
class Detector:
    """One stream's anytime-valid detector (the module docstring has the method).

    :meth:`update` takes each outcome (``True`` = the event counted, e.g.
    PASS for a pass-rate stream) and returns an :class:`Alarm` when the
    e-value reaches ``2 / alpha``.
    """

    alpha: float = DEFAULT_ALPHA
    direction: Direction = "down"
    baseline: int = DEFAULT_BASELINE
    every: int = DEFAULT_EVERY
    tolerance: float = 0.0
    # A fixed rate to test against instead of a baseline (module docstring, 4.).
    fixed: float | None = None
    seen: int = 0  # outcomes since the detector was made
    _base_n: int = 0
    _base_hits: int = 0
    _p0: float | None = None  # the reference, on the tested (drop) scale
    _scale: float = 1.0
    _tested: int = 0
    _tested_hits: int = 0
    _gamblers: list[_Gambler] = field(default_factory=list)
    _joined: int = 0
    _log_e: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if self.baseline < 1 or self.every < 1:
            raise ValueError("baseline and every must be at least 1")
        if not 0.0 <= self.tolerance < 1.0:
            raise ValueError(f"tolerance must be in [0, 1), got {self.tolerance}")
        if self.fixed is not None:
            if not 0.0 < self.fixed < 1.0:
                raise ValueError(f"a fixed reference must be in (0, 1), got {self.fixed}")
            self._start_fixed()

    @property
    def threshold(self) -> float:
        return 2.0 / self.alpha

    @property
    def e_value(self) -> float:
        """The evidence so far against "no move" (1 before any test; grows with evidence)."""
        return math.exp(min(self._log_e, 700.0))

    @property
    def log_e_value(self) -> float:
        return self._log_e

    @property
    def testing(self) -> bool:
        """Whether the baseline is complete and outcomes are being bet on."""
        return self._p0 is not None

    @property
    def reference(self) -> float | None:
        """The rate tested against, on the stream's own scale (None during the baseline)."""
        if self._p0 is None:
            return None
        return self._p0 if self.direction == "down" else 1.0 - self._p0

    def adopt(self, other: Detector) -> None:
        """Skip the baseline: test from ``other``'s reference (a new agent version's stream)."""
        if other._p0 is None:
            raise ValueError("the detector to adopt from has no reference yet")
        self._begin(other._p0)
        self._base_n, self._base_hits = other._base_n, other._base_hits

    def update(self, outcome: bool) -> Alarm | None:
        self.seen += 1
        x = bool(outcome) if self.direction == "down" else not outcome
        if self._p0 is None:
            self._base_n += 1
            self._base_hits += x
            if self._base_n >= self.baseline:
                self._start_test()
            return None
        self._tested += 1
        self._tested_hits += x
        joined = (self._tested - 1) % self.every == 0
        if joined:
            self._joined += 1
            k = self._joined
            self._gamblers.append(_Gambler(log_share=-math.log(k * (k + 1))))
            if len(self._gamblers) > MAX_GAMBLERS:
                self._gamblers.remove(min(self._gamblers, key=lambda g: g.log_wealth))
        # An outcome of 1 loses the stake (gain -1); an outcome of 0 wins p0 / (1 - p0) times it.
        gain = (self._p0 - x) / self._scale
        moved = joined
        sunk = False  # a wealth fell to the floor (only a bet moves a wealth)
        square = gain * gain
        log = math.log
        # The hot loop of the drift detectors (every stream, every verdict): the two
        # builtin calls of min(MAX_STAKE, max(0.0, stake)) are written as comparisons.
        for gambler in self._gamblers:
            # The wealth is multiplied by 1 + stake * gain (gain >= -1, stake <= 1/2).
            stake = gambler.stake
            if stake == 0.0 and gain <= 0.0:
                # Nothing staked, and the step would push the stake below 0: only the
                # curvature moves, the wealth stays.
                gambler.curvature += square
                continue
            factor = 1.0 + stake * gain
            wealth = gambler.log_wealth = gambler.log_wealth + log(factor)
            if wealth <= _LOG_FLOOR:
                sunk = True
            z = gain / factor
            curvature = gambler.curvature = gambler.curvature + z * z
            stake += _ONS * z / curvature
            gambler.stake = 0.0 if stake <= 0.0 else MAX_STAKE if stake >= MAX_STAKE else stake
            moved = True
        if moved:
            # Unmoved wealths leave the floor and the sum as they were (a stable stream's
            # usual step: its stakes sit at 0 while outcomes come out at the reference).
            if sunk:
                self._gamblers = [g for g in self._gamblers if g.log_wealth > _LOG_FLOOR]
            self._log_e = _log_sum([g.log_share + g.log_wealth for g in self._gamblers])
        if self._log_e < math.log(self.threshold):
            return None
        alarm = self._alarm()
        self._restart()
        return alarm

    def _start_fixed(self) -> None:
        assert self.fixed is not None
        self._begin(self.fixed if self.direction == "down" else 1.0 - self.fixed)

    def _start_test(self) -> None:
        bound = lower_bound(self._base_hits, self._base_n, self.alpha / 2)
        self._begin(max(0.0, bound - self.tolerance))

    def _begin(self, p0: float) -> None:
        self._p0 = p0
        self._scale = 1.0 - self._p0
        self._tested = self._tested_hits = self._joined = 0
        self._gamblers = []
        self._log_e = 0.0

    def _alarm(self) -> Alarm:
        assert self._p0 is not None
        rate = self._base_hits / self._base_n if self._base_n else self._p0
        recent = self._tested_hits / self._tested
        down = self.direction == "down"
        return Alarm(
            at=self.seen,
            e_value=self.e_value,
            baseline_rate=rate if down else 1.0 - rate,
            reference=self._p0 if down else 1.0 - self._p0,
            recent_rate=recent if down else 1.0 - recent,
            direction=self.direction,
        )

    def _restart(self) -> None:
        self._base_n = self._base_hits = 0
        self._p0 = None
        self._gamblers = []
        self._log_e = 0.0
        if self.fixed is not None:
            self._start_fixed()
