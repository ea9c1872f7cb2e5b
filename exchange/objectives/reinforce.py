"""REINFORCE-style objectives: RLOO, REINFORCE++ and ReMax.

RLOO (arXiv:2402.14740): ``A_i = R_i - mean_{j != i} R_j``, plain sequence log-prob,
no ratio, no clip: ``kappa[i,t] = A_i / G``. Zero-sum and exchangeable everywhere.

REINFORCE++ (arXiv:2501.03262): rewards whitened over all real tokens of the *batch*
(verl ``masked_whiten``), then PPO-clip with a token mean. The batch mean is not a
group mean, so advantages are not zero-sum within a group (M4), and being
token-weighted it moves with the lengths. The KL-to-go term of the paper is off here
(``kl_coef`` is not modelled; the reward-shaping KL is not a group comparison).

ReMax (arXiv:2310.10505): ``A_i = R_i - R(greedy response)``, REINFORCE on the
sequence log-prob, mean over responses. The form ``kappa = A_i / B`` is exchangeable,
but the greedy baseline is not the group mean: advantages are not zero-sum (M4), shared
tokens get ``sum_i (R_i - b)`` and equal rewards still move the policy.
"""

from __future__ import annotations

import torch
from torch import Tensor

from exchange.objectives._common import batch_whiten, rloo_advantages
from exchange.objectives._factored import (
    Factors,
    Params,
    factored_objective,
    fixed_norm,
    linear_surrogate,
    ppo_sign_free,
    ppo_surrogate,
    logprob_ratio,
)
from exchange.core.vocabulary import per_regime, verdict_of
from exchange.core.rollout import Rollout


def leave_one_out(rollout: Rollout, p: Params) -> Tensor:
    """Hook: RLOO advantages ``[N]``."""
    return rloo_advantages(rollout)


def per_group_size(logprobs: Tensor, rollout: Rollout, p: Params) -> Tensor:
    """Hook: ``1 / G`` of each response's group, ``[N]``."""
    return 1.0 / rollout.group_sizes.to(rollout.old_logprobs.dtype)


def whitened_rewards(rollout: Rollout, p: Params) -> Tensor:
    """Hook: rewards whitened over the batch's tokens (verl ``masked_whiten``), ``[N]``;
    ``rollout.advantages`` when given."""
    if rollout.advantages is not None:
        return rollout.advantages
    return batch_whiten(rollout.rewards, rollout)


def greedy_baseline_advantages(rollout: Rollout, p: Params) -> Tensor:
    """Hook: ``R_i - b_i``; ``b`` = ``rollout.baseline_rewards``, else the ``baseline`` parameter;
    ``rollout.advantages`` when given."""
    if rollout.advantages is not None:
        return rollout.advantages
    if rollout.baseline_rewards is not None:
        return rollout.rewards - rollout.baseline_rewards
    return rollout.rewards - torch.as_tensor(p["baseline"], dtype=rollout.rewards.dtype, device=rollout.rewards.device)


RLOO = factored_objective(
    "rloo",
    Factors(
        advantages=leave_one_out,
        ratio=logprob_ratio,
        surrogate=linear_surrogate,
        norm=per_group_size,
        sign_free=linear_surrogate,
        clip_level="none",
    ),
    summary="RLOO: leave-one-out baseline, REINFORCE on the sequence log-prob",
    source="arXiv:2402.14740 (Back to Basics)",
    expected=per_regime(verdict_of(), verdict_of()),
    notes="The paper folds a sequence KL into the reward; that shaping is not modelled here.",
)

# Token-level batch whitening: the centre is the batch's (not the group's own) and its
# statistics are token-weighted (one response's suffix length moves every advantage).
_BATCH_WHITENING = ("M4.length_weighted", "M4.foreign_centre")

REINFORCE_PP = factored_objective(
    "reinforce_pp",
    Factors(
        advantages=whitened_rewards,
        surrogate=ppo_surrogate,
        norm=fixed_norm("token-mean"),
        sign_free=ppo_sign_free,
    ),
    summary="REINFORCE++: rewards whitened over the batch's tokens, PPO-clip, token-mean",
    source="arXiv:2501.03262",
    defaults={"eps_low": 0.2, "eps_high": 0.2},
    expected=per_regime(verdict_of(*_BATCH_WHITENING), verdict_of("M2.sign_clip", *_BATCH_WHITENING)),
    notes="The paper's KL-to-go reward shaping is off (it makes A depend on the position).",
)

REMAX = factored_objective(
    "remax",
    Factors(
        advantages=greedy_baseline_advantages,
        ratio=logprob_ratio,
        surrogate=linear_surrogate,
        norm=fixed_norm("seq-mean-token-sum"),
        sign_free=linear_surrogate,
        clip_level="none",
    ),
    summary="ReMax: REINFORCE with the greedy response's reward as baseline (not zero-sum)",
    source="arXiv:2310.10505; verl compute_remax_outcome_advantage",
    defaults={"baseline": 0.0},
    # The greedy response's reward: a centre that is not the group's own, independent of
    # the sampled suffixes, so (E) holds.
    expected=per_regime(verdict_of("M4.foreign_centre"), verdict_of("M4.foreign_centre")),
    notes=(
        "The greedy reward comes from rollout.baseline_rewards [N] when present, else from the "
        "parameter baseline (default 0.0: a greedy response that scores 0). No IS ratio: the "
        "paper's estimator is on-policy REINFORCE, so both regimes give the same coefficients."
    ),
)
