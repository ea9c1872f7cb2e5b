"""CISPO (MiniMax-M1, arXiv:2506.13585): a clipped, detached IS weight on every token.

    J = 1/sum_j |o_j| sum_i sum_t sg(clip(r, 1-eps_low, 1+eps_high)) A_i l[i,t]

kappa[i,t] = sg(clip(r)) A_i / N_tok. The weight depends on the event's own ratio and
never on the sign of A_i, so (E) holds on- and off-policy (T5). MiniMax tunes only the
upper bound; the default ``eps_low=None`` means no lower bound (TRL's one-sided cap);
verl clamps both sides (pass ``eps_low``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from exchange.objectives._common import aggregate, group_advantages, policy_ratio
from exchange.objectives._spec import Expected, Objective
from exchange.rollout import Rollout


def cispo_loss(
    logprobs: Tensor,
    rollout: Rollout,
    *,
    eps_low: float | None = None,
    eps_high: float = 0.28,
) -> Tensor:
    adv = group_advantages(rollout, scale="group")  # [N]
    ratio = policy_ratio(logprobs, rollout).detach()  # [N, T], stop-gradient weight
    low = None if eps_low is None else 1 - eps_low
    weight = torch.clamp(ratio, min=low, max=1 + eps_high)  # [N, T]
    return -aggregate(weight * adv[:, None] * logprobs, rollout, "token-mean")


CISPO = Objective(
    name="cispo",
    loss=cispo_loss,
    summary="CISPO: detached truncated IS weight sg(min(r, 1+eps)) times A log pi, token-mean",
    source="arXiv:2506.13585 (MiniMax-M1)",
    defaults={"eps_low": None, "eps_high": 0.28},
    expected={"on_policy": Expected.of(), "off_policy": Expected.of()},
)
