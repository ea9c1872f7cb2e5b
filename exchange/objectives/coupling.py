"""The coupling-only surgical transform (issue 42, the M1 design): remove only the
shared-event residual that the per-response weights add.

The surgical transform (:mod:`exchange.objectives.surgical`) removes an objective's whole
shared residual ``K_e``. In a sequence-coupled objective (GSPO: ``w_i = norm_i * s_i``
with the response ratio ``s_i``, THEORY.md M1) that residual has two parts: the one the
*unequal* weights ``w_i`` make, and the one the same objective leaves with every
response of a group weighted alike. The M1 design's pathway arm removes the first only:

    kbar[i, t]   = the coefficients of the same objective with each w_i replaced by
                   sg(group mean of w_j) (the response ratio's gradient goes with the
                   weight, as in Min-Replace: the token keeps the REINFORCE ratio)
    D_e          = sum_{(i,t) in e} (kappa - kbar)[i, t]        (the coupling's K_e)
    kappa'[i, t] = kappa[i, t] - D_e / n_e   at occurrences of a shared event e
    kappa'[i, t] = kappa[i, t]               otherwise

so every shared event keeps ``K'_e = K_e - D_e``, the group-mean objective's residual (0
when its responses have equal lengths: the design's ``max_filler = 0``), and every other
coefficient is the base loss's own. As :func:`surgical`, the correction enters as
``sum c (l - sg(l))``: the loss value is unchanged, only its gradient moves. Factored
objectives only (:class:`~exchange.objectives.Objective` with ``factors``).

The dose arms of this family (issue 42) keep a fraction ``f`` of what the arm removes:

    kappa_f[i, t] = kappa[i, t] - (1 - f) * D_e / n_e   at occurrences of a shared event e

so ``kappa_f = f * kappa + (1 - f) * kappa'`` at every token: ``f = 0`` is the arm above
(the same arithmetic, bit for bit), ``f = 1`` the base loss, and every shared event keeps
``K_e - (1 - f) D_e``. ``coupling_surgical(objective, keep=f)`` is that arm; the lab's dose
arms of a design whose surgical arm is ``+coupling_surgical`` train it
(:func:`exchange.lab.dose.dose_arm`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from torch import Tensor

from exchange.core.coefficients import LossFn, token_coefficients
from exchange.core.rollout import Rollout
from exchange.errors import InvalidArgument
from exchange.objectives._factored import Factors, Params, factored_loss
from exchange.objectives.objective import Objective
from exchange.objectives.surgical import shared_correction

__all__ = ["coupling_surgical", "group_mean_weight"]


def group_mean_weight(f: Factors) -> Factors:
    """``f`` with each per-response weight ``w_i = norm_i * s_i`` replaced by
    ``sg(group mean of w_j)`` ``[N]``; the response ratio leaves the token (which keeps
    :meth:`Factors.token_part_ratio`), and a sequence-level clip goes with the weight."""

    def norm(logprobs: Tensor, rollout: Rollout, p: Params) -> Tensor:
        return rollout.group_mean(f.response_weight(logprobs, rollout, p)).detach()  # [N]

    return f.replace(norm=norm, ratio=f.token_part_ratio(), response_ratio=None,
                     clip_level="none" if f.clip_level == "sequence" else f.clip_level)


def coupling_surgical(objective: Objective, *, keep: float = 0.0, **params: Any) -> LossFn:
    """``objective`` bound with ``params``, with a fraction ``1 - keep`` of its weights'
    shared residual removed (module docstring; ``keep = 0``, the default, removes all of it).
    Returns ``loss_fn(logprobs [N, T], rollout) -> scalar`` whose ``surgical_base`` is the
    loss whose shared residual it removes (``loss - loss[group-mean weight]``, coefficients
    ``kappa - kbar``: the surgical end of the pilot's delta_hat bracket attributes it);
    tensors it creates follow ``logprobs``' device and dtype. Raises :class:`InvalidArgument`
    for an objective that is not in the factored form or ``keep`` outside ``[0, 1]``."""
    if objective.factors is None:
        raise InvalidArgument(f"objective={objective.name!r} is not in the factored form (no per-response weight): "
                              "the coupling-only surgical transform needs one; use '+surgical' instead.")
    if isinstance(keep, bool) or not isinstance(keep, (int, float)) or not 0.0 <= keep <= 1.0:
        raise InvalidArgument(f"keep={keep!r}: the coupling dose keeps a fraction 0 <= keep <= 1 of the coupling "
                              "residual (0 is the coupling-surgical arm, 1 the base objective); e.g. keep=0.1.")
    drop = 1.0 - float(keep)
    loss_fn = objective.bind(**params)
    flat = dataclasses.replace(objective, name=f"{objective.name}[group-mean weight]",
                               loss=functools.partial(factored_loss, group_mean_weight(objective.factors)),
                               factors=group_mean_weight(objective.factors)).bind(**params)

    def wrapped(logprobs: Tensor, rollout: Rollout) -> Tensor:
        loss = loss_fn(logprobs, rollout)
        kappa = token_coefficients(loss_fn, logprobs.detach(), rollout)  # [N, T] float64
        kbar = token_coefficients(flat, logprobs.detach(), rollout)  # [N, T] float64
        c = drop * shared_correction(kappa - kbar, rollout).to(device=logprobs.device, dtype=logprobs.dtype)
        return loss + (c * (logprobs - logprobs.detach())).sum()  # kappa = -dloss/dl: subtracts c

    def coupling_part(logprobs: Tensor, rollout: Rollout) -> Tensor:
        """The coupling's own loss: coefficients ``kappa - kbar`` ``[N, T]``."""
        return loss_fn(logprobs, rollout) - flat(logprobs, rollout)

    suffix = "coupling_surgical" if keep == 0 else f"coupling_dose{keep:g}"
    wrapped.__name__ = f"{objective.name}+{suffix}"  # type: ignore[attr-defined]
    wrapped.objective = objective.name  # type: ignore[attr-defined]
    wrapped.keep = float(keep)  # type: ignore[attr-defined]
    wrapped.surgical_base = coupling_part  # type: ignore[attr-defined]
    return wrapped
