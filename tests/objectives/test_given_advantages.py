"""``Rollout.advantages``: precomputed advantages (verl's) replace every objective's
estimator; nothing is re-centred or re-scaled, and partial groups and single rows work."""

from __future__ import annotations

import pytest
import torch

from exchange import token_coefficients
from exchange.checker.cases import Case, GroupConfig, build
from exchange.errors import RolloutError
from exchange.objectives import VARIANTS, get, names
from exchange.objectives._common import group_advantages

CASE = Case(
    groups=(
        GroupConfig(((1, 2, 3), (1, 2, 0, 1, 3), (1, 4)), (1.0, 0.0, 0.5)),
        GroupConfig(((1, 1), (1, 0, 2, 1)), (0.0, 1.0)),
    ),
    off_policy=True,
    seed=5,
)
GIVEN = torch.tensor([0.9, -0.4, -0.3, 0.7, 0.2], dtype=torch.float64)  # not zero-sum per group


@pytest.mark.parametrize("spec", list(names()) + list(VARIANTS))
def test_every_objective_uses_the_given_advantages_and_ignores_the_rewards(spec):
    r = build(CASE).to(torch.float64).replace(advantages=GIVEN)
    other = r.replace(rewards=torch.tensor([5.0, -3.0, 2.0, 7.0, 7.5], dtype=torch.float64))
    fn = get(spec).bind()
    torch.testing.assert_close(token_coefficients(fn, r.logprobs, other), token_coefficients(fn, r.logprobs, r),
                               rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("spec", ["grpo", "dapo", "gspo", "cispo", "grpo+min_replace", "clip_cov", "hapo"])
def test_given_advantages_equal_to_the_estimator_give_the_same_coefficients(spec):
    r = build(CASE).to(torch.float64)
    given = r.replace(advantages=group_advantages(r))
    fn = get(spec).bind()
    torch.testing.assert_close(token_coefficients(fn, r.logprobs, given), token_coefficients(fn, r.logprobs, r),
                               rtol=1e-12, atol=1e-15)


def test_a_single_row_needs_given_advantages():
    r = build(CASE).to(torch.float64)
    with pytest.raises(RolloutError, match="single response.*Rollout.advantages"):
        r.select([0])
    one = r.replace(advantages=GIVEN).select([3])
    kappa = token_coefficients(get("dapo").bind(), one.logprobs, one)
    assert float(kappa.abs().sum()) > 0


def test_per_token_advantages_and_a_wrong_shape():
    r = build(CASE).to(torch.float64)
    per_token = GIVEN[:, None].expand(r.mask.shape).clone()
    a = token_coefficients(get("grpo").bind(), r.logprobs, r.replace(advantages=per_token))
    b = token_coefficients(get("grpo").bind(), r.logprobs, r.replace(advantages=GIVEN))
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-15)
    with pytest.raises(RolloutError, match=r"Rollout.advantages: shape=\[2\]"):
        r.replace(advantages=GIVEN[:2])
