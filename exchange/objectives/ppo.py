"""Vanilla PPO-clip with dual clip (arXiv:1707.06347; dual clip arXiv:1912.09729), as verl's
``vanilla`` policy loss on group advantages::

    S = min(r A, clip(r, 1-eps_low, 1+eps_high) A);  for A < 0: S = max(S, c A)

with GRPO's group mean/std advantages (verl's ``grpo`` estimator) and verl's default
token-mean. kappa = A_i r / N_tok, zero when (A>0, r>1+eps_high), (A<0, r<1-eps_low) or
(A<0, r>c): every rule depends on the sign of A (M2 off-policy). On-policy (E) holds.
"""

from __future__ import annotations

from torch import Tensor

from exchange.core.vocabulary import per_regime, verdict_of
from exchange.objectives._common import ppo_dual_clip
from exchange.objectives._factored import Factors, Params, factored_objective, fixed_norm, ppo_sign_free
from exchange.objectives.grpo import scaled_advantages
from exchange.core.rollout import Rollout


def dual_clip_surrogate(rho: Tensor, adv: Tensor, rollout: Rollout, p: Params) -> Tensor:
    """Hook: PPO-clip plus the dual clip ``c`` for negative advantages."""
    return ppo_dual_clip(rho, adv, p["eps_low"], p["eps_high"], p["clip_c"])


PPO = factored_objective(
    "ppo",
    Factors(
        advantages=scaled_advantages,
        surrogate=dual_clip_surrogate,
        norm=fixed_norm("token-mean"),
        sign_free=ppo_sign_free,
    ),
    summary="PPO-clip with dual clip c=3 (verl 'vanilla'), group advantages, token-mean",
    source="arXiv:1707.06347 (PPO), arXiv:1912.09729 (dual clip) [recall]; verl 0.9.1 'vanilla'",
    defaults={"eps_low": 0.2, "eps_high": 0.2, "clip_c": 3.0},
    expected=per_regime(verdict_of(), verdict_of("M2.sign_clip")),
    notes="PPO proper uses GAE with a critic; the group advantage here is how verl pairs 'vanilla' with GRPO.",
)
