"""Rolling judge-human agreement for the production review loop.

Human labels for reviewed cases arrive one by one; each is paired with the
judge's verdict on the same case and criterion. Per (rubric, rubric version,
judge model, criterion) the window keeps the last ``size`` pairs and answers
kappa and raw agreement over them, so drift shows within a window rather than
at the next offline calibration.

Bounds: ``size`` pairs per key (the oldest pair leaves when a new one comes),
and ``max_keys`` keys (the key updated least recently leaves; ``evicted``
counts it, for a metric). Pairs where the judge said ERROR or SKIPPED carry no
agreement and are counted in ``excluded`` instead. Counts are kept
incrementally, so ``stats`` costs the same for any window size.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from dataclasses import dataclass

from sidecar.calibrate.stats import Confusion
from sidecar.model import Outcome

DEFAULT_WINDOW = 200
DEFAULT_MAX_KEYS = 1000


@dataclass(frozen=True, slots=True)
class AgreementKey:
    rubric: str
    rubric_version: str
    judge_model: str
    criterion: str


@dataclass(frozen=True, slots=True)
class AgreementStats:
    n: int
    kappa: float | None  # None when undefined (empty, or one class on both sides)
    agreement: float | None
    excluded: int


class _Window:
    __slots__ = ("counts", "excluded", "pairs")

    def __init__(self, size: int) -> None:
        self.pairs: deque[tuple[bool, bool]] = deque(maxlen=size)
        self.counts: Counter[tuple[bool, bool]] = Counter()
        self.excluded = 0

    def add(self, pair: tuple[bool, bool]) -> None:
        if len(self.pairs) == self.pairs.maxlen:
            self.counts[self.pairs[0]] -= 1
        self.pairs.append(pair)
        self.counts[pair] += 1

    def confusion(self) -> Confusion:
        c = self.counts
        return Confusion(
            tp=c[(True, True)], fp=c[(False, True)], fn=c[(True, False)], tn=c[(False, False)]
        )


class RollingAgreement:
    """The last ``size`` (judge, human) label pairs per key, with kappa and agreement."""

    def __init__(self, size: int = DEFAULT_WINDOW, max_keys: int = DEFAULT_MAX_KEYS) -> None:
        if size < 1 or max_keys < 1:
            raise ValueError("window size and max_keys must be at least 1")
        self._size = size
        self._max_keys = max_keys
        self._windows: OrderedDict[AgreementKey, _Window] = OrderedDict()
        self.evicted = 0

    def add(self, key: AgreementKey, judge: Outcome, human: Outcome) -> bool:
        """Record one pair; False when it carries no agreement (judge ERROR/SKIPPED)."""
        if human not in (Outcome.PASS, Outcome.FAIL):
            raise ValueError(f"a human label is PASS or FAIL, got {human}")
        window = self._windows.get(key)
        if window is None:
            if len(self._windows) >= self._max_keys:
                self._windows.popitem(last=False)
                self.evicted += 1
            window = self._windows[key] = _Window(self._size)
        self._windows.move_to_end(key)
        if judge not in (Outcome.PASS, Outcome.FAIL):
            window.excluded += 1
            return False
        window.add((human == Outcome.PASS, judge == Outcome.PASS))
        return True

    def stats(self, key: AgreementKey) -> AgreementStats:
        window = self._windows.get(key)
        if window is None:
            return AgreementStats(n=0, kappa=None, agreement=None, excluded=0)
        confusion = window.confusion()
        return AgreementStats(
            n=confusion.n,
            kappa=confusion.kappa,
            agreement=confusion.agreement,
            excluded=window.excluded,
        )

    def keys(self) -> list[AgreementKey]:
        """Keys in least-recently-updated order."""
        return list(self._windows)

    def __len__(self) -> int:
        return len(self._windows)
