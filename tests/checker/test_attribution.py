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


# Issue 45's held-out misses: each loss with its verdict derived from THEORY.md.
def incorrect_minus_one(lp, r):
    """Uncentred advantages: a correct response gets ``r - mean``, every incorrect one
    ``A = -1``, in tied groups too. ``kappa = A_i rho_e``: one common vector times an
    event factor, so (E) holds; ``sum_i A_i != 0``: (Z) and (C) break; a tied group at
    0 keeps ``A = -1``: (N) breaks; its coefficients follow the tied level (0 at level 1),
    one crossing for every event: M4, not M6."""
    a = torch.where(r.rewards > 0, _adv(r), -torch.ones_like(r.rewards))
    return -_token_mean(a[:, None] * _ratio(lp, r), r)


def test_uncentred_advantages_are_m4_not_m6_and_keep_exchangeability():
    report = check(incorrect_minus_one, max_examples=10, seed=0)
    for regime in report.regimes:
        assert report.holds("exchangeable", regime), report
        for prop in ("zero_sum", "shared_cancellation", "null_on_equal_rewards"):
            assert not report.holds(prop, regime), (prop, report)
        assert report.mechanisms_in(regime) == ["M4"], report


def group_mean_sequence_mean(lp, r):
    """A plain group-mean estimator, each response's tokens averaged: ``kappa = A_i /
    L_i``, zero-sum advantages with a per-response weight: (E) and (C) break, (Z) and
    (N) hold; its mechanism is M3 (T3), never M4 (the centre is the mean) nor M7 (no
    shaping)."""
    m = r.fmask
    return -((_adv(r)[:, None] * _ratio(lp, r) * m).sum(1) / m.sum(1)).mean()


def test_group_mean_with_a_per_response_mean_is_m3_only():
    report = check(group_mean_sequence_mean, max_examples=10, seed=0)
    for regime in report.regimes:
        assert report.holds("zero_sum", regime) and report.holds("null_on_equal_rewards", regime), report
        assert report.mechanisms_in(regime) == ["M3"], report
        assert "M3" in report.evidence_in(regime)


def entropy_top_k(lp, r, k=2):
    """A per-response entropy top-k mask: each response keeps its ``k`` highest-entropy
    tokens, a token weight from response-level statistics: a shared event is kept in one
    response and masked in another according to the other tokens' entropies: (E) and (C)
    break, M5."""
    h = torch.where(r.mask, r.entropy, torch.full_like(r.entropy, -1e9))
    threshold = h.topk(min(k, h.shape[1]), dim=1).values[:, -1:]
    keep = ((h >= threshold) & r.mask).to(lp.dtype)
    return -_token_mean(keep * _adv(r)[:, None] * _ratio(lp, r), r)


def test_per_response_entropy_top_k_mask_is_m5():
    report = check(entropy_top_k, max_examples=10, seed=0)
    for regime in report.regimes:
        assert not report.holds("exchangeable", regime), report
        assert "M5" in report.mechanisms_in(regime), report


def filtered_ppo_clip(lp, r):
    """A PPO clip behind dynamic sampling that keeps a group only when ``0 < mean(r) <
    1``: the group selection is a group constant (no mechanism); off-policy the clip is
    M2 (T4), found by re-probing the M2 probes' groups (rewards 1, -1, -1, 1: mean 0,
    dropped) on rewards mapped onto [0, 1]; on-policy every property holds."""
    mean = r.group_mean(r.rewards)
    keep = ((mean > 0) & (mean < 1)).to(lp.dtype)[:, None]
    rho, adv = _ratio(lp, r), (r.rewards - mean)[:, None]
    return -_token_mean(keep * torch.minimum(rho * adv, rho.clamp(0.8, 1.2) * adv), r)


def test_a_clip_behind_a_filter_that_drops_the_probe_group_is_still_m2():
    report = check(filtered_ppo_clip, max_examples=10, seed=0)
    assert report.mechanisms_in("on_policy") == [], report
    assert report.mechanisms_in("off_policy") == ["M2"], report
    assert not report.holds("shared_cancellation", "off_policy"), report
