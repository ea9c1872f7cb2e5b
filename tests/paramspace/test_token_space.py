"""Output-embedding row cancellation: closed form against autograd and per-occurrence grads."""

import pytest
import torch

from exchange.errors import InvalidArgument
from exchange.models import output_head, response_logprobs
from exchange.objectives import resolve
from exchange.paramspace import head_features, per_occurrence_grads, token_space_cancellation
from exchange.core.coefficients import token_coefficients


def _head_name(model):
    head = output_head(model)
    return next(n for n, p in model.named_parameters() if p is head.weight)


def _autograd_head_update(model, loss_fn, rollout):
    head = output_head(model)
    loss = loss_fn(response_logprobs(model, rollout), rollout)
    (g,) = torch.autograd.grad(loss, [head.weight])
    return -g  # [V, d]


@pytest.mark.parametrize("name", ["grpo", "dapo"])
def test_rows_equal_autograd_head_gradient(lm, rollout, name):
    loss_fn = resolve(name)
    rows = token_space_cancellation(lm, loss_fn, rollout, range(8))
    expected = _autograd_head_update(lm, loss_fn, rollout)
    got = torch.stack([r.update for r in rows])
    assert torch.allclose(got, expected, rtol=1e-10, atol=1e-14 * float(expected.abs().max()))
    for r in rows:
        assert 0 <= r.retained <= 1 + 1e-12 and r.update_norm <= r.norm_sum * (1 + 1e-12)
        assert r.own_update_norm <= r.own_norm_sum * (1 + 1e-12)
        assert r.cancelled == pytest.approx(1 - r.retained)
    assert sum(r.n_occurrences for r in rows) == int(rollout.mask.sum())


def test_contributions_match_per_occurrence_grads(lm, rollout):
    """u_{i,t} = kappa (1[y=v] - p_v) h equals kappa * d l[i,t] / d W_v from vmap."""
    loss_fn = resolve("grpo")
    name = _head_name(lm)
    occ = per_occurrence_grads(lm, rollout, params=[name])
    h, probs, l = head_features(lm, rollout)
    kappa = token_coefficients(loss_fn, l, rollout)
    v = 5
    per = occ.grads.reshape(len(occ.rows), *lm.head.weight.shape)[:, v]  # [M, d]
    i, t = occ.rows, occ.positions
    closed = ((rollout.tokens[i, t] == v).double() - probs[i, t, v])[:, None] * h[i, t]
    assert torch.allclose(per, closed, rtol=1e-10, atol=1e-15)
    (row,) = token_space_cancellation(lm, loss_fn, rollout, [v])
    weighted = kappa[i, t][:, None] * per
    assert torch.allclose(weighted.sum(0), row.update, rtol=1e-10, atol=1e-16)
    assert row.norm_sum == pytest.approx(float(weighted.norm(dim=1).sum()), rel=1e-10)


def test_hf_rows_equal_autograd(hf_lm, hf_rollout):
    loss_fn = resolve("grpo")
    rows = token_space_cancellation(hf_lm, loss_fn, hf_rollout, [7, 8, 0])
    expected = _autograd_head_update(hf_lm, loss_fn, hf_rollout)[[7, 8, 0]]
    got = torch.stack([r.update for r in rows])
    assert torch.allclose(got, expected, rtol=1e-6, atol=1e-9 * float(expected.abs().max()))


def test_bad_token_id(lm, rollout):
    with pytest.raises(InvalidArgument, match="token_ids contains 99"):
        token_space_cancellation(lm, resolve("grpo"), rollout, [99])
