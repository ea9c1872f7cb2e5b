"""Compare an objective's expected event coefficients with the exact credit.

Numbers (all dimensionless, so objectives of different scale compare):
- ``shared_drift``: the raw ``E[K_e]`` of largest size over ``shared`` and ``null``
  events (THEORY.md (D): must be 0), divided by ``max_e |E[K~_e]|``.
- ``zero_drift``: the centred ``E[K~_e]`` of largest size over zero-credit events,
  divided by ``max_e |E[K~_e]|``: the bias that moves reward-irrelevant distributions.
- ``corr``: Pearson correlation of ``E[K~_e]`` with the exact policy-gradient weight
  ``d(c) pi(y | c) (Q - V)`` over events with ``pi < 1``.
- ``tax``: the share of the centred update mass ``sum_e E[K~_e^2]`` that lands on
  zero-credit events (prompt-weighted): the learning tax in expectation (P1).
- quadrant shares of ``E[sum |kappa|]`` and of the true credit mass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from exchange.oracle.closed_form import grpo_expected_shared_drift
from exchange.oracle.exact import ExactCredit
from exchange.oracle.expectation import ExpectedCoefficients

__all__ = ["CreditSummary", "summarize", "T3Check", "t3_check", "zero_credit_mask"]


def zero_credit_mask(table: ExactCredit) -> np.ndarray:
    """``bool[E]``: events of kind shared, null or zero."""
    return table.kind_mask("shared", "null", "zero")


@dataclass(frozen=True)
class CreditSummary:
    objective: str
    g: int
    method: str
    shared_drift: float
    shared_drift_ci: float
    zero_drift: float
    zero_drift_ci: float
    corr: float
    tax: float
    quadrant_share: np.ndarray
    quadrant_zero_share: np.ndarray
    quadrant_credit_share: np.ndarray


def _largest(values: np.ndarray, se: np.ndarray, mask: np.ndarray, scale: float) -> tuple[float, float]:
    if not mask.any():
        return 0.0, 0.0
    idx = np.nonzero(mask)[0]
    j = idx[np.argmax(np.abs(values[idx]))]
    return float(values[j] / scale), float(1.96 * se[j] / scale)


def summarize(ec: ExpectedCoefficients) -> CreditSummary:
    t = ec.table
    w = np.asarray(t.env.prompt_weights)[t.prompt]
    scale = float(np.abs(ec.centred).max()) or 1.0
    zero = zero_credit_mask(t)
    shared_drift, shared_ci = _largest(ec.mean, ec.mean_se, t.kind_mask("shared", "null"), scale)
    zero_drift, zero_ci = _largest(ec.centred, ec.centred_se, zero & (t.pi < 1.0), scale)
    ref = t.visit * t.credit
    free = t.pi < 1.0
    corr = float(np.corrcoef(ec.centred[free], ref[free])[0, 1]) if free.sum() > 1 and ref[free].std() > 0 else float("nan")
    mass = (w * ec.centred_second).sum()
    tax = float((w * ec.centred_second)[zero].sum() / mass) if mass > 0 else 0.0
    qm = ec.quadrant_mass
    total = qm.sum() or 1.0
    return CreditSummary(
        objective=ec.objective, g=ec.g, method=ec.method, shared_drift=shared_drift, shared_drift_ci=shared_ci,
        zero_drift=zero_drift, zero_drift_ci=zero_ci, corr=corr, tax=tax,
        quadrant_share=qm / total,
        quadrant_zero_share=np.divide(ec.quadrant_zero_mass, qm, out=np.zeros(4), where=qm > 0),
        quadrant_credit_share=ec.quadrant_credit / (ec.quadrant_credit.sum() or 1.0),
    )


@dataclass(frozen=True)
class T3Check:
    """Measured vs closed-form GRPO drift on each shared/null event (``[S]`` arrays)."""

    events: np.ndarray
    measured: np.ndarray
    predicted: np.ndarray
    ci: np.ndarray
    scale: float
    """``max_e |E[K_e]|`` over all events: the size round-off is measured against."""

    @property
    def max_error(self) -> float:
        return float(np.abs(self.measured - self.predicted).max()) if len(self.events) else 0.0

    def matches(self, rtol: float = 1e-9) -> bool:
        """Every event within ``rtol * scale`` plus 4 standard errors (Monte Carlo)."""
        tol = rtol * max(self.scale, float(np.abs(self.predicted).max(initial=0.0))) + 4 * self.ci / 1.96
        return bool(np.all(np.abs(self.measured - self.predicted) <= tol))


def t3_check(ec: ExpectedCoefficients, eps: float = 1e-4) -> T3Check:
    """T3 closed form ``E[K_e] = P(e) E[1/G sum_i A_i / L_i]`` on shared and null events
    (valid for GRPO's default on-policy loss: ``kappa_i = A_i / (G L_i)``)."""
    t = ec.table
    idx = np.nonzero(t.kind_mask("shared", "null"))[0]
    drift = {r.prompt: grpo_expected_shared_drift(r, ec.g, eps) for r in t.responses}
    predicted = np.array([t.visit[e] * drift[int(t.prompt[e])] for e in idx])
    return T3Check(events=idx, measured=ec.mean[idx], predicted=predicted, ci=1.96 * ec.mean_se[idx],
                   scale=float(np.abs(ec.mean).max()))
