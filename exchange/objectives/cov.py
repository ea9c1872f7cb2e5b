"""Clip-Cov and KL-Cov ("The Entropy Mechanism of RL for Reasoning LMs", arXiv:2505.22617).

Both rank tokens by the detached batch covariance
``Cov[i,t] = (A_i - mean A)(l[i,t] - mean l)`` (means over the batch's real tokens), as
verl's ``clip_cov`` / ``kl_cov`` policy losses (adapted from PRIME-RL's code):

- ``clip_cov``: PPO-clip; among the tokens the clip has not already cut whose covariance
  lies in ``(lb, ub)``, a random ``max(1, floor(ratio N_tok))`` of them get no gradient.
  Copies of one event share ``l`` but their advantages differ, so only copies whose
  advantage sits on the right side of the mean are eligible: pruning by advantage,
  even on-policy (M2), also in a group of identical responses (zero_sum). Random: the
  ``seed`` parameter makes every call reproducible; the pick is by batch position, so it
  is not permutation invariant.
- ``kl_cov``: the *unclipped* surrogate ``A r``; the top ``max(1, floor(ratio N_tok))``
  tokens by covariance get an extra ``kl_coef |l - l_old|`` penalty. On-policy the
  penalty's gradient is 0 (``|x|`` at 0), so (E) holds; off-policy the penalised copies
  are chosen by advantage and get a restoring force the others lack (M2); tokens of an
  equal-reward group can be chosen (null_on_equal_rewards) and ties go by position
  (permutation_invariant).

Neither is in the factored form: the selection couples every token of the batch and
depends on the advantages, so no restoring transformation applies.
"""

from __future__ import annotations

import torch
from torch import Tensor

from exchange.objectives._common import aggregate, group_advantages, per_token, policy_ratio
from exchange.objectives.objective import Objective
from exchange.core.vocabulary import per_regime, verdict_of
from exchange.core.rollout import Rollout


def token_covariance(logprobs: Tensor, adv: Tensor, rollout: Rollout) -> Tensor:
    """Detached ``(A - mean A)(l - mean l)`` over the real tokens, ``[N, T]`` (``-inf`` on padding)."""
    m = rollout.mask
    a = per_token(adv, rollout)
    lp = logprobs.detach()
    cov = (a - a[m].mean()) * (lp - lp[m].mean())
    return torch.where(m, cov, torch.full_like(cov, -torch.inf))


def _n_selected(rollout: Rollout, ratio: float) -> int:
    return max(1, int(ratio * int(rollout.n_tokens)))


def clip_cov_loss(
    logprobs: Tensor,
    rollout: Rollout,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    clip_cov_ratio: float = 2e-4,
    clip_cov_lb: float = 1.0,
    clip_cov_ub: float = 5.0,
    seed: int = 0,
) -> Tensor:
    adv = group_advantages(rollout)  # [N]
    ratio = policy_ratio(logprobs, rollout)  # [N, T]
    a = per_token(adv, rollout)
    pg1 = -a * ratio
    pg2 = -a * torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    cov = token_covariance(logprobs, adv, rollout)
    cov = torch.where(pg2 > pg1, torch.full_like(cov, -torch.inf), cov)  # already clipped
    eligible = ((cov > clip_cov_lb) & (cov < clip_cov_ub) & rollout.mask).flatten().nonzero().flatten()
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    # the pick is drawn on the CPU generator whatever the device: the same seed picks
    # the same tokens on every device
    order = torch.randperm(eligible.numel(), generator=gen, device="cpu").to(eligible.device)
    pick = eligible[order[: _n_selected(rollout, clip_cov_ratio)]]
    keep = torch.ones(logprobs.numel(), dtype=logprobs.dtype, device=logprobs.device)
    keep[pick] = 0.0
    per_token_loss = torch.maximum(pg1, pg2) * keep.view(logprobs.shape)
    return aggregate(per_token_loss, rollout, "token-mean")


def kl_cov_loss(
    logprobs: Tensor,
    rollout: Rollout,
    *,
    kl_cov_ratio: float = 2e-4,
    kl_coef: float = 0.1,
) -> Tensor:
    adv = group_advantages(rollout)  # [N]
    ratio = policy_ratio(logprobs, rollout)  # [N, T]
    per_token_loss = -per_token(adv, rollout) * ratio
    cov = token_covariance(logprobs, adv, rollout).flatten()
    top = torch.topk(cov, _n_selected(rollout, kl_cov_ratio)).indices
    penalty = torch.zeros(logprobs.numel(), dtype=logprobs.dtype, device=logprobs.device)
    penalty[top] = 1.0
    per_token_loss = per_token_loss + kl_coef * penalty.view(logprobs.shape) * (logprobs - rollout.old_logprobs).abs()
    return aggregate(per_token_loss, rollout, "token-mean")


# THEORY.md section 4 (attribution rules): a selection by the advantage is M2, and what
# it does to the selected occurrences adds its own mechanism. Clip-Cov prunes the
# selected copies after the advantages were centred (M4: a group of identical responses
# no longer sums to zero); the random pick is by batch position (P). KL-Cov adds
# kl_coef |l - l_old| to the selected tokens whatever their own advantage (M6, tied
# groups included); torch.topk breaks covariance ties by position (P). On-policy the
# penalty's gradient is 0 (|x| at 0): nothing.
_CLIP_COV = verdict_of("M2.advantage_selection", "M4.not_zero_sum")
_KL_COV_OFF = verdict_of("M2.advantage_selection", "M6.event_term")

_COV_NOTES = (
    "Selection sizes round down as in verl: at the default ratio 2e-4 a small batch selects "
    "one token. The covariance uses the group z-score advantage."
)

CLIP_COV = Objective(
    name="clip_cov",
    loss=clip_cov_loss,
    summary="Clip-Cov: PPO-clip and zero gradient on random high-covariance tokens (seeded)",
    source="arXiv:2505.22617; verl 0.9.1 'clip_cov'",
    defaults={
        "eps_low": 0.2,
        "eps_high": 0.2,
        "clip_cov_ratio": 2e-4,
        "clip_cov_lb": 1.0,
        "clip_cov_ub": 5.0,
        "seed": 0,
    },
    expected=per_regime(_CLIP_COV, _CLIP_COV),
    notes=_COV_NOTES,
)

KL_COV = Objective(
    name="kl_cov",
    loss=kl_cov_loss,
    summary="KL-Cov: unclipped A r plus kl_coef |l - l_old| on the top-covariance tokens",
    source="arXiv:2505.22617; verl 0.9.1 'kl_cov'",
    defaults={"kl_cov_ratio": 2e-4, "kl_coef": 0.1},
    expected=per_regime(verdict_of(), _KL_COV_OFF),
    notes=_COV_NOTES + " kl_coef=0.1 is verl 0.9.1's ppo_kl_coef default (the reference notes say 1 elsewhere).",
)
