"""GRPO and Dr. GRPO: group-mean advantages in the PPO-clip surrogate.

GRPO (DeepSeekMath, arXiv:2402.03300)::

    J = 1/G sum_i 1/|o_i| sum_t min(r A_i, clip(r, 1-eps, 1+eps) A_i),
    A_i = (R_i - mean R) / std R

kappa[i,t] = A_i r 1[unclipped] / (G L_i): the 1/L_i weight breaks (E) on-policy (M3,
T3) and the sign-dependent clip breaks it off-policy (M2, T4).

Dr. GRPO (arXiv:2503.20783) drops the std and divides by a constant (the generation
budget) instead of L_i: (E) on-policy, M2 off-policy.
"""

from __future__ import annotations

from torch import Tensor

from exchange.objectives._common import aggregate, group_advantages, policy_ratio, ppo_clip
from exchange.objectives._spec import Expected, Objective
from exchange.rollout import Rollout


def grpo_loss(
    logprobs: Tensor,
    rollout: Rollout,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    scale: str = "group",
    loss_agg_mode: str = "seq-mean-token-mean",
) -> Tensor:
    adv = group_advantages(rollout, scale=scale)  # [N]
    ratio = policy_ratio(logprobs, rollout)  # [N, T]
    surrogate = ppo_clip(ratio, adv[:, None], eps_low, eps_high)  # [N, T]
    return -aggregate(surrogate, rollout, loss_agg_mode)


def dr_grpo_loss(
    logprobs: Tensor,
    rollout: Rollout,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    max_length: float = 1024.0,
) -> Tensor:
    adv = group_advantages(rollout, scale="none")  # [N]
    ratio = policy_ratio(logprobs, rollout)  # [N, T]
    surrogate = ppo_clip(ratio, adv[:, None], eps_low, eps_high)  # [N, T]
    return -aggregate(surrogate, rollout, "seq-mean-token-sum-norm", max_length=max_length)


_CLIP_BREAKS = ("exchangeable", "shared_cancellation")

GRPO = Objective(
    name="grpo",
    loss=grpo_loss,
    summary="GRPO: PPO-clip, group mean/std advantages, per-response token mean (1/L_i)",
    source="arXiv:2402.03300 (DeepSeekMath)",
    defaults={"eps_low": 0.2, "eps_high": 0.2, "scale": "group", "loss_agg_mode": "seq-mean-token-mean"},
    expected={
        "on_policy": Expected.of(_CLIP_BREAKS, ("M3",)),
        "off_policy": Expected.of(_CLIP_BREAKS, ("M2", "M3")),
    },
)

DR_GRPO = Objective(
    name="dr_grpo",
    loss=dr_grpo_loss,
    summary="Dr. GRPO: no std, token sum over a constant budget (restores (E) on-policy)",
    source="arXiv:2503.20783 (Understanding R1-Zero-Like Training)",
    defaults={"eps_low": 0.2, "eps_high": 0.2, "max_length": 1024.0},
    expected={
        "on_policy": Expected.of(),
        "off_policy": Expected.of(_CLIP_BREAKS, ("M2",)),
    },
)
