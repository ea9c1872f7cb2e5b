"""Closed-form coefficients of the families (the slow oracle is the formula itself).

The seven original built-ins keep their semantics: each is compared with its formula
written out directly, on-policy and off-policy.
"""

from __future__ import annotations

import pytest
import torch

import exchange.objectives as catalog
from exchange import token_coefficients
from exchange.objectives._common import batch_whiten, group_advantages, rloo_advantages

from tests.objectives.catalog_cases import make_rollout

GROUPS = [[[1, 2, 3, 4], [1, 2, 5], [1, 2, 3, 6, 7, 8], [1, 2, 9, 9, 9]], [[4, 1], [4, 2, 2], [4, 3]]]
REWARDS = [[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0]]


def _clip_mask(ratio, adv, lo, hi):
    a = adv[:, None]
    return ~(((a > 0) & (ratio > 1 + hi)) | ((a < 0) & (ratio < 1 - lo)))


def oracle(name: str, lp: torch.Tensor, r) -> torch.Tensor:
    """``kappa [N, T]`` written out from the formulas in the module docstrings."""
    m = r.fmask
    ratio = torch.exp(lp - r.old_logprobs)
    lengths = r.lengths.double()[:, None]
    a = group_advantages(r)
    n, ntok = r.n, float(r.n_tokens)
    if name == "grpo":
        return a[:, None] * ratio * _clip_mask(ratio, a, 0.2, 0.2) / (n * lengths) * m
    if name == "dr_grpo":
        c = r.rewards - r.group_mean(r.rewards)
        return c[:, None] * ratio * _clip_mask(ratio, c, 0.2, 0.2) / (n * 1024.0) * m
    if name == "dapo":
        return a[:, None] * ratio * _clip_mask(ratio, a, 0.2, 0.28) / ntok * m
    if name == "gspo":
        s = torch.exp(((lp - r.old_logprobs) * m).sum(1, keepdim=True) / lengths)
        keep = ~(((a[:, None] > 0) & (s > 1 + 4e-4)) | ((a[:, None] < 0) & (s < 1 - 3e-4)))
        return a[:, None] * s * keep / (n * lengths) * m
    if name == "cispo":
        return a[:, None] * torch.clamp(ratio, max=1.28) / ntok * m
    if name == "cispo_verl":
        return a[:, None] * torch.clamp(ratio, 0.8, 1.2) / ntok * m
    if name == "rloo":
        return rloo_advantages(r)[:, None] / r.group_sizes.double()[:, None] * m
    if name == "reinforce_pp":
        w = batch_whiten(r.rewards, r)
        return w[:, None] * ratio * _clip_mask(ratio, w, 0.2, 0.2) / ntok * m
    if name in ("sapo", "sapo_verl"):
        tau = torch.where(a[:, None] > 0, torch.tensor(1.0, dtype=torch.float64), torch.tensor(1.05, dtype=torch.float64))
        sig = torch.sigmoid(tau * (ratio - 1))
        norm = ntok if name == "sapo" else n * lengths
        return a[:, None] * 4 * sig * (1 - sig) * ratio / norm * m
    if name == "gpg":
        alpha = n / float((r.rewards != 0).sum())
        return alpha * (r.rewards - r.group_mean(r.rewards))[:, None] / ntok * m
    if name == "ppo":
        keep = _clip_mask(ratio, a, 0.2, 0.2) & ~((a[:, None] < 0) & (ratio > 3.0))
        return a[:, None] * ratio * keep / ntok * m
    raise KeyError(name)


NAMES = ["grpo", "dr_grpo", "dapo", "gspo", "cispo", "cispo_verl", "rloo", "reinforce_pp", "sapo", "sapo_verl", "gpg", "ppo"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("off_policy", [False, True], ids=["on", "off"])
def test_coefficients_match_the_formula(name: str, off_policy: bool) -> None:
    lp, r = make_rollout(GROUPS, REWARDS, off_policy=off_policy, max_shift=1.0 if name == "ppo" else 0.6)
    kappa = token_coefficients(catalog.resolve(name), lp, r)
    expected = oracle(name, lp, r)
    assert torch.allclose(kappa, expected, rtol=1e-10, atol=1e-14 * float(expected.abs().max()))


def test_hapo_reallocation_matches_theory_section_6() -> None:
    lp, r = make_rollout(GROUPS, REWARDS)
    kappa = token_coefficients(catalog.resolve("hapo"), lp, r)
    a = group_advantages(r)[:, None]
    m = r.fmask
    h = r.entropy
    mean = (h * m).sum(1, keepdim=True) / m.sum(1, keepdim=True)
    std = torch.sqrt((((h - mean) * m) ** 2).sum(1, keepdim=True) / m.sum(1, keepdim=True))
    z = (h - mean) / (std + 1e-6)
    shift = torch.maximum(torch.minimum(z, a.abs() / 2), -a.abs() / 2)  # clip(z, -|A|/phi, |A|/phi)
    a_ca = a + 0.2 * torch.sign(a) * shift
    assert torch.allclose(kappa, a_ca / float(r.n_tokens) * m, rtol=1e-10, atol=1e-15)
    # sign-preserving: alpha / phi < 1
    assert (torch.sign(a_ca) == torch.sign(a).expand_as(a_ca))[r.mask].all()


def test_entropy_8020_keeps_the_top_fifth_of_entropies() -> None:
    lp, r = make_rollout(GROUPS, REWARDS)
    kappa = token_coefficients(catalog.resolve("entropy_8020"), lp, r)
    kept = (kappa != 0) & r.mask
    threshold = torch.quantile(r.entropy[r.mask], 0.8)
    assert torch.equal(kept, (r.entropy >= threshold) & r.mask)
