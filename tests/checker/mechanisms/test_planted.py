"""The judgement layer from planted coefficient patterns (no loss function): each
mechanism's evidence fires on its pattern and stays silent on the patterns that look
alike but are not it (THEORY.md section 4), and the rule combines evidence into a set."""

from __future__ import annotations

import torch

from exchange.checker.mechanisms import (m1_sequence_weight, m2_sign_clip, m3_response_normaliser, m4_not_zero_sum,
                                         m5_response_statistics, m6_additive_term, m7_feature_shaping, tied)
from exchange.checker.mechanisms.evidence import Evidence
from exchange.checker.mechanisms.rule import MechanismSet, evidence_lines

T = lambda *x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
TOL = 1e-6


def test_m1_and_m5_read_a_turned_direction_above_tolerance_only():
    assert m1_sequence_weight.suffix_ratios_turn(0.3, TOL)[0].mechanism == "M1"
    assert m1_sequence_weight.suffix_ratios_turn(1e-9, TOL) == []
    assert m5_response_statistics.suffix_statistics_turn(0.3, TOL)[0].mechanism == "M5"
    assert m5_response_statistics.suffix_statistics_turn(1e-9, TOL) == []


def _pairs(g_high, g_low, m=0.0):
    """Coefficients before/after a shared ratio move at two reward vectors of one order:
    before ``A_i + m``, after ``g_i A_i + m`` (``g`` the clip factor by sign)."""
    a1, a2 = T(4.0, -4.0, -2.0, 6.0), T(6.0, -2.0, -5.0, 4.0)
    high = a1 > a1.median()
    g = torch.where(high, torch.full_like(a1, g_high), torch.full_like(a1, g_low))
    return (a1 + m, g * a1 + m, a2 + m, g * a2 + m), high


def test_m2_a_factor_that_depends_on_the_sign_is_m2_not_m6():
    (b1, v1, b2, v2), high = _pairs(0.0, 2.0)  # positive copies clipped, negative ones kept at ratio 2
    names = {e.mechanism for e in m2_sign_clip.column_split(b1, v1, b2, v2, high, "float64")}
    assert names == {"M2"}


def test_m2_one_factor_for_every_occurrence_is_nothing_and_a_common_shift_is_m6():
    (b1, v1, b2, v2), high = _pairs(2.0, 2.0)
    assert m2_sign_clip.column_split(b1, v1, b2, v2, high, "float64") == []
    (b1, v1, b2, v2), high = _pairs(2.0, 2.0)
    v1, v2 = v1 + 0.5, v2 + 0.5  # the same shift on every occurrence after the move
    assert {e.mechanism for e in m2_sign_clip.column_split(b1, v1, b2, v2, high, "float64")} == {"M6"}


def test_m3_weight_quotient_extrapolates_a_leak_away_and_keeps_a_weight():
    assert m3_response_normaliser.weight_quotient((2.0, 2.0), "float64")[0].mechanism == "M3"  # weights 2:1
    # a first-order leak of a shaping: 1 + s/spread at spreads 4 and 8 extrapolates to 1
    assert m3_response_normaliser.weight_quotient((1.0 + 0.2 / 4, 1.0 + 0.2 / 8), "float64") == []


def test_m3_position_rescaling_needs_one_factor_per_response_and_factors_that_differ():
    before = T(1.0, 2.0, 3.0, 4.0).reshape(2, 2)
    mask = torch.ones(2, 2, dtype=torch.bool)
    assert m3_response_normaliser.position_rescaling(before, before * T(2.0, 3.0)[:, None], mask, "float64")
    assert m3_response_normaliser.position_rescaling(before, before * 2.0, mask, "float64") == []  # a group constant
    assert m3_response_normaliser.position_rescaling(before, before * T(1.0, 2.0), mask, "float64") == []


def test_m4_centre_share_against_its_twin():
    assert m4_not_zero_sum.centre_share(((0.2, 0.0), (0.2, 0.0)), "float64")[0].mechanism == "M4"
    assert m4_not_zero_sum.centre_share(((0.0, 0.0), (0.0, 0.0)), "float64") == []
    # a shaping's second-order leak (s / spread)^2 at spreads 4 and 8 extrapolates to 0
    assert m4_not_zero_sum.centre_share(((0.5 / 16, 0.0), (0.5 / 64, 0.0)), "float64") == []


def test_m4_tied_coefficients_that_follow_the_level_one_way():
    assert m4_not_zero_sum.follows_level(T(1.0, 1.0, 2.0)[:, None], 1e-9)[0].mechanism == "M4"
    assert m4_not_zero_sum.follows_level(T(1.0, -1.0, 0.0)[:, None], 1e-9) == []  # a redistribution
    assert m4_not_zero_sum.follows_level(T(1e-12, 0.0, 0.0)[:, None], 1e-9) == []  # round-off


def _tied(c, m, w=(1.0, 2.0, 1.0, 3.0), h=(1.0, 1.0, 1.0)):
    """A tied group's coefficients at levels 0 and 1: ``w_i (h_e (lambda + c_i) + m_e)``."""
    w, h, c, m = T(*w)[:, None], T(*h)[None], T(*c)[:, None], T(*m)[None]
    k0, k1 = w * (h * c + m), w * (h * (1.0 + c) + m)
    return k0, k1 - k0


def test_tied_uncentred_advantages_are_m4_not_m6():
    """Every incorrect response ``A = -1`` in a tied group too: the coefficients follow
    the level with one crossing for every response and event: M4, no event term."""
    k0, d = _tied(c=(-1.0,) * 4, m=(0.0, 0.0, 0.0))
    assert m4_not_zero_sum.follows_level(d, 1e-9)
    assert m6_additive_term.tied_offsets(k0, d, 1e-9, TOL) == []
    assert m7_feature_shaping.tied_offsets(k0, d, 1e-9, TOL) == []


def test_tied_event_term_beside_an_uncentred_advantage_is_m6():
    k0, d = _tied(c=(-1.0,) * 4, m=(0.3, -0.2, 0.5))
    assert m6_additive_term.tied_offsets(k0, d, 1e-9, TOL)[0].mechanism == "M6"
    assert m7_feature_shaping.tied_offsets(k0, d, 1e-9, TOL) == []


def test_tied_shaped_offsets_that_follow_the_level_are_m7():
    k0, d = _tied(c=(-0.2, 0.4, -0.1, 0.3), m=(0.0, 0.0, 0.0))
    assert m7_feature_shaping.tied_offsets(k0, d, 1e-9, TOL)[0].mechanism == "M7"
    assert m6_additive_term.tied_offsets(k0, d, 1e-9, TOL) == []


def test_tied_constant_term_at_the_baseline_the_loss_subtracts_is_m6():
    """A greedy baseline with a k1 term (gradient beta on every token): at the level where
    every reward equals its baseline reward the advantage is 0 by definition, and the
    coefficients are ``w_i beta``; one crossing for every response and event, at
    ``-beta``. Measured from the baseline the loss subtracts it is an event term (M6);
    read as an uncentred advantage of a loss that ignores the baseline it is not."""
    k0, d = _tied(c=(0.0,) * 4, m=(0.05, 0.05, 0.05))
    found = m6_additive_term.tied_offsets(k0, d, 1e-9, TOL, at_baseline=True)
    assert [e.mechanism for e in found] == ["M6"] and abs(found[0].size - 0.05) < TOL
    assert m6_additive_term.tied_offsets(k0, d, 1e-9, TOL) == []
    assert m7_feature_shaping.tied_offsets(k0, d, 1e-9, TOL) == []
    # a term below the crossings' round-off slack is not named
    k0, d = _tied(c=(0.0,) * 4, m=(1e-8, 1e-8, 1e-8))
    assert m6_additive_term.tied_offsets(k0, d, 1e-9, TOL, at_baseline=True) == []


def test_tied_greedy_advantage_alone_or_shaped_is_no_event_term_at_the_baseline():
    k0, d = _tied(c=(0.0,) * 4, m=(0.0, 0.0, 0.0))  # A = r - b: every crossing at the baseline
    assert m6_additive_term.tied_offsets(k0, d, 1e-9, TOL, at_baseline=True) == []
    # a length shaping: each response its own crossing (M7), so the common part is no evidence
    k0, d = _tied(c=(-0.4, -0.5, -0.4, -0.6), m=(0.05, 0.05, 0.05))
    assert m6_additive_term.tied_offsets(k0, d, 1e-9, TOL, at_baseline=True) == []
    assert m7_feature_shaping.tied_offsets(k0, d, 1e-9, TOL)[0].mechanism == "M7"


def test_one_crossing_reads_a_shaping_of_the_responses_the_level_moves():
    """The premise of the baseline reading: a length shaping gives each length its own
    crossing (not one); a layout that keeps only responses of one length (the others
    dropped after centring: coefficients 0, not moved by the level) shows one, as does a
    constant term beside an unshaped advantage. tied.py reads the premise over every
    layout, so the one common crossing of the truncated layout is no M6."""
    k0, d = _tied(c=(-0.4, -0.5, -0.4, -0.6), m=(0.0, 0.0, 0.0))
    assert not m6_additive_term.one_crossing(k0, d, 1e-9, TOL)
    kept = T(1.0, 0.0, 1.0, 0.0)[:, None]  # lengths 5 and 6 truncated and dropped
    assert m6_additive_term.one_crossing(k0 * kept, d * kept, 1e-9, TOL)
    assert m6_additive_term.tied_offsets(k0 * kept, d * kept, 1e-9, TOL, at_baseline=True)  # the caller's premise
    k0, d = _tied(c=(0.0,) * 4, m=(0.05, 0.05, 0.05))
    assert m6_additive_term.one_crossing(k0, d, 1e-9, TOL)
    assert m6_additive_term.one_crossing(k0 * 0.0, d * 0.0, 1e-9, TOL)  # nothing moves: nothing read


def test_tied_coefficients_the_level_does_not_move():
    def named(m0):
        return [e.mechanism for e in tied.level_free(m0, TOL)]

    shaped = T(1.0, -1.0, 2.0, -2.0)[:, None] * T(1.0, 1.0, 1.0)[None]  # zero-sum shaped advantages
    assert named(shaped) == ["M7"]
    term = T(1.0, 2.0, 1.0, 3.0)[:, None] * T(0.3, -0.2, 0.5)[None]  # w_i m_e: an event term
    assert named(term) == ["M6"]
    both = shaped + term  # two directions: both terms
    assert named(both) == ["M6", "M7"] and "two directions" in tied.level_free(both, TOL)[0].pattern
    assert named(T(1.0, 2.0, 1.0, 3.0)[:, None] * T(0.4, 0.4, 0.4)[None]) == []  # one sign, one profile: neither
    assert named(torch.zeros(4, 3, dtype=torch.float64)) == []  # no direction


def test_copies_keep_an_event_term_not_an_uncentred_advantage():
    K, mass = T(2.0), T(2.0)
    c0 = T(-1.5, -0.7)  # A = -1 times the ratios 1.5, 0.7
    assert m6_additive_term.kept_on_copies(K, mass, c0, -c0, 1e-8, TOL, 1e-12) == []
    k3 = T(0.3, -0.4)  # an event term: not proportional to the level's move
    assert m6_additive_term.kept_on_copies(K, mass, k3, T(1.5, 0.7), 1e-8, TOL, 1e-12)[0].mechanism == "M6"
    assert m6_additive_term.kept_on_copies(K, mass, k3, T(0.0, 0.0), 1e-8, TOL, 1e-12)[0].mechanism == "M6"
    assert m6_additive_term.kept_on_copies(T(0.0), mass, k3, T(0.0, 0.0), 1e-8, TOL, 1e-12) == []


def test_m6_profile_and_reward_independence():
    assert m6_additive_term.varying_profile(0.2, 1e-12, TOL)[0].mechanism == "M6"
    assert m6_additive_term.varying_profile(0.2, 0.1, TOL) == []  # the reward-dependent part has it too (M5)
    assert m6_additive_term.reward_independent(0.5, 0.0, TOL)[0].mechanism == "M6"
    assert m6_additive_term.reward_independent(0.5, 0.3, TOL) == []


def test_m7_feature_rows_and_cancelling():
    assert m7_feature_shaping.feature_rows(0.3, 1e-12, TOL)[0].mechanism == "M7"
    assert m7_feature_shaping.feature_rows(0.3, 0.2, TOL) == []  # round-off as large as the angle
    live = torch.tensor([True, True])
    assert m7_feature_shaping.cancelling(T(0.0, 0.0), T(1.0, 2.0), live, 1e-8)[0].mechanism == "M7"
    assert m7_feature_shaping.cancelling(T(0.5, 0.0), T(1.0, 2.0), live, 1e-8) == []


def test_the_rule_makes_a_set_with_the_evidence_behind_each_name():
    m3 = Evidence("M3", "probe suffix_length", "weights 2:1", 1.0, 0.04)
    m5 = Evidence("M5", "probe suffix_entropy", "direction turned", 0.3, 1e-6)
    found = MechanismSet([m3, m5, m3])
    assert found == frozenset({"M3", "M5"}) and isinstance(found, frozenset)
    assert set(found.evidence) == {"M3", "M5"} and len(found.evidence["M3"]) == 1
    merged = MechanismSet.merged(found, ["M6"])
    assert merged == {"M3", "M5", "M6"} and merged.evidence == found.evidence
    assert evidence_lines([m5, m3])["M5"] == [str(m5)]
    assert MechanismSet() == frozenset()
