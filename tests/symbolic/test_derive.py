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
