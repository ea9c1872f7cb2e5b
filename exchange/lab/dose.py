"""The dose arms of issue 42: keep a fraction ``f`` of the shared residual.

A one-parameter extension of the surgical transform (:mod:`exchange.objectives.surgical`):

    kappa_f[i, t] = kappa[i, t] - (1 - f) * K_e / n_e     at occurrences of a shared event e
    kappa_f[i, t] = kappa[i, t]                           otherwise

so ``f = 0`` is the surgical arm and ``f = 1`` the baseline, and every shared event keeps
``K'_e = f * K_e``. First order (THEORY.md section 5, "what a design must survive") says
the probe's drift against the surgical arm scales with ``f``: the dose arm's effect is
``f`` times the full arm's. Under Adam a parameter reached only by the residual breaks
that (its step is ~lr whatever the gradient's size); the dose rule
(:func:`exchange.lab.dose_rule.decide_dose`) tests it on each dose's own interval.

Like the surgical transform it works on any ``loss_fn(logprobs [N, T], rollout)``: one
extra backward gives ``kappa`` (float64), the correction ``(1 - f) * c`` is added as
``sum c'[i, t] * (l - sg(l))``, so the loss value is unchanged and only its gradient
moves.
"""

from __future__ import annotations

import functools
import math

from torch import Tensor

from exchange.core.coefficients import LossFn, token_coefficients
from exchange.core.rollout import Rollout
from exchange.errors import InvalidArgument
from exchange.objectives.surgical import shared_correction

__all__ = ["dosed"]


def dosed(loss_fn: LossFn, keep: float | None) -> LossFn:
    """``loss_fn`` keeping a fraction ``keep`` (0 < keep < 1) of its shared-event residual.

    Returns a ``loss_fn(logprobs [N, T], rollout) -> scalar`` with the same value and
    coefficients ``kappa - (1 - keep) K_e / n_e`` on shared-event occurrences; tensors
    follow ``logprobs``' device and dtype."""
    if keep is None or not isinstance(keep, (int, float)) or not math.isfinite(keep) or not 0 < keep < 1:
        raise InvalidArgument(f"keep={keep!r}: a dose arm keeps a fraction 0 < keep < 1 of the shared residual "
                              "(keep = 0 is the surgical arm, 1 the baseline); set [[arms]] keep = 0.1.")
    drop = 1.0 - float(keep)

    @functools.wraps(loss_fn)
    def wrapped(logprobs: Tensor, rollout: Rollout) -> Tensor:
        loss = loss_fn(logprobs, rollout)
        kappa = token_coefficients(loss_fn, logprobs.detach(), rollout)  # [N, T] float64
        c = drop * shared_correction(kappa, rollout).to(device=logprobs.device, dtype=logprobs.dtype)
        return loss + (c * (logprobs - logprobs.detach())).sum()  # kappa = -dloss/dl: subtracts c

    base = getattr(loss_fn, "__name__", None) or type(loss_fn).__name__
    wrapped.__name__ = f"{base}+dose{keep:g}"  # type: ignore[attr-defined]
    wrapped.surgical_base = loss_fn  # type: ignore[attr-defined]
    wrapped.keep = float(keep)  # type: ignore[attr-defined]
    return wrapped
