"""Sympy building blocks of the surrogates, one formula each (mirror of objectives/_common.py).

Every block is written so that ``sympy.diff`` gives the same derivative as torch's
autograd away from measure-zero boundaries: the PPO clip is the branch-explicit
``Piecewise`` that equals ``min(r A, clip(r, 1-eps_low, 1+eps_high) A)`` everywhere
(tests compare the two), so its derivative is ``A r`` on the live branch and ``0`` on
the clipped ones.
"""

from __future__ import annotations

from typing import Sequence

import sympy as sp
from exchange.errors import InvalidArgument

__all__ = [
    "ppo_clip",
    "ppo_clip_bounds",
    "sign_free_clip",
    "StopGradient",
    "ppo_clip_signed",
    "response_norms",
    "sapo_gate",
    "ppo_clip_min_form",
    "clip",
    "aggregate",
    "AGG_MODES",
]

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm", "token-sum")


def ppo_clip(r: sp.Expr, A: sp.Expr, eps_low: sp.Expr, eps_high: sp.Expr, clip_c: sp.Expr | None = None) -> sp.Expr:
    """``min(r A, clip(r, 1-eps_low, 1+eps_high) A)`` as an explicit Piecewise.

    Clipped (constant in ``r``) when ``A > 0, r > 1+eps_high`` or ``A < 0, r < 1-eps_low``:
    the sign-dependent clip of T4 / mechanism M2. With ``clip_c`` (verl's dual clip,
    ``c > 1 + eps_high``) the ``A < 0`` surrogate is floored at ``c A``, i.e. also
    clipped when ``A < 0, r > c``.
    """
    return ppo_clip_bounds(r, A, 1 - eps_low, 1 + eps_high, clip_c)


def ppo_clip_bounds(r: sp.Expr, A: sp.Expr, low: sp.Expr, high: sp.Expr, clip_c: sp.Expr | None = None) -> sp.Expr:
    """:func:`ppo_clip` with the trust region ``[low, high]`` given directly (DCPO's
    probability-dependent bounds); ``clip_c`` floors the ``A < 0`` surrogate at ``c A``."""
    cases = [sp.And(A > 0, r > high), sp.And(A < 0, r < low)]
    bounds = [(high, A > 0), (low, r < low)]
    if clip_c is not None:
        cases.append(sp.And(A < 0, r > clip_c))
        bounds.append((clip_c, True))
    else:
        bounds[-1] = (low, True)
    clipped = sp.Or(*cases)
    bound = sp.Piecewise(*bounds)
    # One "clipped" condition (not two branches) so that the derivative's Piecewise
    # keeps it verbatim: kappa = Piecewise((0, clipped), (A r, True)).
    return sp.Piecewise((bound * A, clipped), (r * A, True))


def sign_free_clip(r: sp.Expr, A: sp.Expr, low: sp.Expr, high: sp.Expr) -> sp.Expr:
    """T5's sign-free trust region: ``r A`` inside ``[low, high]``, ``sg(r) A`` outside,
    for either sign of ``A`` (mirror of ``objectives._common.sign_free_trust_region``)."""
    inside = sp.And(r >= low, r <= high)
    return sp.Piecewise((r * A, inside), (StopGradient(r) * A, True))


class StopGradient(sp.Function):
    """A value-preserving stop-gradient usable inside a Piecewise: derivative 0.

    (``SymbolicGroup.sg`` needs the group; clip hooks only see the ratio.)
    """

    def fdiff(self, argindex=1):
        return sp.Integer(0)

    def _eval_rewrite(self, rule, args, **hints):
        return args[0]


def ppo_clip_signed(r: sp.Expr, A: sp.Expr, low: sp.Expr, high: sp.Expr, sign: int) -> sp.Expr:
    """:func:`ppo_clip_bounds` when the sign of ``A`` is known (``sign`` = +1 or -1): the
    clip acts above ``high`` for ``A > 0`` and below ``low`` for ``A < 0``. For advantages
    that are expressions (HAPO's shifted ``A``) whose sign sympy cannot decide."""
    if sign > 0:
        return sp.Piecewise((high * A, r > high), (r * A, True))
    return sp.Piecewise((low * A, r < low), (r * A, True))


def sapo_gate(r: sp.Expr, A: sp.Expr, tau_pos: sp.Expr, tau_neg: sp.Expr) -> sp.Expr:
    """SAPO's soft gate ``4/tau sigmoid(tau (r - 1)) A``, ``tau = tau_pos if A > 0 else tau_neg``.

    Its derivative in ``l`` is ``4 sigma (1 - sigma) r A``: ``A`` at ``r = 1`` for either
    temperature, sign-dependent off-policy (M2).
    """
    tau = sp.Piecewise((tau_pos, A > 0), (tau_neg, True))
    return 4 / tau / (1 + sp.exp(-tau * (r - 1))) * A


def ppo_clip_min_form(r: sp.Expr, A: sp.Expr, eps_low: sp.Expr, eps_high: sp.Expr) -> sp.Expr:
    """The textbook form ``Min(r A, clip(r) A)``, used only to test :func:`ppo_clip`."""
    return sp.Min(r * A, clip(r, eps_low, eps_high) * A)


def ppo_dual_clip_form(r: sp.Expr, A: sp.Expr, eps_low: sp.Expr, eps_high: sp.Expr, clip_c: sp.Expr) -> sp.Expr:
    """verl's dual clip as written there: for ``A < 0``, ``max(min(r A, clip(r) A), c A)``
    (used only to test :func:`ppo_clip` with ``clip_c``)."""
    single = ppo_clip_min_form(r, A, eps_low, eps_high)
    return sp.Piecewise((sp.Max(single, clip_c * A), A < 0), (single, True))


def clip(r: sp.Expr, eps_low: sp.Expr | None, eps_high: sp.Expr | None) -> sp.Expr:
    """``clip(r, 1-eps_low, 1+eps_high)``; ``None`` drops that side (CISPO's one-sided cap)."""
    out = r
    if eps_high is not None:
        out = sp.Min(out, 1 + eps_high)
    if eps_low is not None:
        out = sp.Max(out, 1 - eps_low)
    return out


def response_norms(lengths: Sequence[sp.Expr], mode: str, *, G: sp.Expr, N: sp.Expr,
                   max_length: sp.Expr | None = None) -> list[sp.Expr]:
    """Per-response weights of verl's ``agg_loss`` modes (mirror of ``aggregation_weight``).

    ``token-mean``: ``1/N``; ``seq-mean-token-mean``: ``1/(G L_i)``; ``seq-mean-token-sum``:
    ``1/G``; ``seq-mean-token-sum-norm``: ``1/(G max_length)``; ``token-sum``: ``1``.
    """
    if mode == "token-mean":
        return [1 / N] * len(lengths)
    if mode == "seq-mean-token-mean":
        return [1 / (G * L) for L in lengths]
    if mode == "seq-mean-token-sum":
        return [1 / G] * len(lengths)
    if mode == "seq-mean-token-sum-norm":
        if max_length is None:
            raise InvalidArgument("mode='seq-mean-token-sum-norm' needs max_length=...; pass the budget symbol.")
        return [1 / (G * max_length)] * len(lengths)
    if mode == "token-sum":
        return [sp.Integer(1)] * len(lengths)
    raise InvalidArgument(f"loss_agg_mode={mode!r} is not one of {AGG_MODES}.")


def aggregate(token_sums: Sequence[sp.Expr], lengths: Sequence[sp.Expr], mode: str, *, G: sp.Expr,
              N: sp.Expr, max_length: sp.Expr | None = None) -> sp.Expr:
    """Reduce per-response token sums ``S_i`` to ``sum_i norm_i S_i`` (:func:`response_norms`)."""
    norms = response_norms(lengths, mode, G=G, N=N, max_length=max_length)
    return sp.Add(*[n * S for n, S in zip(norms, token_sums)])
