"""The ``tax/*`` metrics of one optimizer step, from additive sums (THEORY.md section 4).

Every training monitor logs the same three numbers (:mod:`exchange.core.metric_keys`),
defined here once and used by the TRL callback (:mod:`exchange.libraries.trl.callback`)
and the verl monitor (:mod:`exchange.libraries.verl.monitor`):

- ``tax/shared_residual``: :func:`exchange.core.events.shared_residual` of the step's
  coefficients on the step's rows;
- ``tax/shared_events``: the number of shared events in them;
- ``tax/shared_kappa_share``: the P1 share in coefficient space, ``sum |kappa|`` over the
  occurrences of shared events over ``sum |kappa|`` over all real tokens.

:func:`batch_sums` turns ``kappa [N, T]`` on a :class:`~exchange.core.rollout.Rollout`
into four sums that add over groups (hence over processes that hold whole groups);
:func:`metrics_from_sums` turns their total into the three metrics.
"""

from __future__ import annotations

import torch
from torch import Tensor

from exchange.core.events import SharedResidual, shared_residual_parts
from exchange.core.metric_keys import SHARED_EVENTS, SHARED_KAPPA_SHARE, SHARED_RESIDUAL
from exchange.core.rollout import Rollout

__all__ = ["SUMS", "STEP_KEYS", "batch_sums", "metrics_from_sums"]

SUMS = ("shared_abs_K", "shared_mass", "shared_events", "kappa_abs")
"""The additive sums behind the metrics, in :func:`batch_sums`' order: the parts of the
shared residual (:class:`~exchange.core.events.SharedResidual`) and the coefficient mass
of all tokens."""

STEP_KEYS = (SHARED_RESIDUAL, SHARED_EVENTS, SHARED_KAPPA_SHARE)
"""The keys :func:`metrics_from_sums` returns (what a monitor logs per optimizer step)."""


def batch_sums(kappa: Tensor, rollout: Rollout) -> Tensor:
    """``Tensor[4]`` float64 of additive sums (over groups, hence over processes) behind
    the logged metrics: :func:`~exchange.core.events.shared_residual_parts` (``abs_K``,
    ``mass``, ``events``) and ``sum |kappa|`` over the real tokens. ``kappa: [N, T]``."""
    kappa = kappa.detach().double().to(rollout.mask.device)
    parts = shared_residual_parts(kappa, rollout)
    return torch.tensor([parts.abs_K, parts.mass, float(parts.events), float(kappa[rollout.mask].abs().sum())],
                        dtype=torch.float64, device="cpu")  # plain numbers: the caller reduces them


def metrics_from_sums(sums: Tensor) -> dict[str, float]:
    """The logged metrics (:data:`STEP_KEYS`) from :func:`batch_sums` (summed over
    processes)."""
    s = dict(zip(SUMS, (float(x) for x in sums)))
    parts = SharedResidual(abs_K=s["shared_abs_K"], mass=s["shared_mass"], events=round(s["shared_events"]))
    return {
        SHARED_RESIDUAL: parts.value,
        SHARED_EVENTS: float(parts.events),
        # the shared events' mass is the |kappa| on their occurrences
        SHARED_KAPPA_SHARE: parts.mass / s["kappa_abs"] if s["kappa_abs"] > 0 else 0.0,
    }
