"""Paired statistics that can say "no effect": t-interval, sign test, Holm, equivalence.

Both arms of a seed share the warm-started weights, the prompt stream and the first
rollout, so each seed gives one paired difference ``d_s`` oriented so that the
paper's prediction means ``d > 0``. For the mean of ``d``:

- a two-sided paired **t-interval** and t-test p-value;
- an exact two-sided **sign test** (robustness check: it assumes no normality);
- a **TOST equivalence test** against a stated smallest effect of interest
  ``sesoi > 0``: is ``|mean d| < sesoi``?
- the **minimum detectable effect** of the design (two-sided level ``alpha``, power
  ``power``): ``(t_{1-alpha/2} + t_{power}) * sd / sqrt(n)``.

Within one pair the predictions are tested together, so the p-values (difference and
equivalence) are **Holm**-corrected across them (:func:`holm`, :func:`decide`).

Three outcomes (:func:`decide`):

- ``confirmed``: the Holm-adjusted t-test rejects 0 and the mean is > 0 (the
  ``1 - alpha`` interval excludes 0 on the predicted side);
- ``refuted``: the adjusted t-test rejects 0 with the mean < 0 (interval excludes 0 on
  the opposite side), or the adjusted equivalence test shows ``|effect| < sesoi``;
- ``inconclusive``: neither; the minimum detectable effect is reported with it, or,
  when every difference is exactly 0 (a statistic that did not move, e.g. accuracy at
  its ceiling in both arms), the row says it is uninformative instead of printing an
  MDE of 0.

An interval that contains 0 is never read as "refuted" by itself: only the
equivalence route (which needs a stated ``sesoi`` and enough seeds) can refute a
prediction whose interval covers 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from exchange.errors import InvalidArgument

__all__ = ["PairedEffect", "paired_effect", "holm", "decide", "VERDICTS"]

VERDICTS = ("confirmed", "refuted", "inconclusive")


@dataclass(frozen=True)
class PairedEffect:
    """Mean paired difference (prediction => positive) and its tests."""

    mean: float
    low: float
    high: float
    """``1 - alpha`` paired t-interval of the mean."""
    n: int
    n_positive: int
    """Seeds whose difference has the predicted sign (> 0)."""
    confidence: float
    sd: float
    p_t: float
    """Two-sided paired t-test p-value (H0: mean 0)."""
    p_sign: float
    """Exact two-sided sign test p-value (zeros dropped)."""
    sesoi: float | None
    p_equiv: float | None
    """TOST p-value (H0: |mean| >= sesoi); None without a sesoi."""
    mde: float
    """Smallest |mean| this design detects with the stated power (two-sided alpha)."""
    p_t_adj: float | None = None
    p_equiv_adj: float | None = None
    verdict: str = "inconclusive"
    reason: str = ""


def paired_effect(diffs, *, sesoi: float | None = None, alpha: float = 0.05, power: float = 0.8) -> PairedEffect:
    """Paired statistics of ``diffs: [S]`` (one finite value per seed, S >= 2).

    The verdict of the returned object is the uncorrected one (a single test);
    :func:`decide` applies Holm across several predictions.
    """
    from scipy import stats

    d = np.asarray(diffs, dtype=np.float64)
    if d.ndim != 1 or d.size < 2:
        raise InvalidArgument(f"diffs shape={list(d.shape)}: need one difference per seed and >= 2 seeds.")
    if not np.isfinite(d).all():
        raise InvalidArgument(f"diffs={d.tolist()} has a non-finite value; a run is missing a metric.")
    if sesoi is not None and not sesoi > 0:
        raise InvalidArgument(f"sesoi={sesoi} must be > 0 (the smallest effect of interest, in the statistic's units).")
    n = int(d.size)
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    df = n - 1
    tq = float(stats.t.ppf(1 - alpha / 2, df))
    if se == 0:  # every seed agrees exactly
        low = high = mean
        p_t = 0.0 if mean != 0 else 1.0
        # all differences exactly 0: the statistic did not move (e.g. accuracy at its
        # ceiling in both arms); that is no evidence of equivalence, so no TOST
        p_equiv = None if sesoi is None or mean == 0 else (0.0 if abs(mean) < sesoi else 1.0)
    else:
        low, high = mean - tq * se, mean + tq * se
        p_t = float(2 * stats.t.sf(abs(mean) / se, df))
        p_equiv = None
        if sesoi is not None:  # two one-sided tests
            p_lo = float(stats.t.sf((mean + sesoi) / se, df))
            p_hi = float(stats.t.cdf((mean - sesoi) / se, df))
            p_equiv = max(p_lo, p_hi)
    nz = d[d != 0]
    k = int((nz > 0).sum())
    p_sign = float(stats.binomtest(k, int(nz.size), 0.5).pvalue) if nz.size else 1.0
    mde = (tq + float(stats.t.ppf(power, df))) * se
    eff = PairedEffect(mean, low, high, n, int((d > 0).sum()), 1 - alpha, sd, p_t, p_sign, sesoi, p_equiv, mde)
    return decide([eff], alpha=alpha)[0]


def holm(pvalues: list[float]) -> list[float]:
    """Holm step-down adjusted p-values (same order as given)."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adj = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adj[i] = running
    return adj


def decide(effects: list[PairedEffect], *, alpha: float = 0.05) -> list[PairedEffect]:
    """Verdicts for the predictions of one pair, Holm-corrected across them.

    The family is every t-test and every equivalence test of ``effects``.
    """
    ps = [e.p_t for e in effects] + [e.p_equiv for e in effects if e.p_equiv is not None]
    adj = holm(ps)
    out, j = [], len(effects)
    for i, e in enumerate(effects):
        pt = adj[i]
        pe = None
        if e.p_equiv is not None:
            pe, j = adj[j], j + 1
        if pt < alpha and e.mean > 0 and e.low > 0:
            verdict, reason = "confirmed", f"interval excludes 0 on the predicted side (Holm p={pt:.3g})"
            if e.sesoi is not None and e.high < e.sesoi:
                reason += f"; the whole interval lies below the SESOI {e.sesoi:.3g}: real but smaller than stated"
        elif pt < alpha and e.mean < 0 and e.high < 0:
            verdict, reason = "refuted", f"interval excludes 0 on the opposite side (Holm p={pt:.3g})"
        elif pe is not None and pe < alpha:
            verdict, reason = "refuted", f"equivalent to 0: |effect| < sesoi={e.sesoi:.3g} (TOST Holm p={pe:.3g})"
        elif e.sd == 0 and e.mean == 0:
            # every seed's difference is exactly 0: the statistic did not move in either
            # arm (e.g. accuracy at its ceiling). That is neither an effect nor evidence of
            # equivalence, and an MDE of 0 would claim a power the design does not have.
            verdict = "inconclusive"
            reason = ("uninformative: the difference is exactly 0 in every seed (the statistic did not move, "
                      "e.g. a ceiling); no minimum detectable effect")
        else:
            verdict = "inconclusive"
            reason = f"no decision at Holm level {alpha}; minimum detectable effect {e.mde:.3g}"
        out.append(replace(e, p_t_adj=pt, p_equiv_adj=pe, verdict=verdict, reason=reason))
    return out
