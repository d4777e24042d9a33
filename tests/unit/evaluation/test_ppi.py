"""Prediction-powered inference of a mean quality: the value on a hand case, coverage over simulated draws, the
narrower interval when the proxy tracks the judge, and the edge cases."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from lcrag.core.errors import InputError
from lcrag.evaluation.ppi import estimate, sample, tuned_lambda

Z = NormalDist().inv_cdf(0.975)
PROXY = [0.6, 0.4, 0.5, 0.5, 0.7, 0.3]
VERDICTS = {0: 1.0, 1: 0.0, 2: 1.0}  # the first three answers judged


def test_a_hand_computed_case():
    e = estimate(PROXY, VERDICTS, lam=1.0)
    # rectifier Y − f on the judged: 0.4, −0.4, 0.5 (mean 1/6, variance 219/900); proxy on the unjudged: mean 0.5;
    # var(f) over all six: 0.02. θ = 0.5 + 1/6; var = (219/900)/3 + 0.02/3 = 79/900.
    assert e.ppi.estimate == pytest.approx(2 / 3)
    assert e.ppi.low == pytest.approx(2 / 3 - Z * math.sqrt(79) / 30)
    assert e.ppi.high == 1.0  # 2/3 + 0.58 is clipped to the scores' range
    # judged alone: mean 2/3, variance 1/3 over 3 answers
    assert e.classical.estimate == pytest.approx(2 / 3)
    assert e.classical.low == pytest.approx(2 / 3 - Z / 3)
    assert (e.proxy, e.judged, e.total, e.lam) == (pytest.approx(0.5), 3, 6, 1.0)


def test_power_tuning_is_ppi_plus_plus_and_clipped():
    y, f = np.array([1.0, 0.0, 1.0]), np.array(PROXY)
    # cov(Y, f) on the judged = 0.05, var(f) = 0.02, N − n = n = 3: 0.05 / 0.02 × 3/6 = 1.25, clipped to 1
    assert tuned_lambda(y, f[:3], f) == 1.0
    assert tuned_lambda(1 - y, f[:3], f) == 0.0  # a proxy that runs against the judge is not used
    assert tuned_lambda(y, np.full(3, 0.5), np.full(6, 0.5)) == 0.0  # a constant proxy says nothing
    assert estimate(PROXY, VERDICTS).ppi == estimate(PROXY, VERDICTS, lam=1.0).ppi


def test_every_answer_judged_is_the_classical_estimate():
    proxy = [0.9, 0.1, 0.8, 0.3]
    e = estimate(proxy, {0: 1.0, 1: 0.0, 2: 1.0, 3: 1.0}, lam=1.0)  # N = n: no unjudged answer to impute
    assert e.lam == 0.0 and e.ppi == e.classical and e.ppi.estimate == 0.75


@pytest.mark.parametrize("verdicts, message", [({}, "at least 2 judged answers, got 0"),
                                               ({0: 1.0}, "at least 2 judged answers, got 1"),
                                               ({0: 1.0, 9: 0.0}, "outside the 6 answers")])
def test_too_few_or_stray_verdicts_are_one_line_errors(verdicts, message):
    with pytest.raises(InputError, match=message):
        estimate(PROXY, verdicts)


def test_the_sample_is_uniform_without_replacement_and_seeded():
    draw = sample(100, 10, seed=3)
    assert draw == sorted(set(draw)) and len(draw) == 10 and all(0 <= i < 100 for i in draw)
    assert sample(100, 10, seed=3) == draw and sample(100, 10, seed=4) != draw
    assert sample(100, 10, seed="0:run-a") != sample(100, 10, seed="0:run-b")
    assert sample(5, 10) == [0, 1, 2, 3, 4]  # more than there are: all of them
    with pytest.raises(InputError, match="at least 1"):
        sample(5, 0)
    counts = np.bincount([i for s in range(2000) for i in sample(10, 3, seed=s)], minlength=10)
    assert counts.min() > 500 and counts.max() < 700  # each index drawn ~600 times in 2,000 draws of 3 of 10


def draws(rng, reps=600, total=500, judged=50, noise=0.1, lam=None):
    """``reps`` evaluations of a reader whose judge verdicts are Bernoulli(p) per question (true mean 0.5) and whose
    proxy is a biased, noisy reading of p (mean ≈ 0.45): each judges ``judged`` of ``total`` answers."""
    results = []
    for _ in range(reps):
        p = rng.uniform(0, 1, total)
        y = (rng.uniform(0, 1, total) < p).astype(float)
        f = np.clip(0.8 * p + 0.05 + rng.normal(0, noise, total), 0, 1)
        chosen = rng.choice(total, judged, replace=False)
        results.append(estimate(f, {int(i): float(y[i]) for i in chosen}, lam=lam))
    return results


@pytest.mark.parametrize("lam", [None, 1.0])
def test_the_interval_covers_the_true_mean_95_percent_of_the_time(lam):
    results = draws(np.random.default_rng(7), lam=lam)
    coverage = np.mean([e.ppi.low <= 0.5 <= e.ppi.high for e in results])
    classical = np.mean([e.classical.low <= 0.5 <= e.classical.high for e in results])
    assert 0.92 <= coverage <= 0.98 and 0.92 <= classical <= 0.98
    # narrower than the judged answers alone, because the proxy tracks the judge
    assert np.mean([e.ppi.width for e in results]) < 0.92 * np.mean([e.classical.width for e in results])
    # the proxy alone is biased: its mean misses the truth by far more than the PPI estimate does
    assert abs(np.mean([e.proxy for e in results]) - 0.5) > 0.04
    assert abs(np.mean([e.ppi.estimate for e in results]) - 0.5) < 0.01


def test_a_proxy_that_says_nothing_costs_nothing():
    rng = np.random.default_rng(11)
    results = []
    for _ in range(200):
        y = (rng.uniform(0, 1, 300) < 0.5).astype(float)
        f = rng.uniform(0, 1, 300)  # unrelated to the verdicts
        results.append(estimate(f, {i: float(y[i]) for i in range(40)}))
    assert np.mean([e.lam for e in results]) < 0.15
    assert np.mean([e.ppi.width for e in results]) <= 1.02 * np.mean([e.classical.width for e in results])


def test_verdicts_that_all_agree_still_leave_an_interval():
    """20 of 20 judged True is not certainty: the interval is Agresti-Coull's width for a proportion, not zero, and
    it still covers a reader right 95% of the time (which 20 of 20 happens for a third of the time)."""
    proxy = [0.9] * 200
    e = estimate(proxy, {i: 1.0 for i in range(20)})
    shrunk = (20 + Z * Z / 2) / (20 + Z * Z)
    assert e.classical.estimate == 1.0 and e.classical.high == 1.0
    assert e.classical.low == pytest.approx(1 - Z * math.sqrt(shrunk * (1 - shrunk) / 20))
    assert 0.85 < e.classical.low < 0.95 and e.ppi.low < 0.95
    none = estimate(proxy, {i: 0.0 for i in range(20)})
    assert none.classical.low == 0.0 and 0.05 < none.classical.high < 0.15
