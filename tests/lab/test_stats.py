"""The statistics on synthetic paired differences with a known effect and with none:
each of confirmed / refuted / inconclusive must come out when it should."""

import numpy as np
import pytest

from exchange.errors import InvalidArgument
from exchange.lab.stats import decide, holm, paired_effect


def _draws(effect, sd=1.0, n=12, seed=0):
    return np.random.default_rng(seed).normal(effect, sd, n)


def test_known_positive_effect_is_confirmed():
    e = paired_effect(_draws(2.0), sesoi=0.2)
    assert e.verdict == "confirmed" and e.low > 0 and e.low <= e.mean <= e.high
    assert e.p_sign < 0.05 and e.n_positive >= 11


def test_known_opposite_effect_is_refuted_by_the_interval():
    e = paired_effect(_draws(-2.0), sesoi=0.2)
    assert e.verdict == "refuted" and e.high < 0 and "opposite side" in e.reason


def test_no_effect_with_power_is_refuted_by_equivalence_not_by_the_interval():
    e = paired_effect(_draws(0.0, sd=0.1, n=16, seed=1), sesoi=0.2)
    assert e.low < 0 < e.high  # the interval contains 0 ...
    assert e.verdict == "refuted" and "equivalent" in e.reason  # ... only TOST refutes
    assert e.mde < 0.2


def test_no_effect_without_power_is_inconclusive_with_its_mde():
    e = paired_effect(_draws(0.0, sd=1.0, n=12, seed=2), sesoi=0.2)
    assert e.verdict == "inconclusive" and e.mde > 0.2 and "minimum detectable effect" in e.reason


def test_interval_containing_zero_never_refutes_without_sesoi():
    e = paired_effect(_draws(-0.1, sd=1.0, n=12, seed=3))
    assert e.low < 0 < e.high and e.verdict == "inconclusive" and e.p_equiv is None


def test_t_interval_matches_scipy():
    from scipy import stats

    d = _draws(0.5, n=13, seed=4)
    e = paired_effect(d)
    ci = stats.ttest_1samp(d, 0.0).confidence_interval(0.95)
    assert np.isclose(e.low, ci.low) and np.isclose(e.high, ci.high)
    assert np.isclose(e.p_t, stats.ttest_1samp(d, 0.0).pvalue)


def test_mde_is_detected_about_80_percent_of_the_time():
    sd, n = 1.0, 12
    mde = paired_effect(_draws(0.0, sd=sd, n=n, seed=5)).mde
    hits = sum(paired_effect(_draws(mde, sd=sd, n=n, seed=100 + k)).verdict == "confirmed" for k in range(300))
    assert 0.6 < hits / 300 < 0.95  # sd estimate varies: the design's power, not exact


def test_holm_adjusts_and_can_turn_a_marginal_result_inconclusive():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    marginal = paired_effect(_draws(0.7, n=12, seed=10))
    assert marginal.verdict == "confirmed" and 0.0125 < marginal.p_t < 0.05
    family = decide([marginal] + [paired_effect(_draws(0.0, n=12, seed=7 + k)) for k in range(3)])
    assert family[0].verdict == "inconclusive" and family[0].p_t_adj > marginal.p_t


def test_constant_differences():
    assert paired_effect([0.0, 0.0, 0.0]).verdict == "inconclusive"
    assert paired_effect([0.0, 0.0, 0.0], sesoi=0.1).verdict == "inconclusive"  # a ceiling is not equivalence
    assert "uninformative" in paired_effect([0.0, 0.0, 0.0], sesoi=0.1).reason  # and no MDE of 0 is claimed
    assert paired_effect([0.5, 0.5, 0.5]).verdict == "confirmed"


def test_bad_input():
    with pytest.raises(InvalidArgument, match="need one difference per seed"):
        paired_effect([1.0])
    with pytest.raises(InvalidArgument, match="non-finite"):
        paired_effect([1.0, float("nan")])
    with pytest.raises(InvalidArgument, match="sesoi"):
        paired_effect([1.0, 2.0], sesoi=0.0)
