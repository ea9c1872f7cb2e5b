"""REINFORCE-style objectives: RLOO and REINFORCE++.

RLOO (arXiv:2402.14740): ``A_i = R_i - mean_{j != i} R_j``, plain sequence log-prob,
no ratio, no clip: ``kappa[i,t] = A_i / G``. Zero-sum and exchangeable everywhere.

REINFORCE++ (arXiv:2501.03262): rewards whitened over all real tokens of the *batch*
(verl ``masked_whiten``), then PPO-clip with a token mean. The batch mean is not a
group mean, so advantages are not zero-sum within a group (M4), and being
token-weighted it moves with the lengths. The KL-to-go term of the paper is off here
(``kl_coef`` is not modelled; the reward-shaping KL is not a group comparison).
"""

from __future__ import annotations

import torch
from torch import Tensor

from exchange.objectives._common import aggregate, policy_ratio, ppo_clip, rloo_advantages
from exchange.objectives._spec import Expected, Objective
from exchange.rollout import Rollout


def rloo_loss(logprobs: Tensor, rollout: Rollout) -> Tensor:
    adv = rloo_advantages(rollout)  # [N]
    seq_logprob = (logprobs * rollout.fmask).sum(dim=1)  # [N] log pi(y_i | x)
    return -(adv * seq_logprob / rollout.group_sizes.to(adv.dtype)).sum()


def batch_whiten(values: Tensor, rollout: Rollout, eps: float = 1e-8) -> Tensor:
    """verl ``masked_whiten`` of a per-response value over every real token: ``[N]``.

    Mean and unbiased variance are token-weighted: response i counts L_i times.
    """
    w = rollout.lengths.to(values.dtype)  # [N]
    n_tok = w.sum()
    mean = (w * values).sum() / n_tok
    var = (w * (values - mean) ** 2).sum() / (n_tok - 1)
    return (values - mean) * torch.rsqrt(var + eps)


def reinforce_pp_loss(
    logprobs: Tensor,
    rollout: Rollout,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
) -> Tensor:
    adv = batch_whiten(rollout.rewards, rollout)  # [N]
    ratio = policy_ratio(logprobs, rollout)  # [N, T]
    surrogate = ppo_clip(ratio, adv[:, None], eps_low, eps_high)  # [N, T]
    return -aggregate(surrogate, rollout, "token-mean")


RLOO = Objective(
    name="rloo",
    loss=rloo_loss,
    summary="RLOO: leave-one-out baseline, REINFORCE on the sequence log-prob",
    source="arXiv:2402.14740 (Back to Basics)",
    expected={"on_policy": Expected.of(), "off_policy": Expected.of()},
)

_BATCH_BREAKS = ("zero_sum", "exchangeable", "shared_cancellation", "null_on_equal_rewards")

REINFORCE_PP = Objective(
    name="reinforce_pp",
    loss=reinforce_pp_loss,
    summary="REINFORCE++: rewards whitened over the batch's tokens, PPO-clip, token-mean",
    source="arXiv:2501.03262",
    defaults={"eps_low": 0.2, "eps_high": 0.2},
    expected={
        "on_policy": Expected.of(_BATCH_BREAKS, ("M4",)),
        "off_policy": Expected.of(_BATCH_BREAKS, ("M2", "M4")),
    },
)
