"""Derivation verdicts: when K vanishes, and its sign with one correct response."""

from __future__ import annotations

import json

import pytest
import sympy as sp

from exchange.cli import main
from exchange.errors import InvalidArgument
from exchange.symbolic import NoClosedForm, derive, get_spec
from exchange.symbolic.surrogates import ppo_clip, ppo_clip_min_form


def _at(expr, d, lengths):
    return expr.xreplace({L: sp.Integer(v) for L, v in zip(d.group.L, lengths)})


@pytest.mark.parametrize("name", ["dr_grpo", "dapo", "cispo", "rloo"])
def test_exchangeable_objectives_cancel_on_policy(name):
    d = derive(name, 3)
    assert d.on_policy.vanishes == "always"
    assert d.on_policy.binary_sign == "0"


@pytest.mark.parametrize("name", ["grpo", "gspo", "reinforce_pp"])
def test_length_coupled_objectives_cancel_only_for_equal_lengths(name):
    d = derive(name, 3)
    g = d.group
    assert d.on_policy.vanishes == "iff"
    sol = {c.lhs: c.rhs for c in d.on_policy.conditions[0]}
    assert {sp.simplify(L.xreplace(sol)) for L in g.L} == {g.L[2]}  # L_1 = L_2 = L_3


def test_grpo_binary_sign_follows_length_of_the_correct_response():
    d = derive("grpo", 3)
    K = d.on_policy.binary_K.xreplace({sp.Symbol("sigma", positive=True): 1, d.group.Gn: 3})
    assert _at(K, d, (1, 2, 2)) > 0  # correct response shorter: shared tokens pushed up
    assert _at(K, d, (4, 2, 2)) < 0  # longer: pushed down
    assert _at(K, d, (2, 2, 2)) == 0
    w = d.weights
    assert w is not None and sp.simplify(w[0] - 1 / (d.group.Gn * d.group.L[0])) == 0


def test_dapo_off_policy_regions():
    d = derive("dapo", 3)
    by_label = {v.region: v for v in d.regions}
    assert by_label["rho > 1 + epsilon_high"].vanishes == "never"
    assert by_label["rho > 1 + epsilon_high"].binary_sign == "-"
    assert by_label["rho < 1 - epsilon_low"].binary_sign == "+"
    assert by_label["1 - epsilon_low <= rho <= 1 + epsilon_high"].vanishes == "always"


def test_cispo_cancels_in_every_region():
    d = derive("cispo", 3)
    assert all(v.vanishes == "always" for v in d.regions)


def test_gspo_inside_trust_region_needs_equal_s_over_L():
    d = derive("gspo", 3, eps_low=0.2, eps_high=0.3)
    inside = next(v for v in d.regions if v.region.startswith("1 - epsilon_low <= every"))
    assert inside.vanishes == "iff"
    g = d.group
    sol = {c.lhs: c.rhs for c in inside.conditions[0]}
    ratios = {sp.simplify((s / L).xreplace(sol)) for s, L in zip(g.s, g.L)}
    assert len(ratios) == 1
    assert not d.regions_complete


@pytest.mark.parametrize("G", [2, 4])
def test_other_group_sizes(G):
    d = derive("grpo", G)
    assert d.on_policy.vanishes == "iff" and len(d.on_policy.conditions[0]) == G - 1


def test_ppo_clip_piecewise_equals_min_form():
    r, A = sp.Symbol("r", positive=True), sp.Symbol("A", real=True)
    el, eh = sp.Rational(1, 5), sp.Rational(7, 25)
    pw, mn = ppo_clip(r, A, el, eh), ppo_clip_min_form(r, A, el, eh)
    for rv in (sp.Rational(1, 2), sp.Rational(9, 10), 1, sp.Rational(11, 10), sp.Rational(3, 2)):
        for av in (-2, -sp.Rational(1, 3), 0, sp.Rational(1, 2), 3):
            assert pw.subs({r: rv, A: av}) == mn.subs({r: rv, A: av})


def test_no_closed_form_and_unknown_names():
    with pytest.raises(NoClosedForm, match="random"):
        get_spec("clip_cov")
    with pytest.raises(InvalidArgument, match="not a built-in"):
        get_spec("nope")
    with pytest.raises(InvalidArgument, match="G=9"):
        derive("grpo", 9)


def test_cli_text_json_latex_and_errors(capsys):
    assert main(["derive", "dapo"]) == 0
    out = capsys.readouterr().out
    assert "always" in out and "rho > 1 + epsilon_high" in out
    assert main(["derive", "dapo", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["regions"][0]["vanishes_for_all_rewards"] == "always"
    assert main(["derive", "dapo", "--latex"]) == 0
    assert "\\frac" in capsys.readouterr().out
    assert main(["derive", "clip_cov"]) == 2
    assert "no closed form" in capsys.readouterr().err
    assert main(["derive", "dapo", "--param", "eps_high"]) == 2
    assert main(["derive", "--list"]) == 0


def test_every_catalog_objective_is_derived_or_says_why():
    from exchange.objectives import VARIANTS, names
    from exchange.symbolic import NO_CLOSED_FORM, spec_names

    derivable = set(spec_names())
    wrong = [name for name in [*names(), *VARIANTS] if (name in derivable) == (name in NO_CLOSED_FORM)]
    assert not wrong, f"neither derived nor said why (or both): {wrong}"


def _on_policy_by_state(d):
    from exchange.core.vocabulary import Regime

    return {v.entropy_state: v for v in d.regions if v.regime is Regime.ON_POLICY}


@pytest.mark.slow  # ~2-5 s: the fast tier stays under 3 minutes
def test_hapo_batch_z_leaves_alpha_z_times_the_sign_imbalance():
    # THEORY.md section 6: K_e = alpha z (n_pos - n_neg) / N while the z-clip is slack, and
    # the clip, once it binds for every response, makes the shift -+|A_i|/phi: zero-sum.
    d = derive("hapo", 3, z_scope="batch")
    g, alpha = d.group, sp.Symbol("alpha", positive=True)
    states = _on_policy_by_state(d)
    inside = states["|z| <= |A_i|/phi"]
    assert inside.vanishes == "iff" and inside.conditions == ((sp.Eq(g.z_event, 0),),)
    assert sp.simplify(inside.binary_K - alpha * g.z_event * (1 - 2) / g.N) == 0  # one positive, two negative
    assert states["z > |A_i|/phi"].vanishes == "always"
    assert states["z < -|A_i|/phi"].vanishes == "always"
    assert not d.regions_complete  # mixed z states (between min and max |A_i|/phi) are not cut
    assert derive("hapo", 2, z_scope="batch").on_policy.vanishes == "always"  # n_pos = n_neg


@pytest.mark.slow  # ~1-3 s: the fast tier stays under 3 minutes
def test_hapo_response_z_differs_between_copies():
    d = derive("hapo", 3)
    g = d.group
    inside = _on_policy_by_state(d)["|every z_1, z_2, z_3| <= |A_i|/phi"]
    assert inside.vanishes == "iff"
    assert g.z_event not in d.K.free_symbols and set(g.z) <= d.K.free_symbols
    assert inside.binary_sign == "sign(z_1 - z_2 - z_3)"


def test_hapo_requires_alpha_below_phi():
    with pytest.raises(InvalidArgument, match="alpha < phi"):
        derive("hapo", 2, alpha=2.0, phi=1.0)


def test_dcpo_cuts_regions_at_its_probability_dependent_bounds():
    d = derive("dcpo", 3)
    by_label = {v.region: v for v in d.regions}
    assert d.on_policy.vanishes == "always"
    assert by_label["low(q) <= rho <= high(q)"].vanishes == "always"
    assert by_label["rho < low(q)"].binary_sign == "+"
    assert by_label["high(q) < rho <= c"].binary_sign == "-"
    assert by_label["rho > c"].vanishes == "always"  # both signs clipped: high(q) < c and the dual clip
    assert d.weights == (1, 1, 1)


def test_sapo_variants_restore_what_their_transformation_targets():
    assert derive("sapo_verl+group_constant_norm", 3).on_policy.vanishes == "always"
    for name in ("sapo+sign_free_clip", "sapo_verl+group_constant_norm+sign_free_clip"):
        assert all(v.vanishes == "always" for v in derive(name, 3).regions), name
    off = derive("sapo+min_replace", 3).regions[1]
    assert off.vanishes == "iff" and {str(c[0]) for c in off.conditions} == {"Eq(rho, 1)", "Eq(tau_neg, tau_pos)"}


@pytest.mark.slow  # ~1-3 s: the fast tier stays under 3 minutes
def test_cli_derives_the_new_specs(capsys):
    assert main(["derive", "dcpo", "-G", "2"]) == 0
    out = capsys.readouterr().out
    assert "high(q" in out and "rho < low(q)" in out
    assert main(["derive", "hapo", "-G", "2", "--param", "z_scope=batch"]) == 0
    assert "one z per event" in capsys.readouterr().out
