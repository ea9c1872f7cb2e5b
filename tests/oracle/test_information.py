"""The CMI bound I(y; R | c) <= H(y | c) (arXiv 2604.11056, THEORY.md section 6), and a
deliberately wrong CMI that the same check must catch."""

import numpy as np
from hypothesis import find, given, settings
from hypothesis import strategies as st

from exchange.oracle import conditional_mutual_information, entropy, exact_credit, hindsight_posterior
from exchange.oracle.env_strategies import oracle_cases

# Both sides are sums of <= 6 float64 terms of size <= log 6: 1e-12 is ~1e4 ulps.
TOL = 1e-12


def correct_cmi(table, c):
    ids = list(table.ctx_events[c])
    return conditional_mutual_information(table.pi[ids], table.reward_dist[ids])


def wrong_cmi(table, c):
    """Conditioning mistake: the posterior is compared with the prompt's reward law
    P(R | x) instead of P(R | c): sum_y pi(y) KL(P(R | c, y) || P(R | x))."""
    ids = list(table.ctx_events[c])
    pi, p_r = table.pi[ids], table.reward_dist[ids]
    root = next(e for e in range(table.n_events) if table.prompt[e] == table.ctx_prompt[c] and table.position[e] == 0)
    p_x = table.reward_dist[list(table.ctx_events[table.context[root]])].T @ table.pi[list(table.ctx_events[table.context[root]])]
    joint = pi[:, None] * p_r
    nz = joint > 0
    return float((joint[nz] * np.log(p_r[nz] / np.broadcast_to(p_x, p_r.shape)[nz])).sum())


def bound_violations(case, cmi_fn):
    """Contexts where ``cmi_fn`` exceeds the entropy or is negative: ``[(c, I, H)]``."""
    env, policy = case
    table = exact_credit(env, policy)
    out = []
    for c in range(len(table.ctx_events)):
        i, h = cmi_fn(table, c), table.ctx_entropy[c]
        if i > h + TOL or i < -TOL:
            out.append((c, i, h))
    return out


@given(oracle_cases())
def test_cmi_never_exceeds_entropy(case):
    assert bound_violations(case, correct_cmi) == []


def test_the_bound_check_catches_a_conditioning_mistake():
    # The same check, on a CMI that conditions on the prompt instead of the context,
    # finds a counterexample (a forced or peaked token whose context already moved R).
    case = find(oracle_cases(), lambda case: bool(bound_violations(case, wrong_cmi)),
                settings=settings(max_examples=500, database=None, derandomize=True))
    assert bound_violations(case, wrong_cmi)
    assert bound_violations(case, correct_cmi) == []


@given(oracle_cases())
def test_cmi_equals_entropy_minus_posterior_entropy(case):
    # I(y; R | c) = H(y | c) - E_{R|c} H(p(. | c, R)): two formulas, one quantity.
    env, policy = case
    t = exact_credit(env, policy)
    for c, events in enumerate(t.ctx_events):
        ids = list(events)
        pi, p_r = t.pi[ids], t.reward_dist[ids]
        p_of_r = pi @ p_r  # [K]
        post = hindsight_posterior(pi, p_r)  # [K, Y]
        assert np.allclose(post.sum(axis=1)[p_of_r > 0], 1.0, atol=1e-12)
        cond_h = sum(p_of_r[k] * entropy(post[k]) for k in range(len(p_of_r)))
        assert abs(t.ctx_cmi[c] - (entropy(pi) - cond_h)) <= 1e-10
        assert np.allclose(t.posterior[ids].T, post, atol=1e-12)


@given(st.integers(2, 6), st.integers(2, 4), st.integers(0, 10_000))
def test_cmi_bound_on_raw_distributions(n_tokens, n_rewards, seed):
    rng = np.random.default_rng(seed)
    pi = rng.dirichlet(np.ones(n_tokens) * 0.3)
    p_r = rng.dirichlet(np.ones(n_rewards) * 0.3, size=n_tokens)
    i = conditional_mutual_information(pi, p_r)
    assert -TOL <= i <= entropy(pi) + TOL
    # Deterministic reward per token: I = H(y) when the tokens' rewards all differ.
    if n_tokens <= n_rewards:
        det = np.eye(n_rewards)[:n_tokens]
        assert abs(conditional_mutual_information(pi, det) - entropy(pi)) <= 1e-12
