"""Shared pieces of the catalog: advantages, ratios, clipping, aggregation.

Each helper is one formula from ../shared/reference/objectives.md, with the shapes in
its docstring. Objectives combine them; nothing here knows about the checker.
"""

from __future__ import annotations

import torch
from torch import Tensor

from exchange.errors import InvalidArgument
from exchange.rollout import Rollout

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm", "token-sum")
SCALES = ("group", "none")


def group_advantages(rollout: Rollout, scale: str = "group", eps: float = 1e-4) -> Tensor:
    """GRPO outcome advantage ``A_i = (R_i - mean_g R) / (std_g R + eps)``, ``[N]``.

    ``scale="none"`` drops the std (Dr. GRPO). The std is Bessel-corrected, as in TRL.
    """
    if scale not in SCALES:
        raise InvalidArgument(f"scale={scale!r} is not one of {SCALES}.")
    centred = rollout.rewards - rollout.group_mean(rollout.rewards)
    if scale == "none":
        return centred
    return centred / (rollout.group_std(rollout.rewards) + eps)


def rloo_advantages(rollout: Rollout) -> Tensor:
    """Leave-one-out baseline ``A_i = R_i - mean_{j != i} R_j = G/(G-1) (R_i - mean R)``."""
    g = rollout.group_sizes.to(rollout.rewards.dtype)
    return g / (g - 1) * (rollout.rewards - rollout.group_mean(rollout.rewards))


def policy_ratio(logprobs: Tensor, rollout: Rollout) -> Tensor:
    """Token importance ratio ``r[i,t] = exp(l - l_old)``, ``[N, T]``."""
    return torch.exp(logprobs - rollout.old_logprobs)


def ppo_clip(ratio: Tensor, adv: Tensor, eps_low: float, eps_high: float) -> Tensor:
    """PPO surrogate ``min(r A, clip(r, 1-eps_low, 1+eps_high) A)``, ``[N, T]``.

    ``adv`` broadcasts against ``ratio`` (``[N, 1]`` or ``[N, T]``). The gradient vanishes
    when ``A > 0, r > 1+eps_high`` or ``A < 0, r < 1-eps_low``: sign-dependent (M2, T4).
    """
    return torch.minimum(ratio * adv, torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * adv)


def aggregate(per_token: Tensor, rollout: Rollout, mode: str, max_length: float | None = None) -> Tensor:
    """Reduce ``per_token: [N, T]`` to a scalar as verl's ``agg_loss`` does.

    - ``token-mean``: sum / number of real tokens in the batch (DAPO; one constant).
    - ``seq-mean-token-mean``: mean over responses of each response's token mean
      (GRPO; weight ``1/(N L_i)``, breaks (E): M3).
    - ``seq-mean-token-sum``: mean over responses of token sums (weight ``1/N``).
    - ``seq-mean-token-sum-norm``: token sum / (N * max_length) (Dr. GRPO; a constant).
    - ``token-sum``: plain sum.
    """
    m = rollout.fmask.to(per_token.dtype)
    masked = per_token * m
    n = rollout.n
    if mode == "token-mean":
        return masked.sum() / m.sum()
    if mode == "seq-mean-token-mean":
        return (masked.sum(dim=1) / m.sum(dim=1)).sum() / n
    if mode == "seq-mean-token-sum":
        return masked.sum() / n
    if mode == "seq-mean-token-sum-norm":
        norm = float(rollout.tokens.shape[1]) if max_length is None else float(max_length)
        return masked.sum() / (n * norm)
    if mode == "token-sum":
        return masked.sum()
    raise InvalidArgument(f"loss_agg_mode={mode!r} is not one of {AGG_MODES}.")
