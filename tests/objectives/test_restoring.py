"""Each restoring transformation restores what THEORY.md T5 says, and nothing more.

Checked directly on hand-built, event-consistent rollouts (no checker): shared-event
coefficient sums for (C), and one direction of the per-response coefficient vector
across shared events and suffix variants for (E). Closed-form coefficients pin what the
transformations compute.
"""

from __future__ import annotations

import pytest
import torch

import exchange.objectives as catalog
from exchange import token_coefficients
from exchange.objectives._common import group_advantages

from tests.objectives.catalog_cases import exchangeable_on, make_rollout, shared_residual

TOL = 1e-9
PREFIX = [1, 2]
REWARDS = [[1.0, 0.0, 1.0, 0.0]]


def suffix_cases(off_policy: bool, clip_shared: bool = False):
    """Same rewards and shared prefix, different suffixes (lengths, tokens, ratios).

    ``clip_shared`` puts the first shared event's ratio at 1.5 (above every clip range)
    and the second's at 1.0, so sign-dependent clipping shows at the first shared event
    and per-response weights at the second.
    """
    overrides = {(0, 1): 0.405, (0, 1, 2): 0.0} if clip_shared else None
    variants = [
        [[3, 4], [5], [3, 6, 7, 8], [9, 9, 9]],
        [[3, 4, 4, 4, 4], [5], [3, 6, 7, 8], [9, 9, 9]],
        [[3, 4], [5, 8], [3, 6], [9, 9, 9, 9, 9, 9]],
        [[7], [5], [3, 6, 7, 8], [9, 1, 9]],
    ]
    out = []
    for k, suffixes in enumerate(variants):
        groups = [[PREFIX + s for s in suffixes]]
        out.append(make_rollout(groups, REWARDS, off_policy=off_policy, seed=k, overrides=overrides))
    return out


# GSPO's 3e-4/4e-4 trust region holds no off-policy sequence ratio: with a sign-free
# clip every coefficient would be 0 and the probe vacuous, so widen it there.
PARAMS = {"gspo+sign_free_clip": {"eps_low": 0.9, "eps_high": 9.0}}


def verdict(spec: str, off_policy: bool, clip_shared: bool = False) -> tuple[bool, bool]:
    """``(exchangeable, shared_cancellation)`` observed on the suffix cases."""
    fn = catalog.resolve(spec, **PARAMS.get(spec, {}))
    cases = suffix_cases(off_policy, clip_shared)
    c = all(shared_residual(fn, lp, r) <= TOL for lp, r in cases)
    return exchangeable_on(fn, cases), c


# (spec, regime) -> (E holds, C holds), derived from T5 (see transforms.py).
T5 = {
    # group_constant_norm removes M3 only
    ("grpo+group_constant_norm", False): (True, True),
    ("grpo+group_constant_norm", True): (False, False),  # token clip (M2) stays
    ("gspo+group_constant_norm", True): (False, False),  # M1, M2 stay
    # min_replace removes M1, M3 and a sequence-level clip
    ("grpo+min_replace", False): (True, True),
    ("grpo+min_replace", True): (False, False),  # token clip stays
    ("gspo+min_replace", False): (True, True),
    ("gspo+min_replace", True): (True, True),
    ("sapo_verl+min_replace", False): (True, True),
    ("sapo_verl+min_replace", True): (False, False),  # soft gate stays
    # adv_orthogonal: (C) without (E)
    ("grpo+adv_orthogonal", False): (False, True),
    ("grpo+adv_orthogonal", True): (False, False),  # token clip still breaks (C)
    ("gspo+adv_orthogonal", False): (False, True),
    ("gspo+adv_orthogonal", True): (False, True),
    ("sapo_verl+adv_orthogonal", False): (False, True),
    # sign_free_clip removes M2 only
    ("dapo+sign_free_clip", True): (True, True),
    ("sapo+sign_free_clip", True): (True, True),
    ("grpo+sign_free_clip", False): (False, False),  # 1/L_i stays
    ("grpo+sign_free_clip", True): (False, False),
    ("gspo+sign_free_clip", True): (False, False),
    # compositions
    ("grpo+group_constant_norm+sign_free_clip", True): (True, True),
    ("sapo_verl+group_constant_norm+sign_free_clip", True): (True, True),
    ("grpo+min_replace+sign_free_clip", True): (True, True),
    # token_trust_region gates each event on its own ratio, any sign: adds no mechanism
    ("gspo+min_replace+token_trust_region", False): (True, True),
    ("gspo+min_replace+token_trust_region", True): (True, True),
}


@pytest.mark.parametrize(("spec", "off_policy"), list(T5), ids=[f"{s}-{'off' if o else 'on'}" for s, o in T5])
def test_transformation_restores_what_t5_says_and_nothing_more(spec: str, off_policy: bool) -> None:
    e_holds, c_holds = T5[(spec, off_policy)]
    # shared clipping matters only for sign-dependent clips, which need ratios != 1
    observed = verdict(spec, off_policy, clip_shared=off_policy)
    assert observed == (e_holds, c_holds)
    # ... and it agrees with the transformed objective's metadata
    exp = catalog.get(spec).expected["off_policy" if off_policy else "on_policy"]
    assert ("exchangeable" not in exp.breaks) == e_holds
    assert ("shared_cancellation" not in exp.breaks) == c_holds


@pytest.mark.parametrize("base", ["grpo", "gspo", "sapo_verl"])
def test_bases_break_what_the_transformations_repair(base: str) -> None:
    """Guard against vacuous passes: the untransformed bases fail the same probes."""
    assert verdict(base, False) == (False, False)
    assert verdict(base, True, clip_shared=True) == (False, False)


def test_gspo_suffix_ratios_alone_break_and_min_replace_repairs() -> None:
    """M1 in isolation: shared events at ratio 1, suffix ratios differ; sequence ratios
    inside a wide clip so only the coupling acts."""
    lp, r = make_rollout([[PREFIX + s for s in ([3, 4], [5], [3, 6, 7], [9, 9])]], REWARDS, off_policy=True,
                         overrides={(0, 1): 0.0, (0, 1, 2): 0.0}, max_shift=0.2)
    wide = {"eps_low": 0.9, "eps_high": 9.0}
    assert shared_residual(catalog.resolve("gspo+group_constant_norm", **wide), lp, r) > 1e-3
    assert shared_residual(catalog.resolve("gspo+min_replace", **wide), lp, r) <= TOL


# ------------------------------------------------------------ closed forms
def test_min_replace_on_gspo_is_the_group_min_weight() -> None:
    lp, r = make_rollout([[PREFIX + [3, 4], PREFIX + [5], PREFIX + [3, 6, 7, 8], PREFIX + [9]]], REWARDS, off_policy=True)
    kappa = token_coefficients(catalog.resolve("gspo+min_replace"), lp, r)
    a = group_advantages(r)
    m = r.fmask
    s = torch.exp(((lp - r.old_logprobs) * m).sum(1) / m.sum(1))
    w = s / (r.n * r.lengths.double())
    assert torch.allclose(kappa, a[:, None] * w.min() * m, rtol=1e-12, atol=1e-15)


def test_adv_orthogonal_weights_are_orthogonal_to_the_advantages() -> None:
    lp, r = make_rollout([[PREFIX + [3, 4], PREFIX + [5], PREFIX + [3, 6, 7, 8], PREFIX + [9]],
                          [[4, 1], [4, 2, 2, 2], [4, 3]]], [[1.0, 0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    kappa = token_coefficients(catalog.resolve("grpo+adv_orthogonal"), lp, r)
    a = group_advantages(r)
    w_tilde = kappa[:, 0] / a  # on-policy: kappa = A_i w~_i on every token
    for g in (0, 1):
        rows = r.group == g
        assert abs(float((a[rows] * w_tilde[rows]).sum())) <= 1e-12 * float(w_tilde.abs().max())
    # and the weights are not all equal: (E) is not restored
    assert float(w_tilde[r.group == 0].std()) > 1e-6


def test_adv_orthogonal_is_a_no_op_on_equal_weights_and_zero_on_equal_rewards() -> None:
    lp, r = make_rollout([[PREFIX + [3, 4], PREFIX + [5], PREFIX + [3, 6, 7, 8], PREFIX + [9]]], REWARDS)
    base = token_coefficients(catalog.resolve("dapo"), lp, r)
    orth = token_coefficients(catalog.resolve("dapo+adv_orthogonal"), lp, r)
    assert torch.allclose(base, orth, rtol=1e-12, atol=1e-15)
    tied = r.replace(rewards=torch.ones(4, dtype=torch.float64))
    assert (token_coefficients(catalog.resolve("grpo+adv_orthogonal"), lp, tied) == 0).all()


def test_group_constant_norm_is_the_group_token_mean() -> None:
    lp, r = make_rollout([[PREFIX + [3, 4], PREFIX + [5], PREFIX + [3, 6, 7, 8], PREFIX + [9]],
                          [[4, 1], [4, 2, 2, 2]]], [[1.0, 0.0, 1.0, 0.0], [0.0, 1.0]])
    kappa = token_coefficients(catalog.resolve("grpo+group_constant_norm"), lp, r)
    a = group_advantages(r)
    mean_len = r.group_mean(r.lengths.double())
    assert torch.allclose(kappa, a[:, None] / (r.n * mean_len[:, None]) * r.fmask, rtol=1e-12, atol=1e-15)


def test_sign_free_clip_drops_both_signs_outside_the_trust_region() -> None:
    lp, r = make_rollout([[PREFIX + [3], PREFIX + [5], PREFIX + [6], PREFIX + [9]]], REWARDS, off_policy=True,
                         overrides={(0, 1): 0.405, (0, 1, 2): -0.693})
    ratio = torch.exp(lp - r.old_logprobs)
    kappa = token_coefficients(catalog.resolve("dapo+sign_free_clip"), lp, r)
    a = group_advantages(r)
    inside = (ratio >= 0.8) & (ratio <= 1.28)
    assert torch.allclose(kappa, a[:, None] * ratio * inside / r.n_tokens * r.fmask, rtol=1e-12, atol=1e-15)
    assert (kappa[:, :2] == 0).all()  # both shared events dropped for every response


def test_token_trust_region_drops_events_outside_it_for_both_signs() -> None:
    """gspo+min_replace+token_trust_region: Min-Replace's coefficient, times a 0/1 gate on
    the token's own ratio; the shared event at ratio 1.5 is dropped in every response."""
    lp, r = make_rollout([[PREFIX + [3, 4], PREFIX + [5], PREFIX + [3, 6, 7, 8], PREFIX + [9]]], REWARDS,
                         off_policy=True, overrides={(0, 1): 0.405, (0, 1, 2): 0.0})
    ungated = token_coefficients(catalog.resolve("gspo+min_replace"), lp, r)
    kappa = token_coefficients(catalog.resolve("gspo+min_replace+token_trust_region", trust_eps=0.2), lp, r)
    ratio = torch.exp(lp - r.old_logprobs)
    inside = ((ratio >= 0.8) & (ratio <= 1.2)).double()
    assert torch.allclose(kappa, ungated * inside, rtol=1e-12, atol=1e-15)
    assert (kappa[:, 0] == 0).all() and (kappa[:, 1] != 0).all()  # shared: all dropped / all kept
    assert catalog.get("gspo+min_replace+token_trust_region").defaults["trust_eps"] == 0.2
    wide = token_coefficients(catalog.resolve("gspo+min_replace+token_trust_region", trust_eps=10.0), lp, r)
    assert torch.allclose(wide, ungated, rtol=1e-12, atol=1e-15)
