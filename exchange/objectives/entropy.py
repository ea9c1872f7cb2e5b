"""Entropy-aware objectives: the 80/20 high-entropy mask and HAPO/EAPO reallocation.

Both read ``rollout.entropy`` ``[N, T]`` (the current policy's entropy at each token's
context; identical events carry identical values) and raise ``InvalidArgument`` without it.

``entropy_8020`` ("Beyond the 80/20 Rule", arXiv:2506.01939): DAPO with the gradient
kept only on tokens whose entropy is in the batch's top ``rho = 20%`` (TRL
``top_entropy_quantile``: keep iff ``H >= quantile(H_real, 1 - rho)``), normalised by all
real tokens as TRL does (whether the paper counts masked tokens is not verified).
The mask is a function of the event, the same for every copy, so (E) holds on-policy
(THEORY.md section 4, "an entropy mask computed from the context's own distribution");
DAPO's clip breaks it off-policy (M2).

``hapo`` (arXiv:2604.11056, EAPO in v1; THEORY.md section 6)::

    A_ca[i,t] = A_i + alpha sign(A_i) sg(clip(z_H[i,t], -|A_i|/phi, |A_i|/phi))

with ``alpha = 0.2``, ``phi = 2`` and ``z_H`` the standardised token entropy, then GRPO's
clipped surrogate on ``A_ca``. The added term has the sign of A whatever the event: a
shared event gets ``K_e ~ alpha c_e (n_pos - n_neg)``, so the per-token advantages are
not zero-sum (M4) and (C) breaks on-policy. Which tokens ``z_H`` is standardised over
is not stated in the sources we could read: ``z_scope="response"`` (default) uses each
response's own tokens, a response-level statistic (M5, the THEORY.md section 4 reading);
``z_scope="batch"`` uses every real token of the batch. The aggregation is verl's default
token-mean (the paper's was not retrieved).
"""

from __future__ import annotations

import torch
from torch import Tensor

from exchange.errors import InvalidArgument
from exchange.objectives._common import group_advantages, sign_free_trust_region
from exchange.objectives._factored import (
    Factors,
    Params,
    agg_norm,
    factored_objective,
    fixed_norm,
    ppo_sign_free,
    ppo_surrogate,
)
from exchange.core.vocabulary import per_regime, verdict_of
from exchange.objectives.grpo import scaled_advantages
from exchange.core.rollout import Rollout

Z_SCOPES = ("response", "batch")


def require_entropy(rollout: Rollout, who: str) -> Tensor:
    """``rollout.entropy`` ``[N, T]``, or a precise error naming the fix."""
    if rollout.entropy is None:
        raise InvalidArgument(
            f"objective {who!r} reads token entropies but rollout.entropy=None. Pass "
            "entropy [N, T] (the current policy's entropy at each token's context; identical "
            "events must carry identical values)."
        )
    return rollout.entropy


# ------------------------------------------------------------------ 80/20 mask
def high_entropy_mask(rollout: Rollout, rho: float) -> Tensor:
    """``[N, T]`` 1.0 where ``H >= quantile(H over real tokens, 1 - rho)``, else 0."""
    h = require_entropy(rollout, "entropy_8020")
    threshold = torch.quantile(h[rollout.mask], 1.0 - rho)
    return (h >= threshold).to(h.dtype)


def masked_ppo(rho: Tensor, adv: Tensor, rollout: Rollout, p: Params) -> Tensor:
    """Hook: DAPO's PPO-clip on the high-entropy tokens only."""
    return ppo_surrogate(rho, adv, rollout, p) * high_entropy_mask(rollout, p["rho"])


def masked_sign_free(rho: Tensor, adv: Tensor, rollout: Rollout, p: Params) -> Tensor:
    """Hook: the sign-free trust region on the high-entropy tokens only."""
    keep = sign_free_trust_region(rho, adv, 1 - p["eps_low"], 1 + p["eps_high"])
    return keep * high_entropy_mask(rollout, p["rho"])


ENTROPY_8020 = factored_objective(
    "entropy_8020",
    Factors(advantages=scaled_advantages, surrogate=masked_ppo, norm=fixed_norm("token-mean"), sign_free=masked_sign_free),
    summary="80/20 forking tokens: DAPO gradient on the top-20% entropy tokens of the batch",
    source="arXiv:2506.01939 (Beyond the 80/20 Rule); TRL top_entropy_quantile",
    defaults={"eps_low": 0.2, "eps_high": 0.28, "rho": 0.2},
    expected=per_regime(verdict_of(), verdict_of("M2.sign_clip")),
    notes="Normalised by all real tokens (TRL); whether the paper excludes masked tokens is unverified.",
)


# ------------------------------------------------------------------ HAPO/EAPO
def standardised_entropy(rollout: Rollout, scope: str, eps: float = 1e-6) -> Tensor:
    """``z_H`` ``[N, T]``: entropy minus its mean over ``scope``, over its std (+eps); 0 on padding."""
    if scope not in Z_SCOPES:
        raise InvalidArgument(f"z_scope={scope!r} is not one of {Z_SCOPES}.")
    h = require_entropy(rollout, "hapo")
    m = rollout.fmask.to(h.dtype)
    if scope == "response":
        count = m.sum(dim=1, keepdim=True)  # [N, 1]
        mean = (h * m).sum(dim=1, keepdim=True) / count
        var = (((h - mean) * m) ** 2).sum(dim=1, keepdim=True) / count
    else:
        count = m.sum()
        mean = (h * m).sum() / count
        var = (((h - mean) * m) ** 2).sum() / count
    return (h - mean) / (torch.sqrt(var) + eps) * m


def hapo_advantages(rollout: Rollout, p: Params) -> Tensor:
    """Hook: ``A + alpha sign(A) sg(clip(z_H, -|A|/phi, |A|/phi))``, ``[N, T]``."""
    adv = group_advantages(rollout)  # [N], or [N, T] when rollout.advantages is per token
    adv = adv[:, None] if adv.dim() == 1 else adv
    z = standardised_entropy(rollout, p["z_scope"])  # [N, T]
    bound = adv.abs() / p["phi"]
    shift = torch.maximum(torch.minimum(z, bound), -bound).detach()
    return adv + p["alpha"] * torch.sign(adv) * shift


HAPO = factored_objective(
    "hapo",
    Factors(
        advantages=hapo_advantages,
        surrogate=ppo_surrogate,
        norm=agg_norm,
        sign_free=ppo_sign_free,
    ),
    summary="HAPO/EAPO: advantage reallocated by sign(A) times clipped entropy z-score (alpha=0.2, phi=2)",
    source="arXiv:2604.11056 (EAPO in v1, HAPO in v2), formula via a third-party reading note",
    defaults={"alpha": 0.2, "phi": 2.0, "z_scope": "response", "eps_low": 0.2, "eps_high": 0.2, "loss_agg_mode": "token-mean"},
    # sign(A) times an entropy shift: the group stops summing to zero (M4), and the shift
    # is a within-response statistic (M5).
    expected=per_regime(verdict_of("M4.not_zero_sum", "M5.response_statistics"),
                        verdict_of("M2.sign_clip", "M4.not_zero_sum", "M5.response_statistics")),
    notes=(
        "Formula transcribed by a third-party note from the v1 PDF (not checked against it). The "
        "z-score reference set is not stated: z_scope='response' (default) or 'batch'; the "
        "aggregation (token-mean) and eps=0.2 are verl defaults, not the paper's."
    ),
)


hapo_advantages.per_token = True  # type: ignore[attr-defined]  # read by adv_orthogonal's check
