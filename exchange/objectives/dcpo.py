"""DCPO (Dynamic Clipping Policy Optimization, arXiv:2509.02333): probability-dependent clip bounds.

The trust region of a token depends on its behaviour probability ``q = pi_old``::

    low(q)  = 1/2 + 1/2 sqrt(max(1 - 4 eps_low / q, 0))
    high(q) = min(1/2 + 1/2 sqrt(1 + 4 eps_high / q), max(c, 10))

used in the PPO min/clip plus the dual clip ``c`` for A < 0, summed over tokens (the
code's "only-token-mean" mode is a plain token sum, weight 1).

``q`` is the event's own probability, identical for every copy, so the bounds are
event-level; the clip test still depends on the sign of A: M2 off-policy. On-policy
(E) holds.

What is left out (honestly): Smooth Advantage Standardisation mixes the current group's
z-scores with the prompt's cumulative statistics over earlier visits; a ``Rollout`` has
no history, so this is SAS at the first visit, which equals GRPO's group z-score. At
later visits SAS is not zero-sum (M4) and all-equal groups get a non-zero push. The
defaults follow the authors' recipe (``CLIP_RATIO_HIGH=0.28``, ``CLIP_RATIO_C=10``) and
verl's ``clip_ratio_low=0.2`` (the recipe does not set it).
"""

from __future__ import annotations

import torch
from torch import Tensor

from exchange.core.vocabulary import per_regime, verdict_of
from exchange.objectives._common import sign_free_trust_region
from exchange.objectives._factored import Factors, Params, factored_objective, fixed_norm
from exchange.objectives.grpo import scaled_advantages
from exchange.core.rollout import Rollout


def dynamic_bounds(rollout: Rollout, p: Params) -> tuple[Tensor, Tensor]:
    """``(low, high)`` ``[N, T]`` from the behaviour probability of each token."""
    q = torch.exp(rollout.old_logprobs)
    low = 0.5 + 0.5 * torch.sqrt(torch.clamp(1 - 4 * p["eps_low"] / q, min=0.0))
    high = torch.clamp(0.5 + 0.5 * torch.sqrt(1 + 4 * p["eps_high"] / q), max=max(p["clip_c"], 10.0))
    return low, high


def dcpo_surrogate(rho: Tensor, adv: Tensor, rollout: Rollout, p: Params) -> Tensor:
    """Hook: PPO min/clip with the dynamic bounds, dual clip ``c`` for A < 0 (M2)."""
    low, high = dynamic_bounds(rollout, p)
    clipped = torch.minimum(rho * adv, torch.minimum(torch.maximum(rho, low), high) * adv)
    return torch.where(adv < 0, torch.maximum(clipped, p["clip_c"] * adv), clipped)


def dcpo_sign_free(rho: Tensor, adv: Tensor, rollout: Rollout, p: Params) -> Tensor:
    """Hook: keep the gradient iff ``low(q) <= rho <= high(q)``, for both signs."""
    low, high = dynamic_bounds(rollout, p)
    return sign_free_trust_region(rho, adv, low, high)


DCPO = factored_objective(
    "dcpo",
    Factors(advantages=scaled_advantages, surrogate=dcpo_surrogate, norm=fixed_norm("token-sum"), sign_free=dcpo_sign_free),
    summary="DCPO: clip bounds from the token's old probability, dual clip c=10, token sum",
    source="arXiv:2509.02333; authors' verl code (get_clip_low_high, compute_policy_loss_dcpo)",
    defaults={"eps_low": 0.2, "eps_high": 0.28, "clip_c": 10.0},
    expected=per_regime(verdict_of(), verdict_of("M2.sign_clip")),
    notes=(
        "Smooth Advantage Standardisation needs the prompt's history, which a Rollout lacks: "
        "this is its first visit (= group z-score). Later visits break zero-sum (M4)."
    ),
)
