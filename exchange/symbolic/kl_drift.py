"""Prop. 3.1 (learning tax): ``KL = 1/2 eta^2 g^T F g + O(eta^3)`` for a softmax policy.

Setting: one context with a softmax over ``V`` tokens, logits ``z`` (probabilities
``p = softmax(z)``), and a step ``z -> z + eta g`` along a logit-space direction ``g``.
For a model with parameters ``theta`` the same holds with ``g = J g_theta`` to first
order (``F_theta = J^T F J``). ``F = diag(p) - p p^T`` is the Fisher information of the
softmax in its logits.

The series is done by sympy in the moments ``m_n = sum_k p_k g_k^n`` (fast, any ``V``),
then checked against ``1/2 g^T F g`` with ``p``, ``g`` symbolic for a given ``V``
(``sum p = 1`` substituted); the numeric check takes finite steps in 50-digit arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

__all__ = ["Prop31Result", "prop31", "prop31_numeric"]


@dataclass(frozen=True)
class Prop31Result:
    """Fields: ``V``; ``series_forward`` / ``series_reverse``: KL(p||p') and KL(p'||p)
    through ``eta^3``, in the moments ``m_n = E_p[g^n]``; ``quadratic``: ``1/2 g^T F g``; ``matches_forward`` /
    ``matches_reverse``: the ``eta^0, eta^1`` coefficients vanish and the ``eta^2`` one
    equals ``quadratic``; ``cubic_forward``: the ``eta^3`` coefficient of KL(p||p'),
    returned as ``E_p[(g - E_p g)^3] / 6`` when sympy confirms that identity (non-zero in
    general: the remainder is genuinely ``O(eta^3)``); ``fisher_null``: basis of ``{g : g^T F g = 0}``
    (the constant vectors: the KL is > 0 exactly when ``g`` is not constant)."""

    V: int
    series_forward: sp.Expr
    series_reverse: sp.Expr
    quadratic: sp.Expr
    matches_forward: bool
    matches_reverse: bool
    cubic_forward: sp.Expr
    fisher_null: tuple[sp.Matrix, ...]


def prop31(V: int = 3) -> Prop31Result:
    """Series-expand both KL directions in ``eta`` for a ``V``-token softmax.

    With ``q = softmax(z + eta g)``, ``q_k = p_k exp(eta g_k) / Z(eta)`` where
    ``Z(eta) = sum_k p_k exp(eta g_k) = sum_n eta^n m_n / n!`` (``m_n = sum_k p_k g_k^n``,
    ``m_0 = 1``). Hence ``KL(p||q) = log Z - eta m_1`` and
    ``KL(q||p) = eta (log Z)' - log Z``; sympy expands ``log Z`` to ``eta^3`` and the
    ``eta^2`` coefficients are compared with ``1/2 g^T F g`` for symbolic ``p, g``.
    """
    p = sp.symbols(f"p_1:{V + 1}", positive=True)
    g = sp.symbols(f"g_1:{V + 1}", real=True)
    eta = sp.Symbol("eta", positive=True)
    m = sp.symbols("m_1:5", real=True)
    Z = 1 + sp.Add(*[eta**n * m[n - 1] / sp.factorial(n) for n in range(1, 5)])
    log_Z = sp.series(sp.log(Z), eta, 0, 4).removeO()
    fwd = sp.expand(log_Z - eta * m[0])
    rev = sp.expand(eta * sp.diff(log_Z, eta) - log_Z)
    rev = sp.Add(*[rev.coeff(eta, k) * eta**k for k in range(4)])  # through eta^3
    simplex = {p[-1]: 1 - sp.Add(*p[:-1])}
    moments = {m[n - 1]: sp.Add(*[pk * gk**n for pk, gk in zip(p, g)]) for n in range(1, 5)}

    def concrete(series):
        return sp.expand(series.xreplace(moments).subs(simplex))

    F = sp.diag(*p) - sp.Matrix(p) * sp.Matrix(p).T
    gv = sp.Matrix(g)
    quad = sp.expand(sp.Rational(1, 2) * (gv.T * F * gv)[0].subs(simplex))

    def matches(series):
        c = concrete(series)
        return all(c.coeff(eta, k) == 0 for k in (0, 1)) and sp.expand(c.coeff(eta, 2) - quad) == 0

    null = tuple(F.subs(simplex).nullspace())
    mean = sp.Add(*[pk * gk for pk, gk in zip(p, g)])
    third = sp.Add(*[pk * (gk - mean) ** 3 for pk, gk in zip(p, g)]) / 6  # k3 / 6
    cubic = fwd.coeff(eta, 3)
    cubic_is_k3 = sp.expand(concrete(cubic) - third.subs(simplex)) == 0
    return Prop31Result(V, fwd, rev, quad, matches(fwd), matches(rev), third if cubic_is_k3 else cubic, null)


def prop31_numeric(z=(0.3, -1.2, 0.8, 0.0, -0.4), g=(1.0, -0.5, 0.25, 0.7, -1.1),
                   etas=(1e-1, 1e-2, 1e-3, 1e-4)) -> list[tuple[float, float, float]]:
    """Finite steps: ``(eta, KL(p||p'), KL / (1/2 eta^2 g^T F g))`` in 50-digit arithmetic.

    The ratio tends to 1 with error ``O(eta)``.
    """
    import mpmath

    with mpmath.workdps(50):  # local precision: no global mpmath state is changed
        return _finite_steps(mpmath, z, g, etas)


def _finite_steps(mpmath, z, g, etas):
    z = [mpmath.mpf(x) for x in z]
    g = [mpmath.mpf(x) for x in g]

    def softmax(v):
        m = max(v)
        e = [mpmath.exp(x - m) for x in v]
        s = mpmath.fsum(e)
        return [x / s for x in e]

    p = softmax(z)
    mean = mpmath.fsum(pk * gk for pk, gk in zip(p, g))
    gFg = mpmath.fsum(pk * gk * gk for pk, gk in zip(p, g)) - mean**2
    out = []
    for eta in etas:
        q = softmax([zk + mpmath.mpf(eta) * gk for zk, gk in zip(z, g)])
        kl = mpmath.fsum(pk * (mpmath.log(pk) - mpmath.log(qk)) for pk, qk in zip(p, q))
        out.append((eta, float(kl), float(kl / (mpmath.mpf(eta) ** 2 * gFg / 2))))
    return out
