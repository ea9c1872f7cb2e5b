"""Evaluate a derivation's closed-form coefficients on a concrete one-group rollout.

This is the bridge to the torch objective: ``closed_form_coefficients(d, logprobs,
rollout)`` returns ``kappa [N, T]`` computed from the symbolic formula alone, to be
compared with ``exchange.token_coefficients(objective.bind(), logprobs, rollout)``.

Token ``(i, t)`` is evaluated as the designated token of response ``i`` (its own ratio
``r_i``, behaviour probability ``q_i`` and standardised entropy ``z_i``); the other
responses use their first token; sequence ratios ``s_j`` use every token of response ``j``.

``z`` is computed here from ``rollout.entropy`` by its definition (HAPO: entropy minus
its mean over the response or the batch, over the population std + 1e-6), independently
of the torch objective, so the agreement tests also check the catalog's z-score.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import sympy as sp
import torch
from torch import Tensor

from exchange.errors import InvalidArgument
from exchange.core.rollout import Rollout
from exchange.symbolic.derive import ClosedForm, Derivation
from exchange.symbolic.spec import PARAM_SYMBOLS

__all__ = ["closed_form_coefficients", "closed_form_shared_K"]


def _symbols(d: ClosedForm | Derivation) -> list[sp.Symbol]:
    g = d.group
    extra = {d.advantage.scale} if isinstance(d.advantage.scale, sp.Symbol) else set()

    known = set(PARAM_SYMBOLS.values())
    params = [s for k in d.kappa for s in k.free_symbols if s in known]
    return [*g.R, *g.L, *g.A, *g.r, *g.s, *g.q, *g.z, g.Gn, g.N, g.rho, g.q_event, g.z_event,
            *sorted(set(params) | extra, key=lambda s: s.name)]


@functools.lru_cache(maxsize=64)
def _compiled(d: ClosedForm | Derivation):
    syms = _symbols(d)
    return syms, [sp.lambdify(syms, k, modules="math") for k in d.kappa], sp.lambdify(syms, d.K, modules="math")


def standardised_entropy(rollout: Rollout, scope: str, eps: float = 1e-6) -> np.ndarray:
    """``z [N, T]``: each real token's entropy minus the mean over ``scope`` ("response" or
    "batch"), over the population std + ``eps`` (HAPO's ``z_H``); 0 on padding."""
    if rollout.entropy is None:
        raise InvalidArgument("rollout.entropy=None, but the closed form reads the standardised entropy z; "
                              "pass entropy [N, T].")
    h = rollout.entropy.detach().to(torch.float64).numpy()
    mask = rollout.mask.numpy()
    z = np.zeros_like(h)
    rows = [[i] for i in range(h.shape[0])] if scope == "response" else [list(range(h.shape[0]))]
    for idx in rows:
        values = h[idx][mask[idx]]
        z[idx] = np.where(mask[idx], (h[idx] - values.mean()) / (values.std() + eps), 0.0)
    return z


def _token_inputs(d: ClosedForm | Derivation, rollout: Rollout, logprobs: Tensor) -> dict[str, np.ndarray]:
    """``[N, T]`` arrays of the per-token inputs: ratio ``r``, behaviour probability ``q``
    and (when the objective has a ``z_scope``) standardised entropy ``z``."""
    r64 = rollout.to(torch.float64)
    log_ratio = ((logprobs.detach().to(torch.float64) - r64.old_logprobs) * r64.fmask).numpy()
    out = {"r": np.exp(log_ratio), "q": np.exp(r64.old_logprobs.numpy()), "log_ratio": log_ratio}
    if "z_scope" in d.options:
        out["z"] = standardised_entropy(rollout, d.options["z_scope"])
    return out


def _at_token(d: ClosedForm | Derivation, vals: dict[str, float], inputs: dict[str, np.ndarray], i: int, t: int,
              shared: bool = False) -> None:
    """Set response ``i``'s designated-token symbols (and the event's, when ``shared``) to token ``(i, t)``."""
    g = d.group
    names = {"r": (g.r[i], g.rho), "q": (g.q[i], g.q_event), "z": (g.z[i], g.z_event)}
    for key, (own, event) in names.items():
        if key in inputs:
            vals[own.name] = float(inputs[key][i, t])
            if shared:
                vals[event.name] = float(inputs[key][i, t])


def _values(d: ClosedForm | Derivation, rollout: Rollout, logprobs: Tensor) -> tuple[dict[str, float], dict]:
    """Numeric value of every symbol (designated tokens at position 0); and the token inputs."""
    if rollout.n_groups != 1 or rollout.n != d.G:
        raise InvalidArgument(
            f"rollout has n={rollout.n} responses in n_groups={rollout.n_groups}; the derivation "
            f"is for one group of G={d.G}. Pass a one-group rollout of {d.G} responses."
        )
    g = d.group
    r64 = rollout.to(torch.float64)
    inputs = _token_inputs(d, rollout, logprobs)
    lengths = r64.lengths.tolist()
    rewards = r64.rewards.tolist()
    # z only exists for objectives with a z_scope; elsewhere it is absent from the formula.
    vals: dict[str, float] = {z.name: 0.0 for z in (*g.z, g.z_event)}
    for j in range(d.G):
        vals[g.R[j].name] = rewards[j]
        vals[g.L[j].name] = float(lengths[j])
        vals[g.s[j].name] = math.exp(float(inputs["log_ratio"][j].sum()) / lengths[j])
        _at_token(d, vals, inputs, j, 0)
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
    vals[g.rho.name] = vals[g.q_event.name] = 1.0
    vals[g.z_event.name] = 0.0

    for key, sym in PARAM_SYMBOLS.items():
        value = d.options.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            vals[sym.name] = float(value)
    return vals, inputs


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
    vals, inputs = _values(d, rollout, logprobs)
    out = torch.zeros(inputs["r"].shape, dtype=torch.float64)
    for i in range(d.G):
        for t in range(int(rollout.lengths[i])):
            vals_it = dict(vals)
            _at_token(d, vals_it, inputs, i, t)
            out[i, t] = _call(fns[i], syms, vals_it)
    return out


def closed_form_shared_K(d: ClosedForm | Derivation, logprobs: Tensor, rollout: Rollout) -> float:
    """The closed-form shared-event coefficient ``K`` at the event of position 0.

    The event must be shared with one ratio ``rho`` (event-consistent rollout).
    """
    syms, _, K_fn = _compiled(d)
    vals, inputs = _values(d, rollout, logprobs)
    for key in ("r", "q"):
        col = inputs[key][:, 0]
        if not np.allclose(col, col[0], rtol=1e-12, atol=0):
            raise InvalidArgument(f"rollout: position 0 has different {key} across responses; a shared "
                                  "event needs one ratio and one behaviour probability (event-consistent log-probs).")
    _at_token(d, vals, inputs, 0, 0, shared=True)
    return _call(K_fn, syms, vals)
