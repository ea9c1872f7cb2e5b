"""Evaluate a derivation's closed-form coefficients on a concrete one-group rollout.

This is the bridge to the torch objective: ``closed_form_coefficients(d, logprobs,
rollout)`` returns ``kappa [N, T]`` computed from the symbolic formula alone, to be
compared with ``exchange.token_coefficients(objective.bind(), logprobs, rollout)``.

Token ``(i, t)`` is evaluated as the designated token of response ``i`` (its own ratio
``r_i``); the other responses use their first token; sequence ratios ``s_j`` use every
token of response ``j``.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import sympy as sp
import torch
from torch import Tensor

from exchange.errors import InvalidArgument
from exchange.rollout import Rollout
from exchange.symbolic.derive import ClosedForm, Derivation

__all__ = ["closed_form_coefficients", "closed_form_shared_K"]


def _symbols(d: ClosedForm | Derivation) -> list[sp.Symbol]:
    g = d.group
    extra = {d.advantage.scale} if isinstance(d.advantage.scale, sp.Symbol) else set()
    from exchange.symbolic.spec import PARAM_SYMBOLS

    known = set(PARAM_SYMBOLS.values())
    params = [s for k in d.kappa for s in k.free_symbols if s in known]
    return [*g.R, *g.L, *g.A, *g.r, *g.s, g.Gn, g.N, g.rho, *sorted(set(params) | extra, key=lambda s: s.name)]


@functools.lru_cache(maxsize=64)
def _compiled(d: ClosedForm | Derivation):
    syms = _symbols(d)
    return syms, [sp.lambdify(syms, k, modules="math") for k in d.kappa], sp.lambdify(syms, d.K, modules="math")


def _values(d: ClosedForm | Derivation, rollout: Rollout, logprobs: Tensor) -> tuple[dict[str, float], Tensor]:
    """Numeric value of every symbol except the designated-token ratios; and ratio [N, T]."""
    if rollout.n_groups != 1 or rollout.n != d.G:
        raise InvalidArgument(
            f"rollout has n={rollout.n} responses in n_groups={rollout.n_groups}; the derivation "
            f"is for one group of G={d.G}. Pass a one-group rollout of {d.G} responses."
        )
    g = d.group
    r64 = rollout.to(torch.float64)
    lp = logprobs.detach().to(torch.float64)
    log_ratio = (lp - r64.old_logprobs) * r64.fmask  # [N, T]
    lengths = r64.lengths.tolist()
    rewards = r64.rewards.tolist()
    vals: dict[str, float] = {}
    for j in range(d.G):
        vals[g.R[j].name] = rewards[j]
        vals[g.L[j].name] = float(lengths[j])
        vals[g.s[j].name] = math.exp(float(log_ratio[j].sum()) / lengths[j])
        vals[g.r[j].name] = math.exp(float(log_ratio[j, 0]))
    subs_R = {g.R[j]: sp.Float(rewards[j], 30) for j in range(d.G)} | \
        {g.L[j]: sp.Integer(lengths[j]) for j in range(d.G)}

    def number(expr: sp.Expr) -> float:
        return float(sp.sympify(expr).xreplace(subs_R).evalf(30))

    scale = number(d.advantage.scale_value)
    for j in range(d.G):
        vals[g.A[j].name] = number(d.advantage.centred[j]) / scale
    if isinstance(d.advantage.scale, sp.Symbol):
        vals[d.advantage.scale.name] = scale
    vals[g.Gn.name] = float(d.G)
    vals[g.N.name] = float(sum(lengths))
    vals[g.rho.name] = 1.0
    from exchange.symbolic.spec import PARAM_SYMBOLS

    for key, sym in PARAM_SYMBOLS.items():
        value = d.options.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            vals[sym.name] = float(value)
    return vals, torch.exp(log_ratio)


def _call(fn, syms, vals: dict[str, Any]) -> float:
    try:
        return float(fn(*[vals[s.name] for s in syms]))
    except KeyError as err:  # a symbol without a numeric value: the spec uses an unknown parameter
        raise InvalidArgument(f"symbol={err.args[0]!r} of the closed form has no numeric value.") from None


def closed_form_coefficients(d: ClosedForm | Derivation, logprobs: Tensor, rollout: Rollout) -> Tensor:
    """``kappa: Tensor[N, T]`` (float64) from the closed form, 0 on padding.

    ``rollout`` must hold one group of ``d.G`` responses; ``logprobs`` is ``[N, T]``.
    """
    syms, fns, _ = _compiled(d)
    vals, ratio = _values(d, rollout, logprobs)
    g = d.group
    out = torch.zeros(ratio.shape, dtype=torch.float64)
    for i in range(d.G):
        for t in range(int(rollout.lengths[i])):
            vals_it = dict(vals)
            vals_it[g.r[i].name] = float(ratio[i, t])
            out[i, t] = _call(fns[i], syms, vals_it)
    return out


def closed_form_shared_K(d: ClosedForm | Derivation, logprobs: Tensor, rollout: Rollout) -> float:
    """The closed-form shared-event coefficient ``K`` at the event of position 0.

    The event must be shared with one ratio ``rho`` (event-consistent rollout).
    """
    syms, _, K_fn = _compiled(d)
    vals, ratio = _values(d, rollout, logprobs)
    col = ratio[:, 0]
    if not torch.allclose(col, col[0].expand_as(col), rtol=1e-12, atol=0):
        raise InvalidArgument("rollout: position 0 has different ratios across responses; "
                              "a shared event needs one ratio (event-consistent log-probs).")
    vals[d.group.rho.name] = float(col[0])
    return _call(K_fn, syms, vals)
