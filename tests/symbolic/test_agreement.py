"""Each symbolic spec agrees with the torch objective of the same name (1e-9 relative).

The closed form is differentiated by sympy from the surrogate written once in
exchange/symbolic/catalog.py; the reference is ``exchange.token_coefficients`` on the
torch loss, on- and off-policy, on every real token of an event-consistent group.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from exchange import token_coefficients
from exchange.objectives import get
from exchange.symbolic import closed_form, closed_form_coefficients, closed_form_shared_K, spec_names

from tests.symbolic.rollouts import one_group

REL = 1e-9
# Absolute floor: with (nearly) equal rewards sympy's R_i - mean(R) is exact while
# torch's leaves ~1e-16 |R| of round-off, which 1/(std + 1e-4) amplifies by up to 1e4.
ROUND_OFF = 1e4 * 1e-15
# (objective, overrides): defaults, and wide clip ranges so GSPO's sequence ratios are
# also seen inside the trust region, and verl-style two-sided CISPO.
CASES = [(name, {}) for name in spec_names()] + [
    ("gspo", {"eps_low": 0.2, "eps_high": 0.3}),
    ("cispo", {"eps_low": 0.2}),
    ("grpo", {"loss_agg_mode": "token-mean", "scale": "none"}),
] + [(name, o) for name, o in [("gspo_token", {"eps_low": 0.2, "eps_high": 0.3}), ("ppo", {"clip_c": 1.5}),
                               ("sapo", {"tau_pos": 2.0, "tau_neg": 0.5}), ("hapo", {"z_scope": "batch"}),
                               ("hapo", {"alpha": 0.5, "phi": 1.0, "eps_high": 0.28}),
                               ("dcpo", {"clip_c": 1.5, "eps_low": 0.1}),
                               ("gspo_token+min_replace", {"eps_low": 0.2, "eps_high": 0.3})] if name in spec_names()]


@st.composite
def groups(draw, off_policy: bool):
    G = draw(st.integers(2, 4))
    lengths = draw(st.lists(st.integers(1, 4), min_size=G, max_size=G))
    binary = draw(st.booleans())
    reward = st.sampled_from([0.0, 1.0]) if binary else st.floats(-2.0, 2.0, allow_nan=False)
    rewards = draw(st.lists(reward, min_size=G, max_size=G))
    prob = st.floats(0.05, 0.95)
    old = [draw(st.lists(prob, min_size=L, max_size=L)) for L in lengths]
    if off_policy:
        spread = draw(st.sampled_from([1e-4, 0.15, 0.6]))
        lr = st.floats(-1.0, 1.0).map(lambda x: x * spread)
        ratios = [draw(st.lists(lr, min_size=L, max_size=L)) for L in lengths]
        # a current probability q * rho is at most 1: rho <= 1/q (log-probs are <= 0)
        ratios = [[min(r, -math.log(q)) for r, q in zip(rs, qs)] for rs, qs in zip(ratios, old)]
    else:
        ratios = [[0.0] * L for L in lengths]
    entropies = [draw(st.lists(st.floats(0.0, 3.0), min_size=L, max_size=L)) for L in lengths]
    return rewards, lengths, old, ratios, entropies


def _compare(name, overrides, rewards, lengths, old, ratios, entropies=None):
    rollout, lp = one_group(rewards, lengths, old, ratios, entropies)
    cf = closed_form(name, len(rewards), **overrides)
    torch_kappa = token_coefficients(get(name).bind(**overrides), lp, rollout)
    sym_kappa = closed_form_coefficients(cf, lp, rollout)
    scale = max(float(torch_kappa.abs().max()), float(sym_kappa.abs().max()))
    tol = REL * scale + ROUND_OFF * max(1.0, max(abs(r) for r in rewards))
    assert float((torch_kappa - sym_kappa).abs().max()) <= tol, \
        f"torch={torch_kappa.tolist()}\nclosed form={sym_kappa.tolist()}"
    K = closed_form_shared_K(cf, lp, rollout)
    assert abs(K - float(torch_kappa[:, 0].sum())) <= tol * len(rewards)
    return torch_kappa


@pytest.mark.parametrize("name,overrides", CASES, ids=[f"{n}{'-' + '-'.join(o) if o else ''}" for n, o in CASES])
@settings(max_examples=12)  # x ~37 cases x 2 regimes; plus the pinned regions below
@given(case=groups(off_policy=False))
@example(case=([1.0, 0.0, 0.0], [1, 3, 2], [[0.5], [0.5, 0.3, 0.2], [0.5, 0.9]], [[0.0], [0.0] * 3, [0.0] * 2],
               [[1.0], [1.0, 2.0, 0.1], [1.0, 3.0]]))
def test_on_policy(name, overrides, case):
    _compare(name, overrides, *case)


def _marked(cases, hypothesis: bool):
    return [pytest.param(name, o, id=f"{name}{'-' + '-'.join(o) if o else ''}") for name, o in cases]


@pytest.mark.parametrize("name,overrides", _marked(CASES, hypothesis=True))
@settings(max_examples=12)
@given(case=groups(off_policy=True))
def test_off_policy(name, overrides, case):
    _compare(name, overrides, *case)


# Non-vacuity: pinned shared-event ratios in each clip region, mixed rewards, so every
# branch of the Piecewise (live and clipped, both signs) is compared at least once.
@pytest.mark.parametrize("name,overrides", _marked(CASES, hypothesis=False))
@pytest.mark.parametrize("shared_log_ratio", [-0.7, 0.03, 0.7, 1.3])
def test_every_region(name, overrides, shared_log_ratio):
    rewards = [1.0, 0.0, 0.5, 0.0]
    lengths = [1, 3, 2, 4]
    old = [[0.25, 0.5, 0.6, 0.7][:L] for L in lengths]  # 0.25 * e^1.3 < 1: a valid current probability
    ratios = [[shared_log_ratio] + [0.3 * (-1) ** (i + t) for t in range(1, L)] for i, L in enumerate(lengths)]
    kappa = _compare(name, overrides, rewards, lengths, old, ratios)
    assert torch.isfinite(kappa).all()


# DCPO's bounds move with the token's behaviour probability q: place the shared ratio just
# inside and just outside low(q) and high(q) as the torch objective computes them (so a
# wrong closed-form bound shows up as a disagreement), for small q where high(q) reaches
# the cap max(c, 10), and with the dual clip c below and above high(q).
@pytest.mark.parametrize("q", [0.01, 0.3, 0.9])
@pytest.mark.parametrize("overrides", [{}, {"clip_c": 1.5}, {"eps_low": 0.1, "eps_high": 0.5}])
def test_dcpo_bounds_at_the_edges(q, overrides):
    from exchange.objectives.dcpo import dynamic_bounds

    obj = get("dcpo")
    probe, _ = one_group([1.0, 0.0], [1, 1], [[q], [q]], [[0.0], [0.0]])
    low, high = (float(b[0, 0]) for b in dynamic_bounds(probe, obj.params(**overrides)))
    tested = 0
    for edge in (low, high, obj.params(**overrides)["clip_c"]):
        for factor in (1 - 1e-3, 1 + 1e-3):
            if q * edge * factor > 1:  # unreachable: the current probability q * rho would exceed 1
                continue
            log_ratio = math.log(edge * factor)
            _compare("dcpo", overrides, [1.0, 0.0, 0.2], [1, 2, 2], [[q], [q, 0.5], [q, 0.5]],
                     [[log_ratio], [log_ratio, 0.1], [log_ratio, -0.1]])
            tested += 1
    assert tested >= 2  # at least one edge, from both sides


@pytest.mark.parametrize("scope", ["response", "batch"])
def test_pinned_hapo_case_reaches_both_entropy_clip_states(scope):
    # Non-vacuity of test_every_region for HAPO: its default entropies (1 + 0.1 t) put some
    # tokens' z inside [-|A|/phi, |A|/phi] and some outside, so both kinds of branch are compared.
    from exchange.objectives._common import group_advantages
    from exchange.symbolic.numeric import standardised_entropy

    lengths = [1, 3, 2, 4]
    rollout, _ = one_group([1.0, 0.0, 0.5, 0.0], lengths, [[0.5] * L for L in lengths], [[0.0] * L for L in lengths])
    z = torch.from_numpy(standardised_entropy(rollout, scope))
    bound = group_advantages(rollout).abs()[:, None] / get("hapo").params()["phi"]
    inside = (z.abs() <= bound) & rollout.mask
    assert inside.any() and (~inside & rollout.mask).any()
