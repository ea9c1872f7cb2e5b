"""token_coefficients against slow oracles: finite differences and the autograd loop."""

import pytest
import torch
from hypothesis import given

from exchange import ObjectiveError, token_coefficients
from exchange.checker.cases import build
from exchange.core.coefficients import token_coefficients_batched
from exchange.errors import InvalidArgument
from exchange.objectives import get, names
from exchange.checker import strategies as xst


def _finite_difference(fn, lp, rollout, h=1e-6):
    out = torch.zeros_like(lp)
    for i, t in rollout.mask.nonzero().tolist():
        up, down = lp.clone(), lp.clone()
        up[i, t] += h
        down[i, t] -= h
        out[i, t] = -(fn(up, rollout) - fn(down, rollout)) / (2 * h)
    return out


# Finite differences see through stop-gradients, autograd does not: objectives with a
# detached weight (CISPO) are checked against their closed form instead (and in
# tests/objectives/test_semantics.py). DCPO's lower bound sits exactly on the grid ratio
# 0.5 (a kink), and KL-Cov's top-k selection changes under the perturbation at ties.
NOT_SMOOTH = {"cispo", "cispo_verl", "dcpo", "kl_cov", "clip_cov"}
SMOOTH = [n for n in names() if n not in NOT_SMOOTH]


@pytest.mark.parametrize("name", SMOOTH)
@given(case=xst.cases(max_groups=2, max_size=4, max_length=5))
def test_matches_finite_differences(name, case):
    rollout = build(case).to(torch.float64)
    fn = get(name).bind()
    kappa = token_coefficients(fn, rollout.logprobs, rollout)
    fd = _finite_difference(fn, rollout.logprobs.clone(), rollout)
    # Central differences are O(h^2) except across a clip kink; ratios on the grid sit
    # away from the boundaries by much more than h.
    assert torch.allclose(kappa, fd, atol=1e-6 * (1 + fd.abs().max()))
    assert (kappa[~rollout.mask] == 0).all()


@given(case=xst.cases(max_groups=2, max_size=4, max_length=5))
def test_cispo_closed_form(case):
    rollout = build(case)
    kappa = token_coefficients(get("cispo").bind(eps_high=0.28), rollout.logprobs, rollout)
    r = rollout.rewards
    adv = (r - rollout.group_mean(r)) / (rollout.group_std(r) + 1e-4)
    ratio = torch.exp(rollout.logprobs - rollout.old_logprobs).clamp(max=1.28)
    expected = ratio * adv[:, None] * rollout.fmask / rollout.n_tokens
    assert torch.allclose(kappa, expected, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", ["grpo", "dapo", "gspo", "cispo"])
@given(case=xst.cases(max_groups=2, max_size=4, max_length=5))
def test_vmapped_path_equals_loop(name, case):
    rollout = build(case)
    shifted = rollout.logprobs - 0.01 * rollout.fmask  # log-probs stay <= 0
    fn = get(name).bind()
    fast = token_coefficients_batched(fn, [rollout.logprobs, shifted], [rollout, rollout])
    slow = [token_coefficients(fn, lp, rollout) for lp in (rollout.logprobs, shifted)]
    for a, b in zip(fast, slow):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-14)


def test_loss_errors_are_precise():
    rollout = build(xst.cases(max_groups=1, max_size=2, max_length=3).example())
    lp = rollout.logprobs
    with pytest.raises(ObjectiveError, match="not a scalar"):
        token_coefficients(lambda l, r: l.sum(dim=1), lp, rollout)
    with pytest.raises(ObjectiveError, match="no gradient path"):
        token_coefficients(lambda l, r: l.detach().sum(), lp, rollout)
    with pytest.raises(ObjectiveError, match="not a torch.Tensor"):
        token_coefficients(lambda l, r: float(l.sum()), lp, rollout)
    with pytest.raises(ObjectiveError, match="raised KeyError"):
        token_coefficients(lambda l, r: {}["x"], lp, rollout)
    with pytest.raises(InvalidArgument, match="logprobs shape"):
        token_coefficients(lambda l, r: l.sum(), torch.cat([lp, lp], dim=1), rollout)  # always a wrong shape
    with pytest.raises(InvalidArgument, match="non-finite"):
        token_coefficients(lambda l, r: l.sum(), lp * float("nan"), rollout)
