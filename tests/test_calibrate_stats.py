"""Agreement statistics against scikit-learn and statsmodels, and pinned worked examples."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import (
    balanced_accuracy_score,
    cohen_kappa_score,
    confusion_matrix,
    f1_score,
)
from statsmodels.stats.proportion import proportion_confint

from sidecar.calibrate.stats import Confusion, cohen_kappa, wilson_interval, z_score

pairs_strategy = st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=300)


def _labels(values: Sequence[bool]) -> list[str]:
    return ["PASS" if v else "FAIL" for v in values]


def _oracle(
    metric: Callable[..., float], pairs: Sequence[tuple[bool, bool]], **kw: object
) -> float:
    human = _labels([h for h, _ in pairs])
    judge = _labels([j for _, j in pairs])
    # scikit-learn warns on the degenerate cases we test on purpose.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(metric(human, judge, **kw))


@settings(max_examples=200, deadline=None)
@given(pairs_strategy)
def test_confusion_matches_sklearn(pairs: list[tuple[bool, bool]]) -> None:
    c = Confusion.from_pairs(pairs)
    human = _labels([h for h, _ in pairs])
    judge = _labels([j for _, j in pairs])
    matrix = confusion_matrix(human, judge, labels=["PASS", "FAIL"])
    assert [[c.tp, c.fn], [c.fp, c.tn]] == matrix.tolist()


@settings(max_examples=200, deadline=None)
@given(pairs_strategy)
def test_kappa_matches_sklearn(pairs: list[tuple[bool, bool]]) -> None:
    expected = _oracle(cohen_kappa_score, pairs)
    got = Confusion.from_pairs(pairs).kappa
    if math.isnan(expected):
        assert got is None
    else:
        assert got == pytest.approx(expected, abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(pairs_strategy)
def test_balanced_accuracy_matches_sklearn(pairs: list[tuple[bool, bool]]) -> None:
    got = Confusion.from_pairs(pairs).balanced_accuracy
    assert got == pytest.approx(_oracle(balanced_accuracy_score, pairs), abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(pairs_strategy)
def test_balanced_f1_is_vertex_weighted_f1(pairs: list[tuple[bool, bool]]) -> None:
    got = Confusion.from_pairs(pairs).balanced_f1
    assert got == pytest.approx(_oracle(f1_score, pairs, average="weighted"), abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(pairs_strategy)
def test_macro_f1_matches_sklearn(pairs: list[tuple[bool, bool]]) -> None:
    got = Confusion.from_pairs(pairs).macro_f1
    assert got == pytest.approx(_oracle(f1_score, pairs, average="macro"), abs=1e-12)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(min_value=1, max_value=2000).flatmap(
        lambda n: st.tuples(st.integers(min_value=0, max_value=n), st.just(n))
    ),
    st.floats(min_value=0.5, max_value=0.999),
)
def test_wilson_matches_statsmodels(counts: tuple[int, int], confidence: float) -> None:
    successes, n = counts
    low, high = proportion_confint(successes, n, alpha=1 - confidence, method="wilson")
    interval = wilson_interval(successes, n, confidence)
    assert interval is not None
    assert interval.low == pytest.approx(low, abs=1e-12)
    assert interval.high == pytest.approx(high, abs=1e-12)
    assert 0.0 <= interval.low <= interval.high <= 1.0


@pytest.mark.parametrize(
    ("successes", "n", "confidence", "low", "high"),
    [
        pytest.param(45, 50, 0.95, 0.786398, 0.956524, id="45-of-50"),
        pytest.param(0, 20, 0.95, 0.0, 0.161125, id="zero-successes"),
        pytest.param(20, 20, 0.95, 0.838875, 1.0, id="all-successes"),
        pytest.param(95, 100, 0.95, 0.888250, 0.978456, id="95-of-100"),
        pytest.param(145, 150, 0.90, 0.933115, 0.983682, id="90-percent"),
    ],
)
def test_wilson_pinned(successes: int, n: int, confidence: float, low: float, high: float) -> None:
    interval = wilson_interval(successes, n, confidence)
    assert interval is not None
    assert (round(interval.low, 6), round(interval.high, 6)) == (low, high)
    # statsmodels agrees at the edges too, 0 and n successes included.
    ref_low, ref_high = proportion_confint(successes, n, alpha=1 - confidence, method="wilson")
    assert (interval.low, interval.high) == pytest.approx((ref_low, ref_high), abs=1e-12)


def test_wilson_edges() -> None:
    assert wilson_interval(0, 0) is None
    with pytest.raises(ValueError, match="between 0 and n"):
        wilson_interval(3, 2)
    with pytest.raises(ValueError, match="confidence"):
        wilson_interval(1, 2, confidence=1.0)
    assert z_score(0.95) == pytest.approx(1.959964, abs=1e-6)


def test_worked_example_kappa() -> None:
    # 200 cases; humans pass 150, the judge passes 160, they agree on 180:
    # 145 both pass, 35 both fail, 5 false fails, 15 false passes.
    pairs = (
        [(True, True)] * 145 + [(False, False)] * 35 + [(True, False)] * 5 + [(False, True)] * 15
    )
    c = Confusion.from_pairs(pairs)
    assert (c.n, c.human_passes, c.judge_passes, c.tp + c.tn) == (200, 150, 160, 180)
    assert c.kappa is not None
    assert round(c.kappa, 3) == 0.714
    assert c.agreement == 0.9
    assert c.balanced_accuracy == pytest.approx(0.833333, abs=1e-6)  # (145/150 + 35/50) / 2
    assert cohen_kappa([h for h, _ in pairs], [j for _, j in pairs]) == c.kappa


@pytest.mark.parametrize(
    ("confusion", "kappa", "agreement", "balanced_accuracy", "note"),
    [
        pytest.param(Confusion(), None, None, None, "no items", id="empty"),
        pytest.param(
            Confusion(tp=7), None, 1.0, 1.0, "gave only PASS; kappa is undefined", id="all-pass"
        ),
        pytest.param(
            Confusion(tn=4), None, 1.0, 1.0, "gave only FAIL; kappa is undefined", id="all-fail"
        ),
        pytest.param(Confusion(tp=1), None, 1.0, 1.0, "kappa is undefined", id="single-item-agree"),
        pytest.param(
            Confusion(fp=1), 0.0, 0.0, 0.0, "humans gave only FAIL", id="single-item-disagree"
        ),
        pytest.param(
            Confusion(tp=6, fn=4), 0.0, 0.6, 0.6, "humans gave only PASS", id="humans-one-class"
        ),
        pytest.param(Confusion(tp=3, tn=3, fp=1, fn=1), 0.5, 0.75, 0.75, None, id="ordinary"),
    ],
)
def test_degenerate_inputs(
    confusion: Confusion,
    kappa: float | None,
    agreement: float | None,
    balanced_accuracy: float | None,
    note: str | None,
) -> None:
    assert confusion.kappa == kappa
    assert confusion.agreement == agreement
    assert confusion.balanced_accuracy == balanced_accuracy
    for value in (confusion.balanced_f1, confusion.macro_f1):
        assert value is None or not math.isnan(value)
    got = confusion.degenerate_note()
    if note is None:
        assert got is None
    else:
        assert got is not None
        assert note in got


def test_llmbar_natural_gpt4_counts() -> None:
    # The counts the data README gives for Natural/GPT-4 without swap.
    c = Confusion(tp=40, fn=2, tn=55, fp=3)
    assert c.kappa is not None
    assert round(c.kappa, 4) == 0.8977
    assert c.balanced_accuracy == pytest.approx(0.950328, abs=1e-6)
    assert c.balanced_f1 == pytest.approx(0.950077, abs=1e-6)
    assert c.macro_f1 == pytest.approx(0.948849, abs=1e-6)
