"""The surgical transform: remove only the shared-event residual of any objective.

THEORY.md's falsifier asks for an arm that toggles *only* the pathway under test. The
restoring transformations (:mod:`exchange.objectives.restoring`) change the
objective's weights (a group normaliser, Min-Replace), which also re-weights every
non-shared token: they are the **method** test (P4). The surgical transform is the
**pathway** test (P2, P3):

    kappa'[i, t] = kappa[i, t] - K_e / n_e     if (i, t) is an occurrence of a shared event e
    kappa'[i, t] = kappa[i, t]                 otherwise

with ``K_e = sum_{(i,t) in e} kappa[i, t]`` and ``n_e`` the event's occurrence count
(:func:`exchange.core.events.events`). Every shared event then has ``K'_e = 0`` ((C)
holds, Theorem T1's conclusion) and every other coefficient, clip, sequence weight and
normaliser is the base loss's own, to float64 round-off. The update removed is exactly
``sum_{e shared} K_e grad l_e``, the residual the instruments measure
(:func:`exchange.lab.instruments.zero_credit_gradient` on shared occurrences).

It works on any ``loss_fn(logprobs [N, T], rollout) -> scalar`` (a catalog objective,
a library adapter, the user's own): one extra backward of the loss on a detached
float64 copy gives ``kappa``; the correction is added as
``sum c[i, t] * (l[i, t] - sg(l[i, t]))`` with ``c = sg(K_e / n_e)``, so the loss *value*
is unchanged and only its gradient moves. As a spec: ``"<objective>+surgical"``
(:func:`exchange.objectives.resolve`), always last.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from exchange.core.coefficients import LossFn, token_coefficients
from exchange.core.events import event_coefficients, events
from exchange.core.rollout import Rollout

__all__ = ["SURGICAL", "shared_correction", "surgical"]

SURGICAL = "surgical"
"""The spec suffix: ``resolve("grpo+surgical")`` is ``surgical(resolve("grpo"))``."""


def shared_correction(kappa: Tensor, rollout: Rollout) -> Tensor:
    """``c: Tensor[N, T]`` (``kappa``'s dtype and device): ``K_e / n_e`` at every occurrence of a
    shared event of ``rollout``, 0 elsewhere (padding included). ``kappa - c`` is the
    surgical coefficient. ``K_e`` is summed in float64 on ``kappa``'s device."""
    ev = events(rollout)
    K = event_coefficients(kappa.detach().to(torch.float64), ev)  # [E]
    per_occ = K / ev.occurrences.to(K.dtype).clamp(min=1)
    ids = ev.ids.clamp(min=0)
    c = torch.where((ev.ids >= 0) & ev.shared[ids], per_occ[ids], torch.zeros((), dtype=K.dtype, device=K.device))
    return c.to(dtype=kappa.dtype)


def surgical(loss_fn: LossFn) -> LossFn:
    """``loss_fn`` with only its shared-event residual removed (see the module docstring).

    Returns a ``loss_fn(logprobs [N, T], rollout) -> scalar`` with the same value as
    ``loss_fn`` and coefficients ``kappa - K_e / n_e`` on shared-event occurrences.
    Tensors it creates follow ``logprobs``' device and dtype.
    """

    @functools.wraps(loss_fn)
    def wrapped(logprobs: Tensor, rollout: Rollout) -> Tensor:
        loss = loss_fn(logprobs, rollout)
        kappa = token_coefficients(loss_fn, logprobs.detach(), rollout)  # [N, T] float64
        c = shared_correction(kappa, rollout).to(device=logprobs.device, dtype=logprobs.dtype)
        # kappa = -d loss / d l, so adding c * l to the loss subtracts c from kappa.
        return loss + (c * (logprobs - logprobs.detach())).sum()

    base = getattr(loss_fn, "__name__", None) or type(loss_fn).__name__
    wrapped.__name__ = f"{base}+{SURGICAL}"  # type: ignore[attr-defined]
    wrapped.surgical_base = loss_fn  # type: ignore[attr-defined]
    for attr in ("objective", "params"):  # keep a catalog binding's metadata visible
        if hasattr(loss_fn, attr):
            setattr(wrapped, attr, getattr(loss_fn, attr))
    return wrapped
