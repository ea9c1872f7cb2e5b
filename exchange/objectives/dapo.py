"""DAPO (arXiv:2503.14476): clip-higher and a token-level group normaliser.

    J = 1/sum_j |o_j| sum_i sum_t min(r A_i, clip(r, 1-eps_low, 1+eps_high) A_i)

One normaliser for the batch keeps (E) on-policy; the sign-dependent clip, with
eps_low != eps_high, breaks it off-policy (M2, T4). Dynamic sampling and overlong
shaping act on the data and the reward, not on the coefficients.
"""

from __future__ import annotations

from exchange.core.vocabulary import per_regime, verdict_of
from exchange.objectives._factored import Factors, factored_objective, fixed_norm, ppo_sign_free, ppo_surrogate
from exchange.objectives.grpo import scaled_advantages

DAPO_FACTORS = Factors(
    advantages=scaled_advantages, surrogate=ppo_surrogate, norm=fixed_norm("token-mean"), sign_free=ppo_sign_free
)

DAPO = factored_objective(
    "dapo",
    DAPO_FACTORS,
    summary="DAPO: clip-higher (0.2/0.28), token-mean over the batch",
    source="arXiv:2503.14476",
    defaults={"eps_low": 0.2, "eps_high": 0.28, "scale": "group", "delta": None},
    expected=per_regime(verdict_of(), verdict_of("M2.sign_clip")),
    notes="Dynamic sampling and overlong reward shaping change the data and the rewards, not the loss; not modelled.",
)
