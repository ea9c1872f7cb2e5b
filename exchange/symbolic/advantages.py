"""Advantage forms ``A_i = centred_i / scale`` (mirror of objectives/_common.py)."""

from __future__ import annotations

import sympy as sp

from exchange.symbolic.group import SymbolicGroup
from exchange.symbolic.spec import AdvantageForm

__all__ = ["group_advantages", "rloo_advantages", "batch_whitened_advantages", "gpg_advantages",
           "baseline_advantages"]

SIGMA = sp.Symbol("sigma", positive=True)
SIGMA_B = sp.Symbol("sigma_B", positive=True)


def _mean(xs) -> sp.Expr:
    return sp.Add(*xs) / len(xs)


def group_advantages(g: SymbolicGroup, scale: str = "group", eps: float = 1e-4) -> AdvantageForm:
    """GRPO: ``(R_i - mean R) / (std R + eps)``, Bessel-corrected std; ``scale="none"``: no std."""
    mean = _mean(g.R)
    centred = tuple(R - mean for R in g.R)
    if scale == "none":
        return AdvantageForm(centred, sp.Integer(1), sp.Integer(1), "R_i - mean(R)")
    std = sp.sqrt(sp.Add(*[c**2 for c in centred]) / (g.G - 1))
    return AdvantageForm(centred, SIGMA, std + sp.Float(eps, 30),
                         f"(R_i - mean(R)) / sigma, sigma = std(R) + {eps:g} (Bessel)")


def rloo_advantages(g: SymbolicGroup) -> AdvantageForm:
    """Leave-one-out: ``R_i - mean_{j != i} R_j = G/(G-1) (R_i - mean R)``."""
    centred = tuple(R - sp.Add(*[Rj for Rj in g.R if Rj is not R]) / (g.G - 1) for R in g.R)
    return AdvantageForm(centred, sp.Integer(1), sp.Integer(1), "R_i - mean_{j != i} R_j")


def batch_whitened_advantages(g: SymbolicGroup, eps: float = 1e-8) -> AdvantageForm:
    """REINFORCE++: ``(R_i - mu) / sqrt(var + eps)`` with token-weighted batch statistics.

    ``mu = sum_j L_j R_j / sum_j L_j``; the batch here is the one group (so the
    shared-event result is a lower bound on what several groups do: their means differ).
    """
    n_tok = sp.Add(*g.L)
    mu = sp.Add(*[L * R for L, R in zip(g.L, g.R)]) / n_tok
    centred = tuple(R - mu for R in g.R)
    var = sp.Add(*[L * (R - mu) ** 2 for L, R in zip(g.L, g.R)]) / (n_tok - 1)
    return AdvantageForm(centred, SIGMA_B, sp.sqrt(var + sp.Float(eps, 30)),
                         "(R_i - mu_tok) / sigma_B, token-weighted batch mean and std")


ALPHA_INV = sp.Symbol("alpha_inv", positive=True)


def gpg_advantages(g: SymbolicGroup) -> AdvantageForm:
    """GPG: ``alpha (R_i - mean R)``, ``alpha = B / max(1, #nonzero rewards)`` (a positive
    batch constant; here the batch is the group, ``B = G``)."""
    mean = _mean(g.R)
    nonzero = sp.Add(*[sp.Piecewise((0, sp.Eq(R, 0)), (1, True)) for R in g.R])
    return AdvantageForm(tuple(R - mean for R in g.R), ALPHA_INV, sp.Max(1, nonzero) / g.G,
                         "alpha (R_i - mean(R)), alpha = 1/alpha_inv = G / max(1, #nonzero R)")


def baseline_advantages(g: SymbolicGroup, baseline: float) -> AdvantageForm:
    """ReMax: ``R_i - b`` with the greedy response's reward ``b`` (the ``baseline`` value)."""
    b = sp.nsimplify(baseline)
    return AdvantageForm(tuple(R - b for R in g.R), sp.Integer(1), sp.Integer(1),
                         f"R_i - b, b = {baseline:g} (greedy-response reward; not zero-sum)")
