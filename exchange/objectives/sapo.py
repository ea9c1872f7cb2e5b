"""SAPO (Soft Adaptive Policy Optimization, Qwen, arXiv:2511.20347): a soft sigmoid gate.

    f(r) = 4/tau sigma(tau (r - 1)),   tau = tau_pos if A_i > 0 else tau_neg,
    J = agg_{i,t} f(r[i,t]) A_i

kappa[i,t] = agg_i * A_i * 4 sigma (1 - sigma) r, which is A_i agg_i at r = 1 for any
tau: on-policy only the aggregation matters. Off-policy the gate depends on the sign of
A through tau_pos != tau_neg: a soft asymmetric clip (M2).

Two variants, because the sources disagree on the aggregation:

- ``sapo``: ``loss_agg_mode`` parameter, default ``token-mean`` (Trinity-RFT and the
  ms-swift docs; (E) on-policy). The paper's own normaliser was not retrieved.
- ``sapo_verl``: per-response token mean ``1/(B L_i)`` always, as verl 0.9.1
  (``sapo`` ignores ``loss_agg_mode``) and TRL 1.16 (``loss_type="sapo"``): M3 on-policy.

``sign_free_clip`` uses ``tau_pos`` for both signs.
"""

from __future__ import annotations

import torch
from torch import Tensor

from exchange.core.vocabulary import per_regime, verdict_of
from exchange.objectives._factored import Factors, Params, agg_norm, factored_objective, fixed_norm
from exchange.objectives.grpo import scaled_advantages
from exchange.core.rollout import Rollout


def _gate(rho: Tensor, adv: Tensor, tau: Tensor | float) -> Tensor:
    return 4.0 / tau * torch.sigmoid(tau * (rho - 1)) * adv


def sapo_surrogate(rho: Tensor, adv: Tensor, rollout: Rollout, p: Params) -> Tensor:
    """Hook: ``4/tau sigma(tau (rho-1)) A`` with the temperature chosen by the sign of A (M2)."""
    # Build tau in the ratio's dtype: torch.where with Python floats gives float32, and
    # tau_neg = 1.05 would become 1.0499999523 (found by the symbolic/autograd test).
    pos = torch.tensor(p["tau_pos"], dtype=rho.dtype, device=rho.device)
    neg = torch.tensor(p["tau_neg"], dtype=rho.dtype, device=rho.device)
    tau = torch.where(adv > 0, pos, neg)  # [N, T]
    return _gate(rho, adv, tau)


def sapo_sign_free(rho: Tensor, adv: Tensor, rollout: Rollout, p: Params) -> Tensor:
    """Hook: one temperature ``tau_pos`` for both signs."""
    return _gate(rho, adv, p["tau_pos"])


_EXPECTED_OFF = verdict_of("M2.sign_clip")

SAPO = factored_objective(
    "sapo",
    Factors(advantages=scaled_advantages, surrogate=sapo_surrogate, norm=agg_norm, sign_free=sapo_sign_free),
    summary="SAPO: soft sigmoid gate with tau_pos=1.0 / tau_neg=1.05, token-mean",
    source="arXiv:2511.20347; Trinity-RFT sapo_policy_loss (token-mean)",
    defaults={"tau_pos": 1.0, "tau_neg": 1.05, "loss_agg_mode": "token-mean"},
    expected=per_regime(verdict_of(), _EXPECTED_OFF),
    notes="The paper's aggregation was not retrieved: token-mean follows Trinity-RFT; see sapo_verl.",
)

SAPO_VERL = factored_objective(
    "sapo_verl",
    Factors(
        advantages=scaled_advantages,
        surrogate=sapo_surrogate,
        norm=fixed_norm("seq-mean-token-mean"),
        sign_free=sapo_sign_free,
    ),
    summary="SAPO as in verl 0.9.1 / TRL 1.16: the soft gate with a per-response token mean (1/L_i)",
    source="arXiv:2511.20347; verl 0.9.1 core_algos.py 'sapo'; TRL loss_type='sapo'",
    defaults={"tau_pos": 1.0, "tau_neg": 1.05},
    expected=per_regime(verdict_of("M3.response_norm"), verdict_of("M2.sign_clip", "M3.response_norm")),
)
