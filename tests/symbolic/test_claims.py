"""The paper's claims, settled symbolically (THEORY.md sections 3, 4c)."""

from __future__ import annotations

import pytest
import sympy as sp

from exchange.symbolic.claims import check_claims
from exchange.symbolic.kl_drift import prop31, prop31_numeric
from exchange.symbolic.logodds import cor32, cor32_numeric
from exchange.symbolic.necessity import cor33_example, necessity, necessity_general


@pytest.mark.parametrize("G", range(2, 9))
def test_necessity_forces_equal_weights(G):
    r = necessity(G)
    assert r.rank == G - 1 and r.forces_equal_weights
    # Non-vacuous: an unequal weight vector violates some binary reward vector.
    w = sp.Matrix(list(range(1, G + 1)))
    assert any(v != 0 for v in r.system * w)


def test_necessity_symbolic_G():
    _, _, equal = necessity_general()
    assert equal


def test_cor33_example():
    c = cor33_example()
    assert c.K == 0 and not c.weights_equal and c.K_other == -1 and c.gspo_K_nonzero_polynomial


def test_prop31_series_and_finite_steps():
    r = prop31(3)
    assert r.matches_forward and r.matches_reverse
    assert len(r.fisher_null) == 1 and list(r.fisher_null[0]) == [1, 1, 1]
    errors = [abs(ratio - 1) for _, _, ratio in prop31_numeric()]
    assert errors == sorted(errors, reverse=True) and errors[-1] < 1e-4


def test_cor32_counterexample_value():
    c = cor32()
    eta = sp.Symbol("eta", positive=True)
    assert sp.simplify(c.counterexample - sp.Rational(-3, 10) * eta) == 0
    assert all(v == pytest.approx(-0.3, abs=1e-12) for _, v in cor32_numeric())
    assert sp.simplify(c.tabular_drift - c.claim) == 0
    p1, p2 = sp.symbols("p_1 p_2", positive=True)
    assert any(sp.simplify(f - (p1 - p2)) == 0 for f in c.holds_iff)


@pytest.mark.parametrize("key,verdict", [("necessity", "confirmed"), ("cor3.3", "confirmed"),
                                         ("prop3.1", "confirmed"), ("cor3.2", "qualified"),
                                         ("t3", "confirmed"), ("t4", "confirmed"),
                                         pytest.param("hapo", "qualified", marks=pytest.mark.slow)])  # ~6 s
def test_claim_verdicts(key, verdict):
    (result,) = check_claims(key)
    assert result.verdict == verdict, result.render()


@pytest.mark.slow  # ~6 s: the full suite (CI) runs it
def test_t1_over_the_catalog():
    (result,) = check_claims("t1")
    assert result.verdict == "confirmed"
    assert any("dr_grpo" == name and "always" in text for name, text in result.evidence)


@pytest.mark.slow  # ~2-5 s: the fast tier stays under 3 minutes
def test_t5_restoration_of_every_listed_variant():
    (result,) = check_claims("t5")
    assert result.verdict == "confirmed", result.render()
    assert {"sapo+sign_free_clip", "gspo_token+min_replace", "cispo+adv_orthogonal"} <= {n for n, _ in result.evidence}
