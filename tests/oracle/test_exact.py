"""Exact credit by enumeration: zero credit for filler by construction, the per-event
policy-gradient identity against autograd, and a wrong variant that must be caught."""

import numpy as np
import pytest
import torch
from hypothesis import find, given, settings
from hypothesis import strategies as st

from exchange.errors import InvalidArgument
from exchange.models import TinyLM, TinyLMConfig
from exchange.oracle import (
    Env, LMPolicy, TabularPolicy, event_policy_gradient, exact_credit, expected_reward, filler_env, get_env,
    parity_env, policy_gradient_coefficients,
)
from exchange.oracle.env_strategies import oracle_cases

SEEDS = st.integers(0, 10_000)
SCALES = st.sampled_from([0.0, 0.5, 1.0, 3.0])


@given(SEEDS, SCALES)
def test_filler_tokens_have_zero_credit_by_construction(seed, scale):
    env = filler_env()
    t = exact_credit(env, TabularPolicy.random(env, seed=seed, scale=scale))
    filler = np.isin(t.token, list(env.zero_credit_tokens))
    assert filler.sum() > 10
    assert np.abs(t.credit[filler]).max() <= 1e-12
    # The decision token carries credit whenever both digits are possible.
    decision = t.position == 1
    assert np.abs(t.credit[decision]).max() > 1e-3


@given(SEEDS, SCALES)
def test_template_prefix_is_shared_and_parity_irrelevant_positions_have_zero_credit(seed, scale):
    env = get_env("template")
    t = exact_credit(env, TabularPolicy.random(env, seed=seed, scale=scale))
    prefix = t.position < 2
    assert np.all(t.kind[prefix] == 0) and np.all(t.credit[prefix] == 0)  # kind 0 = shared
    env = parity_env()
    t = exact_credit(env, TabularPolicy.random(env, seed=seed, scale=scale))
    assert np.abs(t.credit[np.isin(t.position, [0, 2])]).max() <= 1e-12


def test_untied_parity_gives_irrelevant_positions_weak_credit():
    # Control: without state tying the later policy depends on positions 0 and 2,
    # so their tokens carry (small) credit; the zero-credit check above can fail.
    env = parity_env(tie_irrelevant=False)
    t = exact_credit(env, TabularPolicy.random(env, seed=0))
    assert np.abs(t.credit[t.position == 0]).max() > 1e-3


def _autograd_gradient(env, policy):
    logits = policy.logits.detach().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(expected_reward(env, policy.with_logits(logits)), logits)
    return grad


def pg_mismatch(case, coefficients_fn):
    env, policy = case
    t = exact_credit(env, policy)
    ours = event_policy_gradient(t, policy, coefficients_fn(t))
    ref = _autograd_gradient(env, policy)
    return float((ours - ref).abs().max()), float(ref.abs().max())


@given(oracle_cases())
def test_exact_policy_gradient_is_the_sum_over_events(case):
    # grad J = sum_x w_x sum_e d(c) pi(y|c) (Q - V) grad log pi(y|c), against autograd.
    err, size = pg_mismatch(case, policy_gradient_coefficients)
    assert err <= 1e-12 * max(1.0, size)


@given(oracle_cases())
def test_any_context_baseline_gives_the_same_gradient(case):
    # Q instead of Q - V: sum_y pi grad log pi = 0, so the baseline drops out.
    def q_only(t):
        return np.asarray(t.env.prompt_weights)[t.prompt] * t.visit * t.q

    err, size = pg_mismatch(case, q_only)
    assert err <= 1e-12 * max(1.0, size)


def test_the_gradient_check_catches_a_missing_pi():
    # Wrong variant: weight by d(c) only (forgetting pi(y|c)); the same check fails.
    def no_pi(t):
        return np.asarray(t.env.prompt_weights)[t.prompt] * t.d * t.credit

    case = find(oracle_cases(), lambda c: (lambda e, s: e > 1e-6 * max(1.0, s))(*pg_mismatch(c, no_pi)),
                settings=settings(max_examples=300, database=None, derandomize=True))
    err, size = pg_mismatch(case, no_pi)
    assert err > 1e-6


def test_values_and_visitation_are_consistent():
    env = get_env("template")
    t = exact_credit(env, TabularPolicy.random(env, seed=3))
    for r in t.responses:
        assert abs(r.prob.sum() - 1.0) <= 1e-12
        root = [e for e in range(t.n_events) if t.prompt[e] == r.prompt and t.position[e] == 0]
        assert abs(t.value[root[0]] - r.prob @ r.reward) <= 1e-12
    # V(c) = sum_y pi Q and the visitation of a context is the sum of its parent event's.
    for events in t.ctx_events:
        ids = list(events)
        assert abs(t.pi[ids] @ t.q[ids] - t.value[ids[0]]) <= 1e-12
        assert abs(t.pi[ids].sum() - 1.0) <= 1e-12


def test_lm_policy_enumerates_and_satisfies_the_bound():
    env = filler_env()
    model = TinyLM(TinyLMConfig(vocab_size=6, n_positions=16, d_model=16, n_heads=2, n_layers=1, seed=1))
    t = exact_credit(env, LMPolicy(env, model, prompt_tokens=[(5,)]))
    assert abs(t.responses[0].prob.sum() - 1.0) <= 1e-12
    assert np.all(t.ctx_cmi <= t.ctx_entropy + 1e-12)
    # No state tying in the LM: tail fillers still have zero credit (the reward is fixed
    # after the decision), the preamble filler need not.
    tail = (t.position >= 2) & np.isin(t.token, list(env.zero_credit_tokens))
    assert np.abs(t.credit[tail]).max() <= 1e-12


def test_user_reward_and_errors():
    env = Env(name="mine", vocab=("a", "b"), horizon=2, rewards=lambda y: float(y == (1, 1)))
    t = exact_credit(env, TabularPolicy.random(env, seed=0, scale=0.0))
    assert abs(t.value[0] - 0.25) <= 1e-15
    with pytest.raises(InvalidArgument, match="horizon=9"):
        Env(name="big", vocab=("a", "b"), horizon=9, rewards=lambda y: 0.0)
    with pytest.raises(InvalidArgument, match="vocab has len=7"):
        Env(name="big", vocab=tuple("abcdefg"), horizon=2, rewards=lambda y: 0.0)
    bad = Env(name="bad", vocab=("a", "b"), horizon=1, rewards=lambda y: 1 / 0)
    with pytest.raises(InvalidArgument, match="ZeroDivisionError"):
        exact_credit(bad, TabularPolicy.random(bad))
    with pytest.raises(InvalidArgument, match="env='nope'"):
        get_env("nope")
