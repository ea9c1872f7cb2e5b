"""The one event-key hash (exchange.checker.event_hash) against its plain definition."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from exchange.checker.event_hash import key_hashes, pick, reference_key_hash, reference_pick

rows_st = st.lists(
    st.tuples(st.integers(0, 40), st.lists(st.integers(0, 2**31), min_size=1, max_size=40)), min_size=1, max_size=8)


def _batch(rows):
    width = max(len(r) for _, r in rows)
    tokens = torch.zeros(len(rows), width, dtype=torch.long)
    for i, (_, r) in enumerate(rows):
        tokens[i, : len(r)] = torch.tensor(r)
    mask = torch.arange(width)[None, :] < torch.tensor([len(r) for _, r in rows])[:, None]
    return tokens, torch.tensor([g for g, _ in rows]), mask


@pytest.mark.slow  # ~1-3 s: the fast tier stays under 3 minutes
@given(rows_st, st.integers(-(2**62), 2**62), st.integers(1, 12))
@settings(max_examples=200)
def test_the_parallel_prefix_hash_and_pick_are_the_plain_loop(rows, seed, size):
    """Every token's hash and pick equal the definition computed one item at a time over
    unbounded Python integers (the prefix-sum form must not lose a carry or a sign)."""
    tokens, group, mask = _batch(rows)
    kh = key_hashes(tokens, group, mask)
    idx = pick(kh, torch.tensor([seed, 0]), 3, size)
    wrong = []
    for i, (g, r) in enumerate(rows):
        for t in range(len(r)):
            key = (g, *r[: t + 1])
            if int(kh[i, t]) != reference_key_hash(key) or int(idx[0, i, t]) != reference_pick(key, seed, 3, size) \
                    or int(idx[1, i, t]) != reference_pick(key, 0, 3, size):
                wrong.append(key)
    assert not wrong, f"{len(wrong)} keys differ from the oracle, e.g. {wrong[:3]}"
    assert (kh[~mask] == 0).all()


def test_a_key_and_its_extensions_or_twins_hash_apart():
    """The group, every token, the order and the length all enter the key: the cases that
    a sum of items, or a zero item, would confuse."""
    keys = [(0, 0), (0, 0, 0), (1, 0), (0, 1), (0, 1, 2), (0, 2, 1), (2, 1, 0), (0, 3), (0, 0, 3)]
    hashes = [reference_key_hash(k) for k in keys]
    assert len(set(hashes)) == len(keys)


def test_picks_spread_over_the_grid():
    """Picks of distinct events are near-uniform over a grid (a chi-square bound far
    above what a uniform draw gives: 99.9% quantile of chi2(8) is 26.1)."""
    tokens = torch.arange(4000).reshape(400, 10)
    kh = key_hashes(tokens, torch.zeros(400, dtype=torch.long), torch.ones(400, 10, dtype=torch.bool))
    counts = torch.bincount(pick(kh, 0, 2, 9).flatten(), minlength=9).double()
    chi2 = float(((counts - 4000 / 9) ** 2 / (4000 / 9)).sum())
    assert chi2 < 26.1, counts


def test_one_pass_over_several_salts_and_seeds_is_the_plain_loop():
    """The form ``case_values`` uses: ``M`` salts with their own grid sizes and ``K``
    seeds in one call (``[M, K, N, T]``, computed in place), over rows of several widths
    hashed in turn (the per-width constants are cached: a width hashed before must not
    change another's keys)."""
    salts, sizes, seeds = [1, 4, 5, 2, 3], [7, 5, 6, 9, 4], [0, 17, 2**16, -5]
    for rows in ([(0, [3, 1, 4, 1, 5]), (1, [3, 1, 4]), (0, [2, 7])], [(2, [9])], [(0, [3, 1, 4, 1, 5]), (3, [6, 6])]):
        tokens, group, mask = _batch(rows)
        kh = key_hashes(tokens, group, mask)
        idx = pick(kh, torch.tensor(seeds), torch.tensor(salts), torch.tensor(sizes))
        assert idx.shape == (len(salts), len(seeds), *tokens.shape)
        for i, (g, r) in enumerate(rows):
            for t in range(len(r)):
                key = (g, *r[: t + 1])
                assert int(kh[i, t]) == reference_key_hash(key), key
                assert [[int(idx[m, k, i, t]) for k in range(len(seeds))] for m in range(len(salts))] == \
                    [[reference_pick(key, s, salt, size) for s in seeds] for salt, size in zip(salts, sizes)], key
