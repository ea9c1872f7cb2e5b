"""GPG (Group Policy Gradient, arXiv:2504.02546): plain REINFORCE on the group advantage.

    L = -1/N_tok sum_i sum_t A_i l[i,t],   A_i = alpha (R_i - mean_g R) / F_norm

No ratio, no clip, no KL: kappa[i,t] = A_i / N_tok on- and off-policy, so (E) always
holds. ``alpha`` rescales for groups that carry no signal; it is one positive constant
for the batch. The paper writes ``alpha = B / (B - M)`` (M invalid samples); verl's code
computes ``alpha = B / #(responses with a non-zero reward)``. This follows verl's code;
either way alpha is a batch constant and the verdicts do not change. ``F_norm = 1``.
"""

from __future__ import annotations

from torch import Tensor

from exchange.core.vocabulary import per_regime, verdict_of
from exchange.objectives._factored import (
    Factors,
    Params,
    factored_objective,
    fixed_norm,
    linear_surrogate,
    logprob_ratio,
)
from exchange.core.rollout import Rollout


def gpg_advantages(rollout: Rollout, p: Params) -> Tensor:
    """Hook: ``alpha (R - mean_g R)``, alpha = N / max(1, #nonzero rewards), ``[N]``;
    ``rollout.advantages`` when given (GPG's alpha is part of its estimator)."""
    if rollout.advantages is not None:
        return rollout.advantages
    r = rollout.rewards
    nonzero = (r != 0).to(r.dtype).sum().clamp_min(1.0)
    alpha = rollout.n / nonzero
    return alpha * (r - rollout.group_mean(r))


GPG = factored_objective(
    "gpg",
    Factors(
        advantages=gpg_advantages,
        ratio=logprob_ratio,
        surrogate=linear_surrogate,
        norm=fixed_norm("token-mean"),
        sign_free=linear_surrogate,
        clip_level="none",
    ),
    summary="GPG: REINFORCE with group-centred rewards times a batch constant, token-mean",
    source="arXiv:2504.02546; verl compute_gpg_outcome_advantage / 'gpg' policy loss",
    expected=per_regime(verdict_of(), verdict_of()),
    notes="alpha follows verl's code (B / #nonzero rewards); the paper's B/(B-M) differs but is also a batch constant.",
)
