"""``exchange.inspect``'s mechanism hints: patterns -> facets of the vocabulary, worded by it."""

import pytest
import torch

from exchange import Rollout, inspect
from exchange.checker.inspection import CANCEL_TOL, SPREAD_TOL, GroupWeights
from exchange.checker.mechanism_hints import PATTERNS, SPREAD, TIED, hints, is_off_policy
from exchange.core.vocabulary import FACETS, MECHANISMS


def _rollout(rewards, logprobs=None):
    return Rollout(
        tokens=torch.tensor([[5, 6, 1, 0], [5, 6, 2, 3], [5, 6, 7, 7]]),
        mask=torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1]], dtype=torch.bool),
        rewards=torch.tensor(rewards, dtype=torch.float64),
        group=torch.tensor([0, 0, 0]),
        old_logprobs=torch.full((3, 4), -1.0, dtype=torch.float64),
        logprobs=logprobs,
    )


def _group(rewards=(1.0, 0.0, 0.0), spread=0.0, weights=(0.8, -0.4, -0.4), lengths=(3, 4, 4), residual=0.5):
    return GroupWeights(group=0, rows=(0, 1, 2), shared_events=2, weights=weights, spread=spread,
                        zero_sum=0.0, residual=residual, shared_residual=residual, rewards=rewards, lengths=lengths)


def test_every_pattern_names_facets_of_the_vocabulary():
    for pattern in PATTERNS:
        for key in pattern.on_policy + pattern.off_policy:
            assert key in FACETS, (pattern.seen, key)
    # tied rewards: exactly the facets the vocabulary's rule says break (N)
    assert set(TIED.on_policy) == {k for k, f in FACETS.items()
                                   if {"null_on_equal_rewards", "shared_cancellation"} <= set(f.breaks)}
    assert {FACETS[k].mechanism for k in TIED.on_policy} == {"M4", "M6"}


def test_hint_text_is_the_vocabularys_wording():
    r = _rollout([1.0, 0.0, 0.0])
    ids, lines = hints(r, [_group(spread=2 * SPREAD_TOL)], residual=0.5)
    assert ids == ("M5", "M6") and len(lines) == 1
    for key in SPREAD.on_policy:
        assert FACETS[key].description in lines[0]
    off = r.replace(logprobs=r.old_logprobs - 0.5 * r.mask)
    assert is_off_policy(off) and not is_off_policy(r)
    ids, lines = hints(off, [_group(spread=2 * SPREAD_TOL)], residual=0.5)
    assert ids == ("M2", "M5", "M6") and FACETS["M2.sign_clip"].description in lines[0] and "off-policy" in lines[0]
    for line in lines:  # no second wording: every id named in a line is a vocabulary mechanism
        assert line.split(":")[0].split("/")[0] in MECHANISMS


def test_length_weighted_and_common_vectors():
    r = _rollout([1.0, 0.0, 0.0])
    # alpha_i = A_i / L_i: zero-sum once multiplied by the lengths -> M3
    a = torch.tensor([2 / 3, -1 / 3, -1 / 3]) / torch.tensor([3.0, 4.0, 4.0])
    ids, lines = hints(r, [_group(weights=tuple((a / a.norm()).tolist()))], residual=0.5)
    assert ids == ("M3",) and FACETS["M3.response_norm"].description in lines[0]
    ids, _ = hints(r, [_group(weights=(0.9, 0.3, 0.3))], residual=0.5)  # not zero-sum at all
    assert ids == ("M4", "M5")


def test_nothing_when_the_batch_or_the_group_cancels():
    r = _rollout([1.0, 0.0, 0.0])
    assert hints(r, [_group(spread=1.0)], residual=CANCEL_TOL) == ((), ())
    assert hints(r, [_group(spread=1.0, residual=CANCEL_TOL)], residual=0.5) == ((), ())


def test_tied_rewards_with_an_additive_term_point_to_m4_and_m6():
    r = _rollout([1.0, 1.0, 1.0])
    found = inspect(lambda lp, ro: -(lp * ro.mask).sum(), r)  # every token pushed up, whatever the reward
    assert found.shared_residual == pytest.approx(1.0)
    assert found.mechanisms == ("M4", "M6")
    assert found.hints and "tied rewards" in found.hints[0]
    assert FACETS["M6.event_term"].description in found.hints[0]


def test_an_event_term_that_differs_between_shared_events_points_to_m6():
    """GRPO's advantage term plus ``beta/2 lp^2`` on the sampled tokens: each shared event's
    coefficients are ``-A_i + beta lp_e`` (the same shift for every occurrence, M6), and
    ``lp_e`` differs between the two shared events, so their vectors turn (a spread)."""
    logprobs = torch.tensor([[-0.5, -1.5, -1.0, 0.0], [-0.5, -1.5, -2.0, -1.0], [-0.5, -1.5, -0.7, -0.3]],
                            dtype=torch.float64)
    r = _rollout([1.0, 0.0, 0.0], logprobs=logprobs).replace(old_logprobs=logprobs.clone())
    beta = 0.3

    def loss(lp, ro):
        adv = (ro.rewards - ro.rewards.mean())[:, None]
        return (-(adv * lp) + 0.5 * beta * lp ** 2)[ro.mask].sum()

    found = inspect(loss, r)
    assert "M6" in found.mechanisms and "M1" not in found.mechanisms
    assert any(FACETS["M6.event_term"].description in h for h in found.hints)
