"""Issue 42's dose rule, fed the measured private-row numbers as fixed input.

The forced-S M3 design (S's output row reached only by the residual) measured, per seed,
the baseline-minus-surgical effect 1.19 [1.04, 1.34] nats (12 seeds) and dose arms that
keep a fraction of the residual: under Adam 1% gave 53-60% of the effect and 10% gave
66-72%; under SGD 1% gave 1.5-4%. delta_hat was low by 6-38%, so its bracket's lower end
is ~0.74 and the SESOI ~0.37. The rule must not read the Adam numbers as first order and
must read the SGD ones so."""

import numpy as np
import pytest

from exchange.errors import InvalidArgument
from exchange.lab.dose_rule import DOSE_DEPARTS, DOSE_FOLLOWS, decide_dose, intercept_fit
from exchange.lab.verdict import Pilot, decide_dose_response

SEEDS = 12
SESOI = 0.74 / 2
D_FULL = 1.19 + 0.236 * np.linspace(-1.5, 1.5, SEEDS)  # mean 1.19, SD ~0.24 as measured


def _dose(lo, hi):
    return np.linspace(lo, hi, SEEDS)[::-1] * D_FULL  # share of each seed's own full effect


def test_adam_private_row_is_not_first_order():
    d = np.stack([_dose(0.53, 0.60), _dose(0.66, 0.72)])
    res = decide_dose("P2", [0.01, 0.1], d, D_FULL, SESOI)
    assert [r.verdict for r in res.rows] == [DOSE_DEPARTS, DOSE_DEPARTS]
    assert not res.fit["supports"] and res.fit["intercept_low"] > SESOI
    assert not res.first_order and "does not follow" in res.label
    assert 0.5 < res.rows[0].share < 0.61  # the report prints the share: ~56%, not 1%


def test_sgd_private_row_is_first_order():
    d = np.stack([_dose(0.015, 0.04)])
    res = decide_dose("P2", [0.01], d, D_FULL, SESOI)
    assert res.rows[0].verdict == DOSE_FOLLOWS
    assert res.fit["supports"]
    assert res.first_order and res.label.startswith("follows")


def test_the_old_fit_through_the_origin_hides_the_small_dose():
    """Why the rule changed: through the origin, f = 1 dominates the slope, and the Adam
    numbers read as an effect with slope near 1 although the 1% dose is ~56x its prediction."""
    doses = [0.01, 0.1, 1.0]
    d = np.stack([_dose(0.53, 0.60), _dose(0.66, 0.72), D_FULL])
    pilots = [Pilot(f * 1.0, 0.05, (100, 101)) for f in doses]
    old = decide_dose_response("P2", doses, d, pilots)
    assert old.low > 0 and old.high > 0.9  # "effect": the small doses vanish in the fit
    assert not decide_dose("P2", doses[:2], d[:2], D_FULL, SESOI).first_order


def test_a_dose_inside_one_side_only_is_inconclusive_not_follows():
    rng = np.random.default_rng(0)
    d = np.stack([0.01 * D_FULL + 0.3 + rng.normal(0, 0.3, SEEDS)])
    res = decide_dose("P2", [0.01], d, D_FULL, SESOI)
    assert res.rows[0].verdict not in (DOSE_FOLLOWS, DOSE_DEPARTS)
    assert not res.per_dose


@pytest.mark.parametrize("keeps,shape,msg", [([0.0], (1, SEEDS), "0 < f < 1"), ([1.0], (1, SEEDS), "0 < f < 1"),
                                              ([0.1], (2, SEEDS), "shape")])
def test_bad_input_names_the_field(keeps, shape, msg):
    with pytest.raises(InvalidArgument, match=msg):
        decide_dose("P2", keeps, np.zeros(shape), D_FULL, SESOI)
    with pytest.raises(InvalidArgument, match="sesoi"):
        intercept_fit([0.1], np.zeros((1, SEEDS)), D_FULL, 0.0)
