"""CISPO (MiniMax-M1, arXiv:2506.13585): a clipped, detached IS weight on every token.

    J = 1/sum_j |o_j| sum_i sum_t sg(clip(r, 1-eps_low, 1+eps_high)) A_i l[i,t]

kappa[i,t] = sg(clip(r)) A_i / N_tok. The weight depends on the event's own ratio and
never on the sign of A_i, so (E) holds on- and off-policy (T5). No token is masked.

Two variants, because the libraries disagree:

- ``cispo``: one-sided cap ``min(r, 1+eps_high)`` (MiniMax tunes only the upper bound;
  TRL ``loss_type="cispo"`` uses ``min(r, epsilon_high)`` with an absolute cap, i.e.
  ``epsilon_high = 1 + eps_high`` here). Pass ``eps_low`` for a lower bound.
- ``cispo_verl``: verl ``cispo``: two-sided ``clip(r, 1-eps_low, 1+eps_high)`` with
  verl's ``clip_ratio_low/high`` defaults 0.2/0.2, token-mean.
"""

from __future__ import annotations

import torch
from torch import Tensor

from exchange.core.vocabulary import per_regime, verdict_of
from exchange.objectives._factored import Factors, Params, factored_objective, fixed_norm
from exchange.objectives.grpo import scaled_advantages
from exchange.core.rollout import Rollout


def truncated_is_surrogate(rho: Tensor, adv: Tensor, rollout: Rollout, p: Params) -> Tensor:
    """Hook: ``sg(clip(rho)) A log(rho)``: gradient ``clip(rho) A`` for either sign of A."""
    low = None if p.get("eps_low") is None else 1 - p["eps_low"]
    weight = torch.clamp(rho.detach(), min=low, max=1 + p["eps_high"])  # [N, T]
    return weight * adv * torch.log(rho)


_FACTORS = Factors(
    advantages=scaled_advantages,
    surrogate=truncated_is_surrogate,
    norm=fixed_norm("token-mean"),
    sign_free=truncated_is_surrogate,  # already a function of the ratio alone
)

CISPO = factored_objective(
    "cispo",
    _FACTORS,
    summary="CISPO: detached truncated IS weight sg(min(r, 1+eps)) times A log pi, token-mean",
    source="arXiv:2506.13585 (MiniMax-M1); TRL loss_type='cispo' (one-sided cap)",
    defaults={"eps_low": None, "eps_high": 0.28},
    expected=per_regime(verdict_of(), verdict_of()),
    notes="MiniMax's numeric eps_high was not retrieved; 0.28 is DAPO's clip-higher value.",
)

CISPO_VERL = factored_objective(
    "cispo_verl",
    _FACTORS,
    summary="CISPO as in verl: two-sided sg(clip(r, 0.8, 1.2)) A log pi, token-mean",
    source="arXiv:2506.13585; verl 0.9.1 core_algos.py compute_policy_loss 'cispo'",
    defaults={"eps_low": 0.2, "eps_high": 0.2},
    expected=per_regime(verdict_of(), verdict_of()),
)
