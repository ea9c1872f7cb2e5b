import numpy as np
import pytest

from exchange.errors import InvalidArgument
from exchange.lab.stats import paired_effect, verdict


def test_clear_positive_effect_is_confirmed():
    e = paired_effect([1.0, 1.2, 0.9, 1.1, 1.05])
    assert e.verdict == "confirmed" and e.low > 0 and e.low <= e.mean <= e.high and e.n_positive == 5


def test_clear_negative_effect_is_refuted():
    assert paired_effect([-1.0, -1.2, -0.9, -1.1, -1.05]).verdict == "refuted"


def test_mixed_signs_are_inconclusive():
    e = paired_effect([1.0, -1.0, 0.5, -0.5, 0.1])
    assert e.verdict == "inconclusive" and e.low < 0 < e.high and e.n_positive == 3


def test_constant_differences_give_a_point_interval():
    e = paired_effect([0.0, 0.0, 0.0])
    assert (e.low, e.high, e.verdict) == (0.0, 0.0, "inconclusive")


def test_ci_matches_scipy_percentile_bootstrap():
    from scipy.stats import bootstrap

    d = np.array([0.3, -0.1, 0.5, 0.2, 0.4])
    e = paired_effect(d, n_resamples=2000, seed=3)
    ref = bootstrap((d,), np.mean, n_resamples=2000, method="percentile", rng=np.random.default_rng(3))
    assert np.isclose(e.low, ref.confidence_interval.low) and np.isclose(e.high, ref.confidence_interval.high)


def test_bad_input():
    with pytest.raises(InvalidArgument, match="need one difference per seed"):
        paired_effect([1.0])
    with pytest.raises(InvalidArgument, match="non-finite"):
        paired_effect([1.0, float("nan")])
    assert verdict(-1, 1) == "inconclusive"
