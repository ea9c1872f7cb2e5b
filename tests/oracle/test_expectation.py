"""Expected event coefficients vs exact credit: zero drift for exchangeable objectives,
GRPO's drift equal to the T3 closed form, Monte Carlo within its interval."""

import numpy as np
import pytest
import torch

from exchange.objectives import get
from exchange.oracle import TabularPolicy, exact_credit, expected_coefficients, get_env
from exchange.oracle.summary import summarize, t3_check, zero_credit_mask

torch.set_num_threads(1)
# Exact expectations are sums of <= 10^3 float64 terms: relative error ~1e-14.
REL = 1e-11
CASES = {"template": 3, "filler": 2}  # env -> G (enumeration stays < 1k groups per prompt)


@pytest.fixture(scope="module")
def results():
    out = {}
    for env_name, g in CASES.items():
        env = get_env(env_name)
        table = exact_credit(env, TabularPolicy.random(env, seed=1))
        for obj in ("grpo", "dr_grpo", "dapo", "rloo"):
            out[env_name, obj] = expected_coefficients(get(obj).bind(), table, g, method="exact", name=obj)
    return out


def _rel(values, ec):
    return np.abs(values) / np.abs(ec.centred).max()


@pytest.mark.parametrize("env_name", list(CASES))
@pytest.mark.parametrize("obj", ["dr_grpo", "dapo", "rloo"])
def test_exchangeable_objectives_have_no_drift_on_shared_and_null_events(results, env_name, obj):
    ec = results[env_name, obj]
    m = ec.table.kind_mask("shared", "null")
    assert m.any()
    assert _rel(ec.mean[m], ec).max() <= REL  # THEORY.md (D)
    assert ec.method == "exact"


@pytest.mark.parametrize("env_name", list(CASES))
@pytest.mark.parametrize("obj", ["dr_grpo", "rloo"])
def test_constant_normaliser_objectives_are_unbiased_policy_gradients(results, env_name, obj):
    # E[K~_e] = s * d pi (Q - V) for one scale s: zero on every zero-credit event.
    ec = results[env_name, obj]
    t = ec.table
    ref = t.visit * t.credit
    s = ec.centred @ ref / (ref @ ref)
    assert s > 0
    assert _rel(ec.centred - s * ref, ec).max() <= REL
    assert _rel(ec.centred[zero_credit_mask(t)], ec).max() <= REL


def test_dapo_token_mean_drifts_on_length_changing_filler(results):
    # Finding: with one group per batch, DAPO's 1/sum_j L_j couples a response's weight
    # to its own length, so filler/<eos> events (credit 0) get a centred drift; it is
    # zero on shared and null events (test above) because the normaliser is a group constant.
    ec = results["filler", "dapo"]
    tail = ec.table.kind_mask("zero") & (ec.table.position >= 2)
    assert _rel(ec.centred[tail], ec).max() > 1e-3


@pytest.mark.parametrize("env_name", list(CASES))
def test_grpo_drift_matches_the_t3_closed_form(results, env_name):
    ec = results[env_name, "grpo"]
    chk = t3_check(ec)
    assert len(chk.events) >= 2
    assert chk.matches(rtol=1e-10), (chk.measured, chk.predicted)
    assert np.abs(chk.predicted).max() > 1e-3 * np.abs(ec.mean).max()  # a real drift, not 0 = 0


def test_t3_sign_follows_the_reward_length_covariance(results):
    # Template p0 wants "1": the correct answer is the shortest response, so the shared
    # prefix is pushed up; p1 wants "0 1 1", the longest: pushed down (T3).
    ec = results["template", "grpo"]
    t = ec.table
    for r in t.responses:
        prefix = (t.prompt == r.prompt) & (t.position == 0)
        cov = r.prob @ ((r.reward - r.prob @ r.reward) * (1.0 / r.lengths - r.prob @ (1.0 / r.lengths)))
        assert np.sign(ec.mean[prefix][0]) == np.sign(cov) != 0
    assert summarize(ec).shared_drift != 0


def test_grpo_moves_zero_credit_distributions(results):
    ec = results["filler", "grpo"]
    s = summarize(ec)
    assert abs(s.zero_drift) > 1e-2
    assert abs(summarize(results["filler", "rloo"]).zero_drift) <= REL


def test_monte_carlo_agrees_with_exact_within_its_interval():
    env = get_env("parity")
    t = exact_credit(env, TabularPolicy.random(env, seed=2))
    fn = get("grpo").bind()
    exact = expected_coefficients(fn, t, 2, method="exact")
    mc = expected_coefficients(fn, t, 2, method="monte-carlo", samples=3000, seed=5)
    z = np.abs(mc.mean - exact.mean) / np.maximum(mc.mean_se, 1e-300)
    informative = mc.mean_se > 0
    assert informative.sum() > 10
    assert z[informative].max() < 5.0
    assert np.mean(z[informative] < 1.96) > 0.8  # roughly the nominal coverage


def test_multiset_enumeration_equals_ordered_enumeration():
    env = get_env("parity")
    t = exact_credit(env, TabularPolicy.random(env, seed=4))
    fn = get("grpo").bind()
    a = expected_coefficients(fn, t, 2, method="exact")
    b = expected_coefficients(fn, t, 2, method="exact", ordered=True)
    assert np.allclose(a.mean, b.mean, rtol=0, atol=1e-14)
    assert np.allclose(a.centred_second, b.centred_second, rtol=0, atol=1e-14)


def test_quadrants_partition_the_update_and_credit_needs_entropy(results):
    for ec in results.values():
        s = summarize(ec)
        assert abs(s.quadrant_share.sum() - 1.0) <= 1e-12 or ec.quadrant_mass.sum() == 0
        t = ec.table
        # No credit without entropy: a forced token (H = 0) has Q = V.
        assert np.all(t.credit[t.entropy == 0] == 0)
