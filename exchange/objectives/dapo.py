"""DAPO (arXiv:2503.14476): clip-higher and a token-level group normaliser.

    J = 1/sum_j |o_j| sum_i sum_t min(r A_i, clip(r, 1-eps_low, 1+eps_high) A_i)

One normaliser for the batch keeps (E) on-policy; the sign-dependent clip, with
eps_low != eps_high, breaks it off-policy (M2, T4). Dynamic sampling and overlong
shaping act on the data and the reward, not on the coefficients.
"""

from __future__ import annotations

from torch import Tensor

from exchange.objectives._common import aggregate, group_advantages, policy_ratio, ppo_clip
from exchange.objectives._spec import Expected, Objective
from exchange.rollout import Rollout


def dapo_loss(
    logprobs: Tensor,
    rollout: Rollout,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
) -> Tensor:
    adv = group_advantages(rollout, scale="group")  # [N]
    ratio = policy_ratio(logprobs, rollout)  # [N, T]
    surrogate = ppo_clip(ratio, adv[:, None], eps_low, eps_high)  # [N, T]
    return -aggregate(surrogate, rollout, "token-mean")


DAPO = Objective(
    name="dapo",
    loss=dapo_loss,
    summary="DAPO: clip-higher (0.2/0.28), token-mean over the batch",
    source="arXiv:2503.14476",
    defaults={"eps_low": 0.2, "eps_high": 0.28},
    expected={
        "on_policy": Expected.of(),
        "off_policy": Expected.of(("exchangeable", "shared_cancellation"), ("M2",)),
    },
)
