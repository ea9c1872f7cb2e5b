"""GSPO and GSPO-token (arXiv:2507.18071): one length-normalised sequence ratio per response.

GSPO::

    s_i = exp(1/|y_i| sum_t (l - l_old)),
    J = 1/G sum_i min(s_i A_i, clip(s_i, 1-eps_l, 1+eps_r) A_i)

kappa[i,t] = A_i s_i 1[s_i unclipped] / (G L_i): 1/L_i breaks (E) on-policy (M3); the
weight s_i couples every token of the response (M1), and the sequence clip is
sign-dependent (M2).

GSPO-token (TRL PR 3820, ms-swift ``sequence_token``) uses the token ratio
``s_i,t = sg(s_i) pi(y_i,t) / sg(pi(y_i,t))`` in a per-token clip with a per-response
token mean: the same coefficient as GSPO when A is per response (the clip decision
sees the value s_i, so it is still per response).

In the factored form the per-response weight is ``w_i = s_i / (G L_i)`` (the clip is a
per-response gate on top of it), so Min-Replace gives the paper's clip-free estimator.
"""

from __future__ import annotations

import torch
from torch import Tensor

from exchange.core.vocabulary import per_regime, verdict_of
from exchange.objectives._common import sequence_log_ratio
from exchange.objectives._factored import (
    Factors,
    Params,
    factored_objective,
    fixed_norm,
    ppo_sign_free,
    ppo_surrogate,
)
from exchange.objectives.grpo import scaled_advantages
from exchange.core.rollout import Rollout


def sequence_ratio(logprobs: Tensor, rollout: Rollout, p: Params) -> Tensor:
    """Hook: ``s_i`` ``[N]`` (gradient ``s_i / L_i`` per token)."""
    return torch.exp(sequence_log_ratio(logprobs, rollout))


def broadcast_sequence_ratio(logprobs: Tensor, rollout: Rollout, p: Params) -> Tensor:
    """Hook: ``s_i`` broadcast over the response, ``[N, T]`` (GSPO)."""
    return sequence_ratio(logprobs, rollout, p)[:, None].expand(logprobs.shape)


def token_sequence_ratio(logprobs: Tensor, rollout: Rollout, p: Params) -> Tensor:
    """Hook: ``sg(s_i) exp(l - sg l)``, ``[N, T]`` (GSPO-token)."""
    s = sequence_ratio(logprobs, rollout, p).detach()
    return s[:, None] * torch.exp(logprobs - logprobs.detach())


_EXPECTED = per_regime(verdict_of("M3.response_norm"), verdict_of("M1.sequence_weight", "M2.sign_clip", "M3.response_norm"))

GSPO = factored_objective(
    "gspo",
    Factors(
        advantages=scaled_advantages,
        ratio=broadcast_sequence_ratio,
        surrogate=ppo_surrogate,
        norm=fixed_norm("seq-mean-token-mean"),
        response_ratio=sequence_ratio,
        sign_free=ppo_sign_free,
        clip_level="sequence",
    ),
    summary="GSPO: geometric-mean sequence ratio with sequence clipping (3e-4/4e-4)",
    source="arXiv:2507.18071",
    defaults={"eps_low": 3e-4, "eps_high": 4e-4, "delta": None},
    expected=_EXPECTED,
)

GSPO_TOKEN = factored_objective(
    "gspo_token",
    Factors(
        advantages=scaled_advantages,
        ratio=token_sequence_ratio,
        surrogate=ppo_surrogate,
        norm=fixed_norm("seq-mean-token-mean"),
        response_ratio=sequence_ratio,
        sign_free=ppo_sign_free,
        clip_level="sequence",
    ),
    summary="GSPO-token: sg(s_i) pi/sg(pi) per token, per-token clip of the value s_i",
    source="arXiv:2507.18071; TRL PR 3820; ms-swift importance_sampling_level='sequence_token'",
    defaults={"eps_low": 3e-4, "eps_high": 4e-4},
    expected=_EXPECTED,
)
