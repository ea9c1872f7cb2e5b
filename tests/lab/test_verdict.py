"""The issue-31 verdict rule: each branch, its order, acceptance and orientation.

Each case builds differences whose interval is known, so a wrong sign or margin in the
rule (e.g. SESOI taken from the interval, or negligible tested before opposite) fails.
"""

from __future__ import annotations

import numpy as np
import pytest

from exchange.errors import InvalidArgument
from exchange.lab.verdict import (
    Pilot,
    Size,
    Verdict,
    decide_p4,
    decide_signed,
    design_mde,
    interval,
    SesoiSource,
    orient,
    own_drift,
    NO_CLAIM,
)


def diffs_with(mean: float, half_width: float, n: int = 12) -> np.ndarray:
    """``n`` differences whose 95% t-interval is ``mean +- half_width``."""
    base = np.tile([-1.0, 1.0], n // 2)
    hi = interval(base)[2]
    return mean + base * (half_width / hi)


PILOT = Pilot(delta_hat=1.0, sd=0.2, seeds=(100, 101, 102, 103))


@pytest.mark.parametrize("mean,half,verdict,size", [
    (-0.5, 0.2, Verdict.OPPOSITE, None),            # wholly below 0
    (-0.3, 0.1, Verdict.OPPOSITE, None),            # below 0 and inside +-SESOI: opposite comes first
    (0.0, 0.3, Verdict.NEGLIGIBLE, None),           # inside +-0.5, contains 0
    (0.3, 0.1, Verdict.NEGLIGIBLE_BUT_REAL, None),  # inside +-0.5, excludes 0
    (0.45, 0.1, Verdict.EFFECT, Size.SMALLER),      # above 0, crosses SESOI, below delta_hat
    (1.0, 0.3, Verdict.EFFECT, Size.COMPATIBLE),    # contains delta_hat
    (2.0, 0.3, Verdict.EFFECT, Size.LARGER),
    (0.2, 0.6, Verdict.INCONCLUSIVE, None),         # contains 0 and leaves +-SESOI
])
def test_rule(mean, half, verdict, size):
    d = decide_signed("P2", diffs_with(mean, half), PILOT)
    assert d.accepted
    assert d.sesoi == pytest.approx(0.5)
    assert "half the lower end of delta_hat's bracket" in d.sesoi_derivation
    assert (d.low, d.high) == pytest.approx((mean - half, mean + half))
    assert d.verdict is verdict and d.size is size


def test_wrong_orientation_reads_opposite_not_effect():
    """The same data oriented by the wrong sign flips the verdict: the sign matters."""
    d = diffs_with(1.0, 0.3)
    assert decide_signed("P2", d, PILOT).verdict is Verdict.EFFECT
    assert decide_signed("P2", -d, PILOT).verdict is Verdict.OPPOSITE


def test_design_not_accepted_below_three_mde():
    """A predicted effect under 3 x MDE gives no verdict, whatever the data say: the old
    margins 'refuted' a correct theory this way."""
    d = diffs_with(0.0, 0.01)  # tight around 0: would be "negligible"
    mde = design_mde(float(np.std(d, ddof=1)), d.size)
    small = Pilot(delta_hat=2.5 * mde, sd=float(np.std(d, ddof=1)), seeds=(99,))
    out = decide_signed("P2", d, small)
    assert not out.accepted and out.verdict is Verdict.UNINFORMATIVE
    big = Pilot(delta_hat=3.5 * mde, sd=float(np.std(d, ddof=1)), seeds=(99,))
    assert decide_signed("P2", d, big).verdict is Verdict.NEGLIGIBLE


def test_pilot_acceptance_uses_its_own_sd():
    p = Pilot(delta_hat=0.1, sd=0.1, seeds=(1, 2))
    assert p.mde(12) == pytest.approx(design_mde(0.1, 12))
    assert p.accepted(12) == (0.1 >= 3 * design_mde(0.1, 12))
    assert not Pilot(delta_hat=0.0, sd=0.0, seeds=(1,)).accepted(12)


def test_orientation_ignores_roundoff():
    """K at round-off (+-1e-17 of a unit mass) orients nothing; np.sign would say +/-1."""
    noise = [1e-17, -2e-17, 3e-17, 1e-17]
    o = orient(noise, [1.0] * 4)
    assert o.sign == 0 and o.counted == 0
    o = orient([1e-17, -0.02, -0.03, 0.01], [1.0] * 4)
    assert o.sign == -1 and o.counted == 3 and o.agreeing == 2
    # M3's design asks one sign in >= 90% of minibatches
    assert orient([1e-17, -0.02, -0.03, 0.01], [1.0] * 4, min_agreement=0.9).sign == 0
    assert orient([-0.02] * 9 + [0.001], [1.0] * 10, min_agreement=0.9).sign == -1
    with pytest.raises(InvalidArgument):
        orient([1.0, 2.0], [1.0])


def test_p4_negligible_only_against_a_prediction_derived_margin():
    """Issue 42: an eval standard error is not a prediction of the accuracy effect; inside
    it the row is "uninformative", and only a prediction-derived margin gives "negligible"."""
    d = diffs_with(0.0, 0.005)
    assert decide_p4(d).verdict is Verdict.INCONCLUSIVE
    se = SesoiSource("eval standard error 0.02", prediction_derived=False)
    assert decide_p4(d, sesoi=0.02, sesoi_source=se).verdict is Verdict.UNINFORMATIVE
    pred = SesoiSource("half the first-order prediction of the accuracy change", prediction_derived=True)
    assert decide_p4(d, sesoi=0.02, sesoi_source=pred).verdict is Verdict.NEGLIGIBLE
    assert decide_p4(diffs_with(0.1, 0.05), sesoi=0.02, sesoi_source=se).verdict is Verdict.EFFECT
    with pytest.raises(InvalidArgument, match="SesoiSource"):
        decide_p4(d, sesoi=0.02)
    with pytest.raises(InvalidArgument, match="SesoiSource"):
        decide_p4(d, sesoi=0.02, sesoi_source="the evaluation's standard error")  # a string is not a type
    with pytest.raises(InvalidArgument, match="prediction_derived"):
        SesoiSource("x", prediction_derived="yes")
    assert decide_p4(np.zeros(12)).verdict is Verdict.UNINFORMATIVE
    assert decide_p4(diffs_with(-0.1, 0.05)).verdict is Verdict.OPPOSITE


def test_bracket_sets_sesoi_size_and_power():
    """Issue 42: delta_hat bracketed by the attribution along both arms' paths; SESOI is
    half the lower end; the size is judged against the bracket, not a point."""
    p = Pilot(delta_hat=1.0, sd=0.2, seeds=(100, 101), delta_hat_surgical=3.0)
    assert p.bracket == (1.0, 3.0) and p.magnitude == 1.0
    d = decide_signed("P2", diffs_with(2.0, 0.3), p)
    assert d.sesoi == pytest.approx(0.5) and d.size is Size.COMPATIBLE  # inside [1, 3]: a point 1.0 says larger
    assert decide_signed("P2", diffs_with(2.0, 0.3), PILOT).size is Size.LARGER
    assert decide_signed("P2", diffs_with(3.6, 0.3), p).size is Size.LARGER
    straddle = Pilot(delta_hat=-0.6, sd=0.01, seeds=(1, 2), delta_hat_surgical=2.6)
    assert straddle.magnitude == 0 and not straddle.accepted(12)  # the paths disagree on the sign: no power


def test_acceptance_is_on_power_not_sign():
    """A bracket wholly below 0 (the attribution predicts the opposite of the theory's
    orientation) is still accepted on power, and "opposite" is a publishable verdict."""
    p = Pilot(delta_hat=-1.0, sd=0.2, seeds=(1, 2), delta_hat_surgical=-2.0)
    assert p.accepted(12)
    assert decide_signed("P2", diffs_with(-1.5, 0.3), p).verdict is Verdict.OPPOSITE


def test_own_drift_flat_only_inside_sesoi():
    flat = own_drift("surgical", diffs_with(0.05, 0.1), 0.5)
    assert flat.flat == "flat"
    moved = own_drift("surgical", diffs_with(-0.6, 0.1), 0.5)  # spillover in an exchangeable arm
    assert moved.flat == "not flat" and moved.high < 0
    assert own_drift("surgical", diffs_with(0.0, 0.6), 0.5).flat == "not flat"  # too wide to say flat
    assert own_drift("surgical", diffs_with(0.0, 0.1), None).flat == "no SESOI"


def test_own_drift_claims_flat_only_of_exchangeable_arms():
    """THEORY.md's "exchangeable variants stay flat" is not a claim about the baseline (it
    carries the pathway) or a dose arm (it keeps part of it): their drift is reported with
    its interval, and "flat?" reads NO_CLAIM however small it is (session 5 found the
    baseline labelled "flat")."""
    for role in ("baseline", "dose:0.1"):
        assert own_drift(role, diffs_with(0.0, 0.01), 0.5).flat == NO_CLAIM
    assert own_drift("treatment", diffs_with(0.0, 0.01), 0.5).flat == "flat"


# ------------------------------------------------------------------ dose-response
def _dose_data(slope, noise, seed=0, n=12):
    from exchange.lab.verdict import Pilot

    rng = np.random.default_rng(seed)
    dh = np.array([0.05, 0.1, 0.2, 0.4])
    diffs = slope * dh[:, None] + noise * rng.standard_normal((dh.size, n))
    pilots = [Pilot(float(x), noise, (100, 101)) for x in dh]
    return dh, diffs, pilots


@pytest.mark.parametrize("slope, want", [(1.0, "effect"), (0.0, "negligible"), (-1.0, "opposite")])
def test_dose_response_slope_confirms_refutes_or_opposes(slope, want):
    from exchange.lab.verdict import decide_dose_response

    dh, diffs, pilots = _dose_data(slope, 0.02)
    r = decide_dose_response("P2", dh, diffs, pilots)
    assert r.accepted and r.verdict.value == want, r
    assert r.low < slope < r.high
    if want == "effect":
        assert r.size.value == "compatible with the prediction"


def test_dose_response_without_power_is_uninformative():
    from exchange.lab.verdict import decide_dose_response, dose_response_mde

    dh, diffs, pilots = _dose_data(1.0, 0.5)
    assert dose_response_mde(pilots, 12) > 1 / 3
    assert decide_dose_response("P2", dh, diffs, pilots).verdict.value == "uninformative at this dose"


def test_dose_response_mde_matches_the_simulated_power():
    """At slope = MDE the test rejects slope 0 in ~80% of simulated designs (the formula
    is the one the acceptance rule uses)."""
    from exchange.lab.verdict import decide_dose_response, dose_response_mde

    _, _, pilots = _dose_data(0.0, 0.2)
    mde = dose_response_mde(pilots, 12)
    hits = 0
    for seed in range(400):
        dh, diffs, _ = _dose_data(mde, 0.2, seed=seed)
        r = decide_dose_response("P2", dh, diffs, pilots)
        hits += r.low > 0
    assert 0.72 < hits / 400 < 0.88, hits
