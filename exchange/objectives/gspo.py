"""GSPO (arXiv:2507.18071): one length-normalised sequence ratio per response.

    s_i = exp(1/|y_i| sum_t (l - l_old)),   J = 1/G sum_i min(s_i A_i, clip(s_i, 1-eps_l, 1+eps_r) A_i)

kappa[i,t] = A_i s_i 1[s_i unclipped] / (G L_i): 1/L_i breaks (E) on-policy (M3); the
weight s_i couples every token of the response (M1), and the sequence clip is
sign-dependent (M2).
"""

from __future__ import annotations

import torch
from torch import Tensor

from exchange.objectives._common import group_advantages
from exchange.objectives._spec import Expected, Objective
from exchange.rollout import Rollout


def gspo_loss(
    logprobs: Tensor,
    rollout: Rollout,
    *,
    eps_low: float = 3e-4,
    eps_high: float = 4e-4,
) -> Tensor:
    adv = group_advantages(rollout, scale="group")  # [N]
    m = rollout.fmask
    log_s = ((logprobs - rollout.old_logprobs) * m).sum(dim=1) / m.sum(dim=1)  # [N]
    s = torch.exp(log_s)  # [N] sequence ratio
    surrogate = torch.minimum(s * adv, torch.clamp(s, 1 - eps_low, 1 + eps_high) * adv)  # [N]
    return -surrogate.mean()


GSPO = Objective(
    name="gspo",
    loss=gspo_loss,
    summary="GSPO: geometric-mean sequence ratio with sequence clipping (3e-4/4e-4)",
    source="arXiv:2507.18071",
    defaults={"eps_low": 3e-4, "eps_high": 4e-4},
    expected={
        "on_policy": Expected.of(("exchangeable", "shared_cancellation"), ("M3",)),
        "off_policy": Expected.of(("exchangeable", "shared_cancellation"), ("M1", "M2", "M3")),
    },
)
