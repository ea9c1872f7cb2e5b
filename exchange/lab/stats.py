"""Paired statistics for the experiments: bootstrap CIs and the verdict rule.

Both arms of a seed share the warm-started weights, the prompt stream and the first
rollout, so each seed gives one paired difference ``d_s`` oriented so that the
paper's prediction means ``d > 0``. The mean of ``d`` gets a percentile bootstrap CI
(``scipy.stats.bootstrap``); with 5 seeds a percentile CI is on the narrow side,
which is why the seed count in the predicted direction is reported beside it.

Verdict: ``confirmed`` when the CI lies above 0, ``refuted`` when it lies below 0,
``inconclusive`` otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from exchange.errors import InvalidArgument

__all__ = ["PairedEffect", "paired_effect", "verdict"]


@dataclass(frozen=True)
class PairedEffect:
    """Mean paired difference (prediction => positive) with its bootstrap CI."""

    mean: float
    low: float
    high: float
    n: int
    n_positive: int
    """Seeds whose difference has the predicted sign (> 0)."""
    confidence: float

    @property
    def verdict(self) -> str:
        return verdict(self.low, self.high)


def verdict(low: float, high: float) -> str:
    """``confirmed`` (CI above 0), ``refuted`` (CI below 0) or ``inconclusive``."""
    if low > 0:
        return "confirmed"
    if high < 0:
        return "refuted"
    return "inconclusive"


def paired_effect(diffs, *, n_resamples: int = 9999, confidence: float = 0.95, seed: int = 0) -> PairedEffect:
    """Bootstrap CI of ``mean(diffs)``; ``diffs: [S]``, one value per seed, finite."""
    from scipy.stats import bootstrap

    d = np.asarray(diffs, dtype=np.float64)
    if d.ndim != 1 or d.size < 2:
        raise InvalidArgument(f"diffs shape={list(d.shape)}: need one difference per seed and >= 2 seeds.")
    if not np.isfinite(d).all():
        raise InvalidArgument(f"diffs={d.tolist()} has a non-finite value; a run is missing a metric.")
    mean = float(d.mean())
    if np.ptp(d) == 0:  # every seed agrees exactly: the bootstrap distribution is a point
        low = high = mean
    else:
        res = bootstrap((d,), np.mean, n_resamples=n_resamples, confidence_level=confidence,
                        method="percentile", rng=np.random.default_rng(seed))
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return PairedEffect(mean, low, high, int(d.size), int((d > 0).sum()), confidence)
