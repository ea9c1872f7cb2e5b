"""Hostile inputs to the coefficient core: a dict for a Rollout, positive log-probs, a
loss that edits the rollout in place (issue 17)."""

import pytest
import torch

from exchange import token_coefficients
from exchange.checker.cases import Case, GroupConfig, build
from exchange.errors import InvalidArgument


def _rollout():
    return build(Case(groups=(GroupConfig(((1, 2), (1, 3)), (1.0, 0.0)),)))


def pg(lp, r):
    a = r.rewards - r.group_mean(r.rewards)
    return -(a[:, None] * lp * r.fmask).sum()


def test_a_dict_instead_of_a_rollout_is_a_precise_error():
    r = _rollout()
    with pytest.raises(InvalidArgument, match="rollout is a dict, not an exchange.Rollout"):
        token_coefficients(pg, r.logprobs, {"rewards": r.rewards})


def test_positive_logprobs_are_rejected_like_rollout_does():
    r = _rollout()
    with pytest.raises(InvalidArgument, match="log-probability is <= 0"):
        token_coefficients(pg, r.logprobs.abs() + 0.5, r)


def test_a_loss_that_mutates_the_rollout_does_not_leak():
    r = _rollout()
    before = r.rewards.clone()

    def mutating(lp, ro):
        ro.rewards.mul_(100.0)
        ro.old_logprobs.zero_()
        return pg(lp, ro)

    token_coefficients(mutating, r.logprobs, r)
    assert torch.equal(r.rewards, before)
    assert r.rewards.dtype == torch.float64
    assert bool((r.old_logprobs != 0).any())


@pytest.mark.slow  # ~2-5 s: the fast tier stays under 3 minutes
def test_overflow_is_named(tmp_path):
    from exchange import check

    def huge(lp, r):
        return 1e308 * pg(lp, r)

    report = check(huge, max_examples=5, seed=0, regimes="on_policy")
    assert not report.holds("finite")
    assert "overflow" in " ".join(report.result("finite", "on_policy").mismatches)
    assert report.mechanisms == []
