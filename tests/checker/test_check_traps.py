"""Traps (must hold) and breakers (must break, with the right mechanism) that exist only
here, never in the catalog: the checker must classify losses it has never seen.

Every trap keeps (E) by THEORY.md section 4's "subtleties": weights that depend only on
the event, or division by a group constant. Every breaker implements one mechanism.
"""

import pytest
import torch

from exchange import check

GAMMA = 0.9


def _adv(r):
    x = r.rewards
    return (x - r.group_mean(x)) / (r.group_std(x) + 1e-4)


def _ratio(lp, r):
    return torch.exp(lp - r.old_logprobs)


def _token_mean(per_token, r):
    return (per_token * r.fmask).sum() / r.fmask.sum()


# ------------------------------------------------------------------ traps
def position_discount(lp, r):
    t = torch.arange(lp.shape[1], dtype=lp.dtype)
    return -_token_mean(GAMMA**t * _adv(r)[:, None] * lp, r)


def group_token_count(lp, r):
    per_group_tokens = r.group_sum(r.lengths.to(lp.dtype))  # one constant per group
    return -((_adv(r) / per_group_tokens)[:, None] * lp * r.fmask).sum()


def context_entropy_mask(lp, r):
    keep = (r.entropy > 0.7).to(lp.dtype)  # entropy of the context: event-consistent
    return -_token_mean(keep * _adv(r)[:, None] * lp, r)


def two_sided_truncated_ratio(lp, r):
    w = _ratio(lp, r).detach().clamp(0.8, 1.2)  # CISPO/verl-style, sign-free
    return -_token_mean(w * _adv(r)[:, None] * lp, r)


def item_based_budget(lp, r):
    budget = float(r.lengths.max().item())  # .item(): a batch constant, not vmappable
    return -(_adv(r)[:, None] * lp * r.fmask).sum() / budget


def symmetric_ratio_mask(lp, r):
    ratio = _ratio(lp, r)
    inside = ((ratio > 0.8) & (ratio < 1.2)).to(lp.dtype).detach()  # same for both signs
    return -_token_mean(inside * ratio * _adv(r)[:, None], r)


# --------------------------------------------------------------- breakers
def within_response_entropy_weight(lp, r):
    h = r.entropy
    m = r.fmask
    mean = (h * m).sum(1, keepdim=True) / m.sum(1, keepdim=True)
    std = (((h - mean) ** 2 * m).sum(1, keepdim=True) / m.sum(1, keepdim=True)).sqrt()
    w = 1 + 0.5 * torch.tanh((h - mean) / (std + 1e-6))  # response-level statistics: M5
    return -_token_mean(w * _adv(r)[:, None] * lp, r)


def per_response_quantile_mask(lp, r):
    h = torch.where(r.mask, r.entropy, torch.full_like(r.entropy, -1.0))
    top = h.max(dim=1, keepdim=True).values
    keep = (h >= top).to(lp.dtype)  # keep each response's highest-entropy tokens: M5
    return -_token_mean(keep * _adv(r)[:, None] * lp, r)


def sqrt_length(lp, r):
    w = 1 / r.lengths.to(lp.dtype).sqrt()  # M3
    return -((w * _adv(r))[:, None] * lp * r.fmask).sum() / r.n


def batch_mean_baseline(lp, r):
    a = r.rewards - r.rewards.mean()  # one baseline for the whole batch: M4
    return -_token_mean(a[:, None] * lp, r)


def positive_only(lp, r):
    a = torch.clamp(_adv(r), min=0.0)  # drop negative advantages after centring: M4
    return -_token_mean(a[:, None] * lp, r)


def one_sided_clip(lp, r):
    ratio = _ratio(lp, r)
    adv = _adv(r)[:, None]
    clipped = ((adv > 0) & (ratio > 1.2)).to(lp.dtype).detach()  # only positive copies die: M2
    return -_token_mean((1 - clipped) * ratio * adv, r)


def product_of_ratios(lp, r):
    log_s = ((lp - r.old_logprobs) * r.fmask).sum(1)  # prod_t r_t couples the response: M1
    return -(torch.exp(log_s) * _adv(r)).sum() / r.n


TRAPS = [position_discount, group_token_count, context_entropy_mask, two_sided_truncated_ratio, item_based_budget, symmetric_ratio_mask]
BREAKERS = [
    (within_response_entropy_weight, "on_policy", "M5"),
    (per_response_quantile_mask, "on_policy", "M5"),
    (sqrt_length, "on_policy", "M3"),
    (batch_mean_baseline, "on_policy", "M4"),
    (positive_only, "on_policy", "M4"),
    (one_sided_clip, "off_policy", "M2"),
    (product_of_ratios, "off_policy", "M1"),
]


@pytest.mark.parametrize("loss_fn", TRAPS, ids=lambda f: f.__name__)
def test_trap_keeps_every_property(loss_fn):
    report = check(loss_fn, max_examples=25, seed=1)
    assert report.all_hold, report
    assert report.mechanisms == []


@pytest.mark.parametrize("loss_fn,regime,mechanism", BREAKERS, ids=lambda x: getattr(x, "__name__", str(x)))
def test_breaker_is_caught_with_its_mechanism(loss_fn, regime, mechanism):
    report = check(loss_fn, max_examples=25, seed=1)
    assert not report.holds("shared_cancellation", regime) or not report.holds("zero_sum"), report
    assert mechanism in report.mechanisms_in(regime), report
    if mechanism in ("M1", "M2"):
        # ratio mechanisms are invisible on-policy
        assert report.holds("exchangeable", "on_policy"), report
    if mechanism != "M4":
        assert not report.holds("exchangeable", regime), report


def test_cancellation_without_exchangeability_is_reported_separately():
    """Cor 3.3: A = (1, 1, -2) with weights w = (1, 3, 2) cancels for that reward vector
    only. Here w_i = L_i, so lengths (1, 3, 2) give exactly the corollary's example."""
    from exchange import token_coefficients
    from exchange.checker.cases import Case, GroupConfig, build
    from exchange.core.events import event_coefficients, events

    def length_weighted(lp, r):
        a = r.rewards - r.group_mean(r.rewards)
        return -((a * r.lengths.to(lp.dtype))[:, None] * lp * r.fmask).sum()

    rollout = build(Case(groups=(GroupConfig(((1,), (1, 3, 3), (1, 0)), (2.0, 2.0, -1.0)),)))
    kappa = token_coefficients(length_weighted, rollout.logprobs, rollout)
    ev = events(rollout)
    assert abs(float(event_coefficients(kappa, ev)[ev.shared][0])) < 1e-12  # cancels here
    report = check(length_weighted, properties=["exchangeable", "shared_cancellation"], max_examples=25)
    assert not report.holds("exchangeable") and not report.holds("shared_cancellation")
