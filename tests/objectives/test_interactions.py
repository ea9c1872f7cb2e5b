"""The interactions between parts (exchange.objectives.interactions): every rule's claim
that the composition equals another objective, checked on random batches of the
checker's own generators, so that a rule whose claim is false fails here; and the
precision rule of the parameter draws.

A verdict is a function of the token coefficients: where two objectives have the same
coefficients on every batch of a regime, no check can tell them apart there, and the
derivation must give them one verdict.
"""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from exchange.checker import strategies as xst
from exchange.core.coefficients import token_coefficients
from exchange.core.rollout import Rollout
from exchange.core.vocabulary import Regime
from exchange.objectives.composition import BETAS, Composition, betas_for, compose, random_composition
from exchange.objectives.interactions import INTERACTIONS
from exchange.objectives.parts import PARTS

ON, OFF = Regime.ON_POLICY, Regime.OFF_POLICY
EXAMPLES = settings(max_examples=25, deadline=None, derandomize=True, database=None)


def _kappa(loss, rollout: Rollout) -> torch.Tensor:
    return token_coefficients(loss, rollout.logprobs, rollout)


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    scale = float(torch.maximum(a.abs(), b.abs()).max()) + 1e-300
    assert float((a - b).abs().max()) <= 1e-12 * scale, float((a - b).abs().max()) / scale


def test_every_rule_is_stated_with_its_claim() -> None:
    names = [rule.name for rule in INTERACTIONS]
    assert len(names) == len(set(names))
    for rule in INTERACTIONS:
        assert rule.equals and "section" in rule.why, rule.name


# --------------------------------------------------------------- tied groups dropped
@EXAMPLES
@given(xst.rollouts(off_policy=None), st.sampled_from(sorted(PARTS["estimator"])),
       st.sampled_from(sorted(PARTS["additive"])))
def test_a_zero_std_filter_equals_the_objective_on_the_mixed_groups(rollout, estimator, additive) -> None:
    """Coefficients of tied groups are 0; every other row is the unfiltered objective's."""
    base = compose(estimator=estimator, additive=additive, beta=0.5)
    filtered = compose(estimator=estimator, additive=additive, beta=0.5, mask="zero_std_filter")
    r = rollout.rewards
    mixed = (rollout.group_max(r) + rollout.group_max(-r)) > 0  # max > min
    _close(_kappa(filtered, rollout), _kappa(base, rollout) * mixed[:, None])


# ----------------------------------------------------------- one-signed advantages
def _positive_branch(clip: str):
    """The clip's positive branch applied to every occurrence: a weight of the event alone."""
    p = PARTS["clip"][clip].params

    def surrogate(rho: torch.Tensor, adv: torch.Tensor) -> torch.Tensor:
        if clip == "soft_gate":
            return 4.0 / p["tau_pos"] * torch.sigmoid(p["tau_pos"] * (rho - 1)) * adv
        return torch.minimum(rho, torch.clamp(rho, 1 - p["eps_low"], 1 + p["eps_high"])) * adv
    return surrogate


@EXAMPLES
@given(xst.rollouts(off_policy=True), st.sampled_from(["symmetric", "clip_higher", "dual_clip", "soft_gate"]))
def test_positive_only_advantages_see_only_the_positive_branch(rollout, clip) -> None:
    """positive_only + a sign-dependent clip equals the same objective whose clip is its
    positive branch for every occurrence (no sign left to split: no M2)."""
    comp = compose(estimator="positive_only", clip=clip)
    surrogate = _positive_branch(clip)

    def sign_free(lp: torch.Tensor, ro: Rollout) -> torch.Tensor:
        r = ro.rewards
        adv = torch.clamp(r - ro.group_mean(r), min=0.0)[:, None]
        rho = torch.exp(lp - ro.old_logprobs)
        return -(ro.fmask / ro.lengths.sum() * surrogate(rho, adv)).sum()

    _close(_kappa(comp, rollout), _kappa(sign_free, rollout))


# ---------------------------------------------------- constant gradient = an offset
@EXAMPLES
@given(xst.rollouts(off_policy=False), st.sampled_from(["k1_ref", "k1_behaviour", "entropy_sampled"]),
       st.sampled_from(["positive_only", "loo_std", "greedy_baseline", "group_mean_std"]))
def test_a_constant_additive_gradient_is_an_offset_of_the_advantages_on_policy(rollout, additive, estimator) -> None:
    """On-policy, beta times a constant gradient on every kept token equals the same
    objective without the term and with every kept advantage lowered by beta (the loss
    is minimised: kappa = -d loss / d l)."""
    beta = 0.5
    with_term = compose(estimator=estimator, additive=additive, beta=beta, mask="zero_std_filter")
    without = compose(estimator=estimator, mask="zero_std_filter")
    r = rollout.rewards
    mixed = ((rollout.group_max(r) + rollout.group_max(-r)) > 0).to(r.dtype)
    weight = PARTS["aggregation"]["batch_token_count"].fn(rollout, r.dtype) * mixed  # the default aggregation
    _close(_kappa(with_term, rollout), _kappa(without, rollout) - beta * weight[:, None] * rollout.fmask)


@EXAMPLES
@given(xst.rollouts(off_policy=False), st.sampled_from(["k1_ref", "k1_behaviour", "entropy_sampled"]),
       st.sampled_from(["length_penalty", "cosine_length", "format_bonus"]))
def test_a_constant_additive_gradient_next_to_a_greedy_baseline_is_one_more_shaping_constant(
        rollout, additive, shaping) -> None:
    """On-policy, greedy baseline (A = R + s - b): beta on every token equals the same
    objective without the term and with every reward lowered by beta (the baseline reward
    is not shaped), i.e. one more constant in the shaping s_i."""
    if rollout.baseline_rewards is None:
        rollout = rollout.with_fields({"baseline_rewards": torch.zeros_like(rollout.rewards)})
    beta = 0.5
    with_term = compose(estimator="greedy_baseline", shaping=shaping, additive=additive, beta=beta)
    without = compose(estimator="greedy_baseline", shaping=shaping)
    lowered = rollout.with_fields({"rewards": rollout.rewards - beta})
    _close(_kappa(with_term, rollout), _kappa(without, lowered))


def test_the_offset_rules_apply_where_stated() -> None:
    offset = compose(estimator="group_mean", additive="k1_ref", mask="zero_std_filter")
    assert offset.facets(ON) == ("M6.offset_on_kept",)
    assert "M6.event_term_on_kept" in offset.facets(OFF)  # off-policy the ratio scales the advantage, not k1
    merged = compose(estimator="positive_only", additive="k1_ref", mask="zero_std_filter")
    assert not [f for f in merged.facets(ON) if f.startswith("M6")]
    greedy = compose(estimator="greedy_baseline", shaping="length_penalty", additive="entropy_sampled")
    assert not [f for f in greedy.facets(ON) if f.startswith("M6")]
    # a reward zeroed on truncated responses leaves the others unshaped: the offset shows
    kept = compose(estimator="greedy_baseline", shaping="truncation_to_zero", additive="k1_ref")
    assert "M6.event_term" in kept.facets(ON)
    # an event-varying gradient (k3) is never an offset
    assert "M6.event_term_on_kept" in compose(estimator="positive_only", additive="k3_ref",
                                              mask="zero_std_filter").facets(ON)


# ------------------------------------------------------ shaping of dropped responses
@EXAMPLES
@given(xst.rollouts(off_policy=None), st.sampled_from(sorted(PARTS["estimator"])), st.integers(0, 2**16))
def test_a_reward_zeroed_on_dropped_responses_reaches_nothing_but_the_centre(rollout, estimator, seed) -> None:
    """With truncated responses dropped after centring, their verifiable rewards never
    reach any coefficient: the only trace of the shaping is a centre that counts them as
    0, which a centre that is not the kept responses' own also leaves (M4, not M7)."""
    comp = compose(estimator=estimator, shaping="truncation_to_zero", mask="truncation_after_centring")
    truncated = rollout.truncated if rollout.truncated is not None else torch.zeros(rollout.n, dtype=torch.bool)
    rng = random.Random(seed)
    moved = rollout.rewards.clone()
    for i in truncated.nonzero().flatten().tolist():
        moved[i] = rng.choice((-2.0, 0.5, 3.0))
    _close(_kappa(comp, rollout), _kappa(comp, rollout.with_fields({"rewards": moved})))
    facets = comp.facets(ON)
    assert "M4.foreign_centre" in facets and "M4.mask_after_centring" in facets
    assert not [f for f in facets if f.startswith("M7")]


# ----------------------------------------------------------------- precision rule
@pytest.mark.parametrize(("precision", "mask", "estimator", "shaping", "expected"), [
    ("bf16", "zero_std_filter", "group_mean", "none", (0.5,)),
    ("bf16", "none", "greedy_baseline", "length_penalty", (0.5,)),
    ("bf16", "none", "greedy_baseline", "none", BETAS),
    ("bf16", "none", "group_mean", "length_penalty", BETAS),
    ("float32", "zero_std_filter", "greedy_baseline", "length_penalty", BETAS),
])
def test_beta_is_drawn_by_the_precision_rule(precision, mask, estimator, shaping, expected) -> None:
    assert betas_for(precision, mask, estimator, shaping) == expected


def test_random_compositions_follow_the_precision_rule() -> None:
    rng = random.Random(0)
    for _ in range(500):
        c = random_composition(rng)
        assert c.beta in betas_for(c.precision, c.mask, c.estimator, c.shaping), c.name


def test_part_constants_keep_every_effect_ten_bf16_resolutions_apart() -> None:
    """The parts' own constants (THEORY.md section 4, precision rule): one token of length
    moves a length penalty by 0.1, SAPO-style temperatures differ by 50%."""
    bf16_ten = 10 * 2.0 ** -7
    assert PARTS["clip"]["soft_gate"].params["tau_neg"] / PARTS["clip"]["soft_gate"].params["tau_pos"] - 1 > bf16_ten
    rollout = Rollout(tokens=torch.tensor([[1, 2, 0], [1, 2, 0]]), mask=torch.tensor([[1, 1, 0], [1, 1, 1]]).bool(),
                      rewards=torch.zeros(2, dtype=torch.float64), group=torch.tensor([0, 0]),
                      old_logprobs=torch.zeros(2, 3, dtype=torch.float64))
    shaped = PARTS["shaping"]["length_penalty"].fn(rollout.rewards, rollout.logprobs, rollout)
    assert float(shaped[0] - shaped[1]) > bf16_ten


def test_interactions_compose_with_the_derivation() -> None:
    """Composition.expected is verdict_of of the facets after the rules, in both regimes."""
    from exchange.core.vocabulary import verdict_of

    rng = random.Random(1)
    for _ in range(200):
        c = random_composition(rng)
        for regime in (ON, OFF):
            assert c.expected()[regime] == verdict_of(*c.facets(regime))
    assert isinstance(Composition().facets(ON), tuple)
