"""Cor. 3.2 (solution-probability drift) and the published counterexample.

Claim: for equally rewarded solutions ``a``, ``b`` an update with coefficients
``kappa`` changes the log-odds by ``eta c(x) (kappa_a - kappa_b)``.

With a softmax over shared logits ``z`` (``p = softmax(z)``) the update of
``sum_k kappa_k log p_k`` is ``g = sum_k kappa_k (e_k - p)``, and since
``log p_a - log p_b = z_a - z_b`` the log-odds change *exactly* (all orders) by

    eta (g_a - g_b) = eta [(kappa_a - kappa_b) - (p_a - p_b) sum_k kappa_k].

So the corollary holds, with ``c = 1``, exactly when ``p_a = p_b`` or
``sum_k kappa_k = 0`` (the update's coefficients on the context cancel), and always in
a direct (tabular) parametrisation where each solution's log-probability is its own
parameter. The critique's example ``p = (.6, .3, .1)``, ``kappa = (1/2, 1/2, 0)`` gives
``-0.3 eta`` although ``kappa_a = kappa_b``.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

__all__ = ["Cor32Result", "cor32", "cor32_numeric"]


@dataclass(frozen=True)
class Cor32Result:
    """Fields: ``drift``: the exact log-odds change ``eta (g_a - g_b)`` for symbolic
    ``p``, ``kappa`` (V = 3, a = 1, b = 2); ``claim``: ``eta (kappa_a - kappa_b)``;
    ``gap``: ``drift - claim`` (factored: ``-eta (p_a - p_b) sum kappa``);
    ``holds_iff``: the factors of ``gap`` that must vanish; ``counterexample``: the
    drift at ``p = (3/5, 3/10, 1/10)``, ``kappa = (1/2, 1/2, 0)`` (``-3/10 eta``);
    ``tabular_drift``: the change when ``l_k = theta_k`` directly (equals ``claim``)."""

    drift: sp.Expr
    claim: sp.Expr
    gap: sp.Expr
    holds_iff: tuple[sp.Expr, ...]
    counterexample: sp.Expr
    tabular_drift: sp.Expr


def cor32() -> Cor32Result:
    V = 3
    z = sp.symbols("z_1:4", real=True)
    kap = sp.symbols("kappa_1:4", real=True)
    eta = sp.Symbol("eta", positive=True)
    p = sp.symbols("p_1:4", positive=True)
    # The update direction is the logit gradient of sum_k kappa_k log softmax(z)_k.
    logp = [zk - sp.log(sp.Add(*[sp.exp(zj) for zj in z])) for zk in z]
    objective = sp.Add(*[kk * lk for kk, lk in zip(kap, logp)])
    S = sp.Symbol("S", positive=True)  # the partition function sum_j exp(z_j)
    to_p = {sp.exp(zk): pk * S for zk, pk in zip(z, p)}
    g = [sp.cancel(sp.diff(objective, zk).xreplace({sp.Add(*[sp.exp(zj) for zj in z]): S}).xreplace(to_p))
         for zk in z]
    # log p_a - log p_b = z_a - z_b, linear in z: the step z + eta g changes it by eta (g_a - g_b).
    new_odds = sp.expand((logp[0] - logp[1]).subs({zk: zk + eta * gk for zk, gk in zip(z, g)}))
    drift = sp.simplify(new_odds - sp.expand(logp[0] - logp[1]))
    drift = sp.expand(drift.subs(p[2], 1 - p[0] - p[1]))
    claim = eta * (kap[0] - kap[1])
    gap = sp.factor(sp.expand(drift - claim))
    factors = tuple(f for f in sp.Mul.make_args(gap) if not f.is_number and f != eta)
    example = {p[0]: sp.Rational(3, 5), p[1]: sp.Rational(3, 10), kap[0]: sp.Rational(1, 2),
               kap[1]: sp.Rational(1, 2), kap[2]: 0}
    theta = sp.symbols("theta_1:4", real=True)
    tab_obj = sp.Add(*[kk * tk for kk, tk in zip(kap, theta)])
    tab_step = {tk: tk + eta * sp.diff(tab_obj, tk) for tk in theta}
    tabular = sp.expand((theta[0] - theta[1]).subs(tab_step) - (theta[0] - theta[1]))
    return Cor32Result(drift, claim, gap, factors, sp.simplify(drift.subs(example)), tabular)


def cor32_numeric(p=(0.6, 0.3, 0.1), kappa=(0.5, 0.5, 0.0), etas=(1.0, 0.1, 1e-3)) -> list[tuple[float, float]]:
    """Finite steps with torch autograd: ``(eta, log-odds change / eta)`` at ``p``.

    The update is the autograd gradient of ``sum_k kappa_k log softmax(z)_k`` in ``z``.
    """
    import torch

    z = torch.log(torch.tensor(p, dtype=torch.float64)).requires_grad_(True)
    kap = torch.tensor(kappa, dtype=torch.float64)
    (grad,) = torch.autograd.grad((kap * torch.log_softmax(z, 0)).sum(), z)
    out = []
    for eta in etas:
        before = torch.log_softmax(z.detach(), 0)
        after = torch.log_softmax(z.detach() + eta * grad, 0)
        change = float((after[0] - after[1]) - (before[0] - before[1]))
        out.append((eta, change / eta))
    return out
