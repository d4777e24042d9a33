"""Prediction-powered inference (PPI) of a mean quality: a proxy score on every answer, a judge on a few.

Every one of N answers has a cheap proxy score ``f`` (the run's metric, e.g. the offline LaRA scorer's probability);
a uniform random sample of n of them also has the judge's verdict ``Y``. The quality to estimate is the mean verdict.
The proxy alone is biased wherever it disagrees with the judge; the n verdicts alone are unbiased but wide. PPI
(Angelopoulos, Bates, Fannjiang, Jordan and Zrnic, "Prediction-powered inference", Science 382, 2023) corrects the
proxy's mean by the mean rectifier ``Y − f`` on the judged answers. In the paper's setting the judged answers are the
labelled set and the N − n others the unlabelled one:

    θ̂ = λ·mean_unjudged(f) + mean_judged(Y − λ·f)
    var(θ̂) = λ²·var(f)/(N − n) + var_judged(Y − λ·f)/n,       interval: θ̂ ± z(1 − α/2)·√var(θ̂)

``λ = 1`` is PPI as first published; ``λ = 0`` is the classical estimate from the judged answers alone. By default λ
is power-tuned as in PPI++ (Angelopoulos, Duchi and Zrnic 2023, arXiv:2311.01453; ``ppi_py``'s mean estimator):
cov(Y, f)/((1 + n/(N − n))·var(f)), clipped to [0, 1], so a proxy that says nothing about the judge costs nothing
and the interval is, asymptotically, never wider than the classical one. (The form "proxy mean over all N answers
plus the mean rectifier" is the same estimator at λ·(N − n)/N.) var(f) is taken over all N answers, which are draws
from one population; sample variances are unbiased (n − 1). The target is the reader's mean verdict on questions
drawn like these, as the bootstrap intervals of ``lcrag route eval`` are; the point estimate and interval are
clipped to the scores' range [0, 1], which keeps the coverage. When every answer is judged (n = N) PPI is the
classical estimate. When every judged verdict agrees (no spread in the sample) the variance is Agresti and Coull's
for a proportion instead of 0 (:func:`_spread`).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from lcrag.core.errors import InputError

BOUNDS = (0.0, 1.0)  # every score lcrag reports (a metric, a judge's verdict) is in [0, 1]


@dataclass(frozen=True)
class Interval:
    """A point estimate and its two-sided confidence interval (clipped to :data:`BOUNDS`)."""

    estimate: float
    low: float
    high: float
    half: float  # z·standard error: the half-width before clipping, to compare two intervals by

    @property
    def width(self) -> float:
        return self.high - self.low


@dataclass(frozen=True)
class Estimate:
    """One reader's (or policy's) quality three ways: the proxy alone, the judged sample alone, and PPI."""

    proxy: float  # the proxy's mean over all N answers (no interval: its bias is what PPI corrects)
    classical: Interval  # the judged answers alone
    ppi: Interval
    judged: int  # n
    total: int  # N
    lam: float  # the λ used


def sample(count: int, size: int, seed: int | str = 0) -> list[int]:
    """``size`` of the indices ``0 .. count − 1`` drawn uniformly without replacement (all of them when ``size`` ≥
    ``count``), in increasing order; the same ``seed`` (an int or a string) gives the same draw."""
    if size < 1:
        raise InputError(f"the judged sample must hold at least 1 answer, not {size}")
    return sorted(random.Random(seed).sample(range(count), min(size, count)))


def estimate(proxy: Sequence[float], verdicts: Mapping[int, float], alpha: float = 0.05,
             lam: float | None = None) -> Estimate:
    """The mean verdict over answers whose proxy scores are ``proxy``, from the verdicts of a uniform sample of them
    (``verdicts``: index into ``proxy`` -> the judge's score); ``lam=None`` tunes λ (PPI++), ``lam=1`` is plain PPI."""
    if len(verdicts) < 2:
        raise InputError(f"a judged interval needs at least 2 judged answers, got {len(verdicts)}")
    if not 0 < alpha < 1:
        raise InputError(f"alpha must be in (0, 1), not {alpha}")
    f = np.asarray(proxy, dtype=float)
    index = np.fromiter(verdicts.keys(), dtype=int, count=len(verdicts))
    if index.min() < 0 or index.max() >= len(f):
        raise InputError(f"a judged index is outside the {len(f)} answers")
    y = np.fromiter(verdicts.values(), dtype=float, count=len(verdicts))
    unjudged = np.ones(len(f), dtype=bool)
    unjudged[index] = False
    n, m = len(index), int(unjudged.sum())
    z = NormalDist().inv_cdf(1 - alpha / 2)
    classical = _interval(float(y.mean()), _spread(y, y, z) / n, z)
    lam = 0.0 if m == 0 else tuned_lambda(y, f[index], f) if lam is None else float(lam)
    rectifier = y - lam * f[index]
    imputed = lam * float(f[unjudged].mean()) if m else 0.0
    variance = _spread(rectifier, y, z) / n + (lam ** 2 * float(f.var(ddof=1)) / m if m else 0.0)
    return Estimate(float(f.mean()), classical, _interval(imputed + float(rectifier.mean()), variance, z), n,
                    len(f), lam)


def tuned_lambda(y: np.ndarray, f_judged: np.ndarray, f_all: np.ndarray) -> float:
    """PPI++'s power-tuning λ for a mean: cov(Y, f) on the judged answers over (1 + n/(N − n))·var(f) on all N,
    clipped to [0, 1] (0 when the proxy does not vary or every answer is judged)."""
    n, unjudged = len(y), len(f_all) - len(y)
    spread = float(f_all.var(ddof=1))
    if unjudged <= 0 or spread == 0.0 or n < 2:
        return 0.0
    covariance = float(np.cov(y, f_judged, ddof=1)[0, 1])
    return float(np.clip(covariance / spread * unjudged / (unjudged + n), 0.0, 1.0))


def _spread(values: np.ndarray, verdicts: np.ndarray, z: float) -> float:
    """The sample variance of ``values``; where it is 0 (every judged verdict agrees, as 20 of 20 "True" do) the
    sample says nothing of the spread, and a zero-width interval would claim certainty: then Agresti and Coull's
    variance for a proportion, the verdicts' mean shrunk by z²/2 passes and z²/2 failures (an interval about as wide
    as Wilson's: 20 of 20 gives [0.88, 1] at 95%)."""
    spread = float(values.var(ddof=1))
    if spread > 0.0:
        return spread
    shrunk = (float(verdicts.sum()) + z * z / 2) / (len(verdicts) + z * z)
    return shrunk * (1 - shrunk)


def _interval(mean: float, variance: float, z: float) -> Interval:
    half = z * max(variance, 0.0) ** 0.5
    low, high = BOUNDS
    return Interval(min(max(mean, low), high), min(max(mean - half, low), high), max(min(mean + half, high), low),
                    half)


__all__ = ["BOUNDS", "Estimate", "Interval", "estimate", "sample", "tuned_lambda"]
