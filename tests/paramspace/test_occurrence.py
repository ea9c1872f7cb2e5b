"""Per-occurrence gradients: the vmap path against the loop oracle, and similarity tools."""

import numpy as np
import pytest
import torch

from exchange.errors import InvalidArgument
from exchange.objectives import resolve
from exchange.paramspace import (
    cosine_histogram,
    learning_tax,
    per_occurrence_grads,
    per_occurrence_grads_loop,
    plot_cosine_histogram,
    same_token_cosines,
)


@pytest.mark.parametrize("chunk_size", [None, 3])
def test_vmap_matches_loop(lm, rollout, chunk_size):
    fast = per_occurrence_grads(lm, rollout, chunk_size=chunk_size)
    slow = per_occurrence_grads_loop(lm, rollout)
    assert fast.grads.shape == (int(rollout.mask.sum()), sum(p.numel() for p in lm.parameters()))
    assert torch.equal(fast.rows, slow.rows) and torch.equal(fast.positions, slow.positions)
    assert torch.allclose(fast.grads, slow.grads, rtol=1e-10, atol=1e-15)


def test_weighted_rows_sum_to_the_update(lm, rollout):
    tax = learning_tax(lm, resolve("grpo"), rollout)
    occ = per_occurrence_grads(lm, rollout)
    total = occ.unflatten(occ.weighted(tax.kappa).sum(0))
    for name, value in tax.update.items():
        assert torch.allclose(total[name], value, rtol=1e-9, atol=1e-14)


def test_same_event_occurrences_share_one_gradient(lm, rollout):
    occ = per_occurrence_grads(lm, rollout)
    for e in occ.event_ids.unique().tolist():
        rows = occ.grads[occ.event_ids == e]
        assert torch.allclose(rows, rows[:1].expand_as(rows), rtol=1e-12, atol=1e-15)


def test_subset_of_occurrences_and_params(lm, rollout):
    sel = rollout.mask & (rollout.tokens == 6)
    occ = per_occurrence_grads(lm, rollout, occurrences=sel, params=["head.weight"])
    assert occ.grads.shape == (int(sel.sum()), lm.head.weight.numel())
    assert (occ.token_ids == 6).all()
    with pytest.raises(InvalidArgument, match="occurrences dtype"):
        per_occurrence_grads(lm, rollout, occurrences=sel.long())


def test_same_token_cosines_and_histogram(lm, rollout, tmp_path):
    occ = per_occurrence_grads(lm, rollout)
    cos = same_token_cosines(occ)
    assert cos, "the rollout should repeat some token in different contexts"
    for v, values in cos.items():
        m = int((occ.token_ids == v).sum())
        assert 0 < values.numel() <= m * (m - 1) // 2
        assert (values.abs() <= 1 + 1e-12).all()
    # pairs of one event are excluded: the prefix token 5 occurs once per response at t=0,
    # as one event per group, so only cross-group pairs (and later 5s) remain
    first = occ.token_ids == 5
    n5 = int(first.sum())
    same_event_pairs = sum(int(c) * (int(c) - 1) // 2 for c in torch.bincount(occ.event_ids[first]) if c > 1)
    assert cos[5].numel() == n5 * (n5 - 1) // 2 - same_event_pairs
    counts, edges = cosine_histogram(cos, bins=10)
    assert counts.sum() == sum(v.numel() for v in cos.values()) and np.allclose(edges[[0, -1]], [-1, 1])
    weighted = same_token_cosines(occ, [5], kappa=learning_tax(lm, resolve("grpo"), rollout).kappa)
    assert set(weighted) <= {5}
    out = tmp_path / "cos.png"
    plot_cosine_histogram(cos, out)
    assert out.stat().st_size > 0 and not list(tmp_path.glob("tmp*"))


def test_hf_vmap_matches_loop(hf_lm, hf_rollout):
    fast = per_occurrence_grads(hf_lm, hf_rollout, chunk_size=4)
    slow = per_occurrence_grads_loop(hf_lm, hf_rollout)
    scale = float(slow.grads.abs().max())
    assert torch.allclose(fast.grads, slow.grads, rtol=1e-6, atol=1e-9 * scale)
