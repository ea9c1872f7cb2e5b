"""The built-in objectives get the verdicts THEORY.md derives, with the mechanism ids.

`expected` metadata lives on each Objective (derived in THEORY.md and
../shared/reference/objectives.md, never copied from checker output); this test compares
the checker's findings with it, on-policy and off-policy.
"""

import pytest

from exchange import check
from exchange.objectives import REGIMES, get, names
from exchange.checker.properties import PROPERTIES

CORE = ["grpo", "dr_grpo", "dapo", "gspo", "cispo", "rloo", "reinforce_pp"]


@pytest.fixture(scope="module")
def reports():
    return {name: check(get(name).bind(), max_examples=25, seed=0) for name in CORE}


@pytest.mark.parametrize("name", CORE)
@pytest.mark.parametrize("regime", REGIMES)
def test_verdicts_match_theory(reports, name, regime):
    report = reports[name]
    expected = get(name).expected[regime]
    broken = {p for p in PROPERTIES if not report.holds(p, regime)}
    assert broken == set(expected.breaks), report
    assert set(report.mechanisms_in(regime)) == set(expected.mechanisms), report


def test_core_names_are_registered():
    assert set(CORE) <= set(names())


def test_grpo_counterexample_is_the_length_probe(reports):
    report = reports["grpo"]
    cx = report.counterexample("shared_cancellation", "on_policy")
    assert cx is not None and cx.n == 4 and len(set(cx.lengths.tolist())) > 1  # T3: unequal lengths
    assert report.holds("zero_sum") and report.holds("null_on_equal_rewards")


def test_dapo_breaks_only_off_policy_by_clipping(reports):
    report = reports["dapo"]
    assert report.holds("exchangeable", "on_policy")
    assert not report.holds("exchangeable", "off_policy")
    assert report.mechanisms_in("off_policy") == ["M2"]
