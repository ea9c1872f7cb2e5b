"""Attribution rules of THEORY.md section 4 on losses the catalog does not hold:
M6 for a sign-free additive term, M4 for a length-weighted baseline (unequal lengths),
M7 for length shaping with cancellation intact, no mechanism for NaN, and the
mechanisms line restricted to the properties asked for."""

import torch

from exchange import check


def _adv(r):
    return r.rewards - r.group_mean(r.rewards)


def _ratio(lp, r):
    return torch.exp(lp - r.old_logprobs)


def _token_mean(per_token, r):
    return (per_token * r.fmask).sum() / r.fmask.sum()


def reinforce_log_ratio_penalty(lp, r):
    log_rho = lp - r.old_logprobs
    return _token_mean(-_adv(r)[:, None] * _ratio(lp, r) + 1e-3 * log_rho**2, r)


def ppo_clip(lp, r):
    rho, adv = _ratio(lp, r), _adv(r)[:, None]
    return -_token_mean(torch.minimum(rho * adv, rho.clamp(0.8, 1.2) * adv), r)


def opo_baseline(lp, r):
    L = r.lengths.to(lp.dtype)
    b = r.group_sum(L * r.rewards) / r.group_sum(L)
    return -_token_mean((r.rewards - b)[:, None] * _ratio(lp, r), r)


def length_shaped(lp, r):
    shaped = r.rewards - 0.1 * r.lengths.to(lp.dtype)
    return -_token_mean((shaped - r.group_mean(shaped))[:, None] * _ratio(lp, r), r)


def nan_loss(lp, r):
    return (lp * float("nan")).sum()


def test_sign_free_additive_term_is_m6_not_m2():
    report = check(reinforce_log_ratio_penalty, max_examples=10, seed=0)
    assert not report.holds("exchangeable", "off_policy")
    assert report.mechanisms_in("off_policy") == ["M6"], report
    assert "regularizer=" in str(report)


def test_sign_dependent_clip_stays_m2():
    report = check(ppo_clip, max_examples=10, seed=0, regimes="off_policy")
    assert "M2" in report.mechanisms and "M6" not in report.mechanisms, report


def test_m6_term_passed_as_regularizer_leaves_the_reward_part_clean():
    def reinforce(lp, r):
        return _token_mean(-_adv(r)[:, None] * _ratio(lp, r), r)

    def penalty(lp, r):
        return _token_mean(1e-3 * (lp - r.old_logprobs) ** 2, r)

    report = check(reinforce, max_examples=10, seed=0, regularizer=penalty)
    assert report.all_hold, report
    assert report.regularizer is not None and report.regularizer.reward_independent


def test_length_weighted_baseline_is_m4():
    report = check(opo_baseline, max_examples=10, seed=0, regimes="on_policy")
    assert not report.holds("zero_sum"), report
    assert "M4" in report.mechanisms, report


def test_length_shaping_is_m7_with_cancellation_intact():
    # The per-example path: the bulk path also draws batches whose every group is tied,
    # where this loss's coefficients are pure round-off that (C)'s relative residual
    # reads as a break (test_bulk.py::test_a_fully_tied_batch_shows_round_off...).
    report = check(length_shaped, properties=["zero_sum", "exchangeable", "shared_cancellation"], max_examples=10,
                   seed=0, fuzzer="per_example")
    assert not report.holds("exchangeable")
    assert report.holds("shared_cancellation") and report.holds("zero_sum")
    assert report.mechanisms == ["M7"], report
    assert "design" in str(report)


def test_nan_breaks_finite_and_names_no_mechanism():
    report = check(nan_loss, max_examples=5, seed=0, regimes="on_policy")
    assert not report.holds("finite")
    assert report.mechanisms == [], report
    assert "not finite" in str(report)


def test_mechanisms_line_respects_the_properties_asked_for():
    full = check(ppo_clip, max_examples=5, seed=0, regimes="off_policy")
    assert "M2" in full.mechanisms
    only = check(ppo_clip, properties=["zero_sum"], max_examples=5, seed=0, regimes="off_policy")
    assert only.mechanisms == [], only
    assert "M2" not in str(only)
