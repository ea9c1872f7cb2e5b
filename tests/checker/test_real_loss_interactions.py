"""Plain losses where one part changes what another can do (exchange.objectives.interactions,
THEORY.md sections 2 and 4), written as an RL library would write them: the checker must
name the mechanisms the derivation gives, not the ones each part has alone.

The first four failed on the checker at the start of this round (738ca2d): ReMax with a
length penalty and an entropy bonus got an extra M6 (the bonus is one more constant in
the shaping), OPO with a per-response mean got no mechanism at all (a length-weighted
centre is M4, the per-response mean M3), the zero-std filter with one-signed advantages
and a k2 KL lost its M6, and a truncation-to-zero shaping under micro-batch accumulation
got a false (Z) break with M4. The last two guard verdicts that were right then and that
this round's probes could have broken (one-signed advantages under a sign clip are not
M2; a leave-one-out std from E[x^2] - E[x]^2 keeps (P) in float64).
"""

from __future__ import annotations

import pytest
import torch

import exchange
from exchange.checker.properties import PROPERTIES

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

REGIMES = ("on_policy", "off_policy")


def _group_sum(v, ro):
    return torch.zeros(ro.n_groups, dtype=v.dtype, device=v.device).index_add_(0, ro.group_index, v)[ro.group_index]


def _group_mean(v, ro):
    return _group_sum(v, ro) / _group_sum(torch.ones_like(v), ro)


def _token_mean(per_token, ro):
    m = ro.mask.to(per_token.dtype)
    return (per_token * m).sum() / m.sum()


def remax_length_entropy(lp, ro, beta=0.5):
    """ReMax: greedy-baseline advantages of a length-penalised reward, and an entropy bonus
    on the sampled tokens (-l), whose gradient is beta on every token."""
    L = ro.lengths.to(ro.rewards.dtype)
    adv = (ro.rewards - 0.1 * L) - ro.baseline_rewards
    return _token_mean(-adv[:, None] * lp + beta * lp, ro)


def opo_per_response_mean(lp, ro):
    """OPO's length-weighted centre; each response's tokens averaged, then the responses."""
    L = ro.lengths.to(ro.rewards.dtype)
    adv = ro.rewards - _group_sum(L * ro.rewards, ro) / _group_sum(L, ro)
    m = ro.mask.to(lp.dtype)
    ratio = torch.exp(lp - ro.old_logprobs)
    return -((ratio * adv[:, None] * m).sum(1) / m.sum(1)).mean()


def filtered_positive_k2(lp, ro, beta=0.5):
    """Tied groups dropped (DAPO's dynamic sampling), advantages clamped at 0, a k2 KL."""
    r = ro.rewards
    mixed = (_group_sum((r - _group_mean(r, ro)) ** 2, ro) > 0).to(r.dtype)
    adv = torch.clamp(r - _group_mean(r, ro), min=0.0)
    k2 = 0.5 * (lp - ro.ref_logprobs) ** 2
    return _token_mean(mixed[:, None] * (-adv[:, None] * lp + beta * k2), ro)


def micro_batch_truncation(lp, ro):
    """Reward 0 for a truncated response before centring; gradient accumulation over
    micro-batches of 3 rows, each a token mean."""
    r = ro.rewards if ro.truncated is None else torch.where(ro.truncated, torch.zeros_like(ro.rewards), ro.rewards)
    adv = r - _group_mean(r, ro)
    L = ro.lengths.to(r.dtype)
    chunk = torch.arange(ro.n, device=L.device) // 3
    tokens = torch.zeros(int(chunk.max()) + 1, dtype=r.dtype, device=L.device).index_add(0, chunk, L)
    w = 1.0 / (tokens.numel() * tokens[chunk])
    return -(w[:, None] * adv[:, None] * lp * ro.mask).sum()


def positive_only_clip(lp, ro):
    """Advantages clamped at 0 under a PPO clip: every kept occurrence takes the positive
    branch, a weight of the event alone."""
    adv = torch.clamp(ro.rewards - _group_mean(ro.rewards, ro), min=0.0)[:, None]
    ratio = torch.exp(lp - ro.old_logprobs)
    return _token_mean(-torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv), ro)


def loo_std(lp, ro):
    """RLOO scaled by the leave-one-out std, from E[x^2] - E[x]^2 (round-off at a tie)."""
    r = ro.rewards
    g = _group_sum(torch.ones_like(r), ro)
    others_mean = (_group_sum(r, ro) - r) / (g - 1)
    others_sq = (_group_sum(r * r, ro) - r * r) / (g - 1)
    adv = (r - others_mean) / (torch.sqrt(torch.clamp(others_sq - others_mean ** 2, min=0.0)) + 0.1)
    return _token_mean(-torch.exp(lp - ro.old_logprobs) * adv[:, None], ro)


# loss, mechanisms in both regimes, properties that hold in both regimes
CASES = [
    (remax_length_entropy, ["M4", "M7"], {"permutation_invariant"}),
    (opo_per_response_mean, ["M3", "M4"], {"null_on_equal_rewards", "permutation_invariant"}),
    (filtered_positive_k2, ["M4", "M6"], {"null_on_equal_rewards", "permutation_invariant"}),
    (micro_batch_truncation, ["M3", "M7"], {"zero_sum"}),
    (positive_only_clip, ["M4"], {"exchangeable", "null_on_equal_rewards", "permutation_invariant"}),
    (loo_std, ["M4"], {"exchangeable", "null_on_equal_rewards", "permutation_invariant"}),
]


@pytest.mark.parametrize(("loss", "mechanisms", "holding"), CASES, ids=[c[0].__name__ for c in CASES])
def test_the_checker_names_the_mechanisms_the_interaction_leaves(loss, mechanisms, holding) -> None:
    rep = exchange.check(loss, max_examples=10, seed=0)
    for regime in REGIMES:
        assert rep.mechanisms_in(regime) == mechanisms, (regime, rep)
        assert {p for p in PROPERTIES if rep.holds(p, regime)} == holding | {"finite"}, (regime, rep)
