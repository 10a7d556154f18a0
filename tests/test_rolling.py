"""Rolling judge-human agreement: the window, its bounds, and agreement with the offline figures."""

from __future__ import annotations

import pytest
from sklearn.metrics import cohen_kappa_score

from sidecar.calibrate.rolling import AgreementKey, RollingAgreement
from sidecar.model import Outcome

P, F, E, S = Outcome.PASS, Outcome.FAIL, Outcome.ERROR, Outcome.SKIPPED
KEY = AgreementKey("refund", "3", "gemini-2.5-flash", "correct_amount")


def test_window_matches_cohen_kappa_over_the_last_pairs() -> None:
    judge = [P, P, F, F, P, F, P, P, F, P, F, F]
    human = [P, F, F, F, P, P, P, P, F, F, F, P]
    window = RollingAgreement(size=8)
    for j, h in zip(judge, human, strict=True):
        assert window.add(KEY, j, h)
    stats = window.stats(KEY)
    assert stats.n == 8
    assert stats.kappa == pytest.approx(cohen_kappa_score(human[-8:], judge[-8:]))
    assert stats.agreement == sum(j == h for j, h in zip(judge[-8:], human[-8:], strict=True)) / 8


@pytest.mark.parametrize(
    ("pairs", "n", "kappa", "agreement", "excluded"),
    [
        pytest.param([], 0, None, None, 0, id="empty"),
        pytest.param([(P, P), (P, P)], 2, None, 1.0, 0, id="one-class-is-undefined"),
        pytest.param([(E, P), (S, F), (P, P), (F, F)], 2, 1.0, 1.0, 2, id="judge-errors-excluded"),
        pytest.param([(P, F), (F, P)], 2, -1.0, 0.0, 0, id="always-wrong"),
    ],
)
def test_stats(
    pairs: list[tuple[Outcome, Outcome]],
    n: int,
    kappa: float | None,
    agreement: float | None,
    excluded: int,
) -> None:
    window = RollingAgreement(size=10)
    for judge, human in pairs:
        window.add(KEY, judge, human)
    stats = window.stats(KEY)
    assert (stats.n, stats.kappa, stats.agreement, stats.excluded) == (
        n,
        kappa,
        agreement,
        excluded,
    )


def test_old_pairs_leave_the_window() -> None:
    window = RollingAgreement(size=4)
    for _ in range(4):
        window.add(KEY, F, P)  # the judge disagreed for a while
    assert window.stats(KEY).agreement == 0.0
    for _ in range(4):
        window.add(KEY, P, P)
    assert window.stats(KEY).agreement == 1.0
    assert window.stats(KEY).n == 4


def test_keys_are_bounded_and_least_recently_updated_goes_first() -> None:
    window = RollingAgreement(size=3, max_keys=2)
    keys = [AgreementKey("r", "1", "j", f"c{i}") for i in range(3)]
    window.add(keys[0], P, P)
    window.add(keys[1], P, P)
    window.add(keys[0], F, F)  # keys[0] is now the most recently updated
    window.add(keys[2], P, P)
    assert window.keys() == [keys[0], keys[2]]
    assert window.evicted == 1
    assert window.stats(keys[1]).n == 0
    assert len(window) == 2


def test_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        RollingAgreement(size=0)
    with pytest.raises(ValueError, match="human label"):
        RollingAgreement().add(KEY, P, E)
