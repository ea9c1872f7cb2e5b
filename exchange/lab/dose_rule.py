"""Issue 42's dose rule: a P2 decision requires the effect to follow the dose.

A dose arm keeps a fraction ``f`` of the shared residual (:mod:`exchange.lab.dose`;
``f = 0`` is the surgical arm, ``f = 1`` the baseline). First order predicts that the
probe's drift against the surgical arm scales with ``f``:

    d_f = (arm_f - surgical)  ~=  f * d_1,      d_1 = baseline - surgical,

per seed, on common rollouts. The rule (:func:`decide_dose`) tests that on **each dose's
own paired interval**: ``r_{f,s} = d_{f,s} - f * d_{1,s}`` (a paired difference per seed,
so the full arm's noise is shared), and

- the dose **follows** first order when r's interval lies inside ``±SESOI``;
- it **departs** when r's interval lies wholly outside ``±SESOI``;
- otherwise it is **inconclusive** at this dose.

The design follows the dose only when every dose follows. As an alternative
(the issue's "or"), :func:`intercept_fit` fits ``d = a + b * f * mean(d_1)`` over the
doses' and the full arm's seeds; it supports first order when ``a``'s interval lies
within ``±SESOI`` and ``b``'s contains 1. :attr:`DoseDecision.first_order`
is the conjunction of the per-dose rule or the fit.

Why not the old fit through the origin (:func:`exchange.lab.verdict.decide_dose_response`):
there the ``f = 1`` dose dominates the slope, and on the private-row numbers (Adam, 1% of
the residual gave 53-60% of the effect) it reads "compatible" while the 1% dose gives 66x
its prediction. The per-dose residual cannot hide a dose behind another.

``SESOI`` is half the lower end of ``delta_hat``'s bracket
(:attr:`exchange.lab.verdict.Pilot.magnitude`), the same as the P2 row's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from exchange.errors import InvalidArgument
from exchange.lab.verdict import interval

__all__ = ["DOSE_FOLLOWS", "DoseDecision", "DoseRow", "decide_dose", "intercept_fit"]

DOSE_FOLLOWS, DOSE_DEPARTS, DOSE_INCONCLUSIVE = "follows first order", "departs from first order", "inconclusive"


@dataclass(frozen=True)
class DoseRow:
    """One dose ``keep``: the mean of ``d_f`` and of the residual ``r = d_f - f d_1`` with
    its interval, the share ``mean(d_f) / mean(d_1)`` and the verdict."""

    keep: float
    effect: float
    """mean over seeds of d_f = arm_f - surgical (oriented)"""
    share: float
    """effect / mean(d_1): first order says ``keep``"""
    residual: float
    low: float
    high: float
    n: int
    verdict: str


@dataclass(frozen=True)
class DoseDecision:
    key: str
    full: float
    """mean of d_1 = baseline - surgical"""
    sesoi: float
    rows: tuple[DoseRow, ...]
    fit: dict
    """:func:`intercept_fit`'s result"""

    @property
    def per_dose(self) -> bool:
        return all(r.verdict == DOSE_FOLLOWS for r in self.rows)

    @property
    def first_order(self) -> bool:
        """The effect follows the dose: every dose's own interval, or the intercept fit."""
        return self.per_dose or bool(self.fit.get("supports"))

    @property
    def label(self) -> str:
        if self.first_order:
            return "follows the dose (first order)"
        if any(r.verdict == DOSE_DEPARTS for r in self.rows):
            bad = ", ".join(f"{r.keep:g}" for r in self.rows if r.verdict == DOSE_DEPARTS)
            return f"does not follow the dose (keep {bad}: outside ±SESOI of keep x the full effect)"
        return "inconclusive (no dose departs, not every dose follows)"

    def to_dict(self) -> dict:
        return {"key": self.key, "full": self.full, "sesoi": self.sesoi, "label": self.label,
                "first_order": self.first_order, "fit": self.fit,
                "rows": [r.__dict__ for r in self.rows]}


def _t(q: float, df: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(q, df))


def _check(keeps, d_dose, d_full, sesoi) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    k = np.asarray(keeps, dtype=np.float64)
    d = np.asarray(d_dose, dtype=np.float64)
    d1 = np.asarray(d_full, dtype=np.float64)
    if d1.ndim != 1 or d1.size < 2:
        raise InvalidArgument(f"d_full shape={list(d1.shape)}: one baseline-minus-surgical difference per seed, >= 2.")
    if d.shape != (k.size, d1.size) or k.size < 1:
        raise InvalidArgument(f"d_dose shape={list(d.shape)} with {k.size} doses and {d1.size} seeds: need [doses, seeds].")
    if np.any((k <= 0) | (k >= 1)):
        raise InvalidArgument(f"keeps={k.tolist()}: each dose keeps 0 < f < 1 (0 is the surgical arm, 1 the baseline).")
    if not (np.isfinite(d).all() and np.isfinite(d1).all()):
        raise InvalidArgument("a dose rule needs finite differences; a run is missing a metric.")
    if not sesoi > 0:
        raise InvalidArgument(f"sesoi={sesoi} must be > 0 (half the lower end of delta_hat's bracket).")
    return k, d, d1


def intercept_fit(keeps, d_dose, d_full, sesoi: float, *, alpha: float = 0.05) -> dict:
    """Least squares ``d_{f,s} = a + b * f * m`` with ``m = mean_s d_{1,s}``, over the
    doses ``0 < f < 1`` and the full arm (``f = 1``, its own ``d_{1,s}``), seeds pooled.
    First order says ``a = 0`` and ``b = 1``; ``supports`` when ``a``'s interval lies
    inside ``±sesoi`` and ``b``'s contains 1. (The surgical arm, ``f = 0``, is 0 by
    definition of ``d``, so it is no data point.)"""
    k, d, d1 = _check(keeps, d_dose, d_full, sesoi)
    m = float(d1.mean())
    if m == 0:
        return {"supports": False, "reason": "the full arm's mean effect is 0: no slope to compare"}
    f = np.concatenate([np.repeat(k, d1.size), np.ones(d1.size)])
    y = np.concatenate([d.ravel(), d1])
    X = np.stack([np.ones_like(f), f * m], 1)
    df = y.size - 2
    beta, *_ = np.linalg.lstsq(X, y, rcond=None)
    resid = y - X @ beta
    cov = float(resid @ resid) / df * np.linalg.inv(X.T @ X)
    t = _t(1 - alpha / 2, df)
    a, b = float(beta[0]), float(beta[1])
    ha, hb = t * math.sqrt(cov[0, 0]), t * math.sqrt(cov[1, 1])
    supports = -sesoi < a - ha and a + ha < sesoi and b - hb <= 1 <= b + hb
    return {"intercept": a, "intercept_low": a - ha, "intercept_high": a + ha, "slope": b,
            "slope_low": b - hb, "slope_high": b + hb, "supports": bool(supports)}


def decide_dose(key: str, keeps, d_dose, d_full, sesoi: float, *, alpha: float = 0.05) -> DoseDecision:
    """The rule of the module docstring. ``keeps: [D]`` in (0, 1); ``d_dose: [D, S]`` the
    oriented ``arm_f - surgical`` per seed; ``d_full: [S]`` the oriented
    ``baseline - surgical`` on the same seeds; ``sesoi > 0``."""
    k, d, d1 = _check(keeps, d_dose, d_full, sesoi)
    full = float(d1.mean())
    rows = []
    for f, df in zip(k, d):
        mean, low, high, _, n = interval(df - f * d1, alpha=alpha)
        if -sesoi < low and high < sesoi:
            v = DOSE_FOLLOWS
        elif low >= sesoi or high <= -sesoi:
            v = DOSE_DEPARTS
        else:
            v = DOSE_INCONCLUSIVE
        rows.append(DoseRow(float(f), float(df.mean()), float(df.mean()) / full if full else float("nan"),
                            mean, low, high, n, v))
    return DoseDecision(key, full, float(sesoi), tuple(rows), intercept_fit(k, d, d1, sesoi, alpha=alpha))
