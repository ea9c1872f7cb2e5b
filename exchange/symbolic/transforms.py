"""Restoring transformations in closed form (THEORY.md T5, section 4b), mirroring
``exchange/objectives/restoring.py``.

A base family is given in factored form, ``J = sum_i norm_i (S(ratio_i, A_i) + X_i)``
(``ratio`` the token ratio, the sequence ratio, or the unit ratio ``exp(l - sg l)``), and
each transformation rewrites one factor before sympy differentiates ``J``:

- ``group_constant_norm``: ``norm_i -> 1 / mean_j(1 / norm_j)`` (one constant per group);
- ``min_replace``: ``norm_i -> sg(min_j w_j)`` with ``w_j = norm_j s_j`` and the per-token
  ratio reduced to the unit ratio when the family has a sequence ratio ``s_j`` (its
  sequence clip then acts on the unit ratio, i.e. never);
- ``adv_orthogonal``: ``norm_i -> sg(w_i - (A.w / A.A) A_i)``;
- ``sign_free_clip``: the clip keeps the gradient iff the ratio is inside the range, for
  either sign of ``A`` (``S = r A`` inside, ``sg(r) A`` outside);
- ``token_trust_region``: the ratio is stop-gradiented wherever the token's own ratio
  ``exp(l - l_old)`` leaves ``[1 - trust_eps, 1 + trust_eps]``, for either sign of ``A``
  (the torch transform's 0/1 gate on the surrogate's gradient).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import sympy as sp

from exchange.symbolic.spec import param_symbol
from exchange.symbolic.group import SymbolicGroup
from exchange.symbolic.surrogates import StopGradient, clip, ppo_clip, response_norms, sapo_gate, sign_free_clip

__all__ = ["Factored", "BASES", "TRANSFORMS", "variant_surrogate"]


@dataclass(frozen=True)
class Factored:
    """``norm(g, P, opts) -> [G]``, ``ratio(g, i)``, ``response_ratio(g, i)`` (or None),
    ``surrogate(g, r, A, P)`` and its sign-free version."""

    norm: Callable
    ratio: Callable
    surrogate: Callable
    sign_free: Callable | None
    response_ratio: Callable | None = None
    broadcast: bool = False  # the ratio is per response, on every token: term L_i S(s_i, A_i)


def _unit(g: SymbolicGroup, i: int) -> sp.Expr:
    return sp.exp(g.l[i] - g.sg(g.l[i]))


def _token(g: SymbolicGroup, i: int) -> sp.Expr:
    return g.token_ratio(i)


def _sequence(g: SymbolicGroup, i: int) -> sp.Expr:
    return g.seq_ratio(i)


def _token_sequence(g: SymbolicGroup, i: int) -> sp.Expr:
    """GSPO-token's ``sg(s_i) exp(l - sg l)``: value ``s_i``, gradient ``s_i`` per token."""
    return g.sg(g.seq_ratio(i)) * _unit(g, i)


def _clip(g, r, A, P):
    return ppo_clip(r, A, P["eps_low"], P["eps_high"])


def _sign_free(g, r, A, P):
    return sign_free_clip(r, A, 1 - P["eps_low"], 1 + P["eps_high"])


def _sapo(g, r, A, P):
    return sapo_gate(r, A, P["tau_pos"], P["tau_neg"])


def _sapo_sign_free(g, r, A, P):
    return sapo_gate(r, A, P["tau_pos"], P["tau_pos"])


def _truncated_is(g, r, A, P):
    """CISPO: ``sg(clip(r)) A log r`` (already sign-free)."""
    return g.sg(clip(r, P.get("eps_low"), P["eps_high"])) * A * sp.log(r)


def _norm(mode: str | None):
    """``norm(g, P, opts)`` of one aggregation mode (``None``: ``opts["loss_agg_mode"]``)."""
    def norm(g, P, opts):
        return response_norms(g.L, mode or opts["loss_agg_mode"], G=g.Gn, N=g.N)

    return norm


BASES: dict[str, Factored] = {
    "grpo": Factored(_norm(None), _token, _clip, _sign_free),
    "dapo": Factored(_norm("token-mean"), _token, _clip, _sign_free),
    "gspo": Factored(_norm("seq-mean-token-mean"), _sequence, _clip, _sign_free, response_ratio=_sequence,
                     broadcast=True),
    "gspo_token": Factored(_norm("seq-mean-token-mean"), _token_sequence, _clip, _sign_free,
                           response_ratio=_sequence),
    "sapo": Factored(_norm(None), _token, _sapo, _sapo_sign_free),
    "sapo_verl": Factored(_norm("seq-mean-token-mean"), _token, _sapo, _sapo_sign_free),
    "cispo": Factored(_norm("token-mean"), _token, _truncated_is, _truncated_is),
}


def _group_constant_norm(f: Factored) -> Factored:
    def norm(g, P, opts):
        n = f.norm(g, P, opts)
        return [1 / (sp.Add(*[1 / x for x in n]) / g.G)] * g.G

    return replace(f, norm=norm)


def _weights(f: Factored, g, P, opts):
    n = f.norm(g, P, opts)
    if f.response_ratio is None:
        return n
    return [x * f.response_ratio(g, i) for i, x in enumerate(n)]


def _reduced(f: Factored, norm) -> Factored:
    ratio = _unit if f.response_ratio is not None else f.ratio
    return replace(f, norm=norm, ratio=ratio, response_ratio=None, broadcast=False)


def _min_replace(f: Factored) -> Factored:
    def norm(g, P, opts):
        return [g.sg(sp.Min(*_weights(f, g, P, opts)))] * g.G

    return _reduced(f, norm)


def _adv_orthogonal(f: Factored) -> Factored:
    def norm(g, P, opts):
        w = _weights(f, g, P, opts)
        aa = sp.Add(*[a * a for a in g.A])
        # Equal rewards give A = 0 and nothing to project out (as the torch transform).
        coef = sp.Piecewise((sp.Add(*[a * x for a, x in zip(g.A, w)]) / aa, aa > 0), (0, True))
        return [g.sg(x - coef * a) for x, a in zip(w, g.A)]

    return _reduced(f, norm)


def _sign_free_clip(f: Factored) -> Factored:
    return replace(f, surrogate=f.sign_free)


def _token_trust_region(f: Factored) -> Factored:
    def ratio(g: SymbolicGroup, i: int) -> sp.Expr:
        r, rho = f.ratio(g, i), g.token_ratio(i)
        eps = param_symbol("trust_eps")  # substituted like every hyperparameter
        inside = sp.And(rho >= 1 - eps, rho <= 1 + eps)
        return sp.Piecewise((r, inside), (StopGradient(r), True))

    return replace(f, ratio=ratio)


TRANSFORMS = {"group_constant_norm": _group_constant_norm, "min_replace": _min_replace,
              "adv_orthogonal": _adv_orthogonal, "sign_free_clip": _sign_free_clip,
              "token_trust_region": _token_trust_region}


def variant_surrogate(base: str, transforms: tuple[str, ...]):
    """The surrogate builder ``(g, P, opts) -> J`` of ``base+t1+t2...``."""
    f = BASES[base]
    for t in transforms:
        f = TRANSFORMS[t](f)

    def surrogate(g, P, opts):
        norm = f.norm(g, P, opts)
        if f.broadcast:
            return sp.Add(*[norm[i] * g.L[i] * f.surrogate(g, f.ratio(g, i), g.A[i], P) for i in range(g.G)])
        return sp.Add(*[norm[i] * (f.surrogate(g, f.ratio(g, i), g.A[i], P) + g.X[i]) for i in range(g.G)])

    return surrogate
