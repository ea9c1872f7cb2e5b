"""Events follow the definition: same group, same prefix, same token."""

import torch
from hypothesis import given

from exchange import Rollout, event_coefficients, events, shared_events
from exchange.checker import strategies as xst
from exchange.checker.cases import build


def test_events_by_definition():
    r = Rollout(
        tokens=torch.tensor([[1, 2, 3], [1, 2, 4], [1, 5, 3], [1, 2, 3], [1, 2, 0]]),
        mask=torch.tensor([[1, 1, 1]] * 4 + [[1, 1, 0]], dtype=torch.bool),
        rewards=torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0]),
        group=torch.tensor([0, 0, 0, 9, 9]),
        old_logprobs=torch.full((5, 3), -1.0),
    )
    ev = events(r)
    ids = ev.ids
    assert ids[0, 0] == ids[1, 0] == ids[2, 0]  # same group, empty prefix, token 1
    assert ids[0, 1] == ids[1, 1] != ids[2, 1]
    assert ids[0, 2] != ids[2, 2]  # same token 3, different prefix
    assert ids[3, 0] != ids[0, 0]  # same tokens, other group
    assert ids[4, 2] == -1  # padding
    shared = set(shared_events(r, ev).tolist())
    assert shared == {ids[0, 0].item(), ids[3, 0].item(), ids[3, 1].item()}
    assert ev.count == 9  # group 0: 1, 12, 123, 124, 15, 153; group 9: 1, 12, 123
    K = event_coefficients(torch.ones(5, 3, dtype=torch.float64), ev)
    assert K[ids[0, 0]] == 3 and K[ids[0, 1]] == 2 and K[ids[2, 1]] == 1 and K[ids[3, 2]] == 1


@given(xst.cases())
def test_generated_rollouts_are_event_consistent(case):
    r = build(case)
    ev = events(r)
    for field in (r.old_logprobs, r.logprobs, r.entropy, r.ref_logprobs):
        valid = ev.ids >= 0
        ids, vals = ev.ids[valid], field[valid]
        hi = torch.full((ev.count,), -1e9, dtype=vals.dtype).scatter_reduce(0, ids, vals, "amax")
        lo = torch.full((ev.count,), 1e9, dtype=vals.dtype).scatter_reduce(0, ids, vals, "amin")
        assert torch.equal(hi, lo)
    if not case.off_policy:
        assert torch.equal(r.logprobs, r.old_logprobs)


def _events_oracle(rollout):
    """The definition, one token at a time (the pre-vectorisation implementation)."""
    tokens, lengths, gidx = rollout.tokens.tolist(), rollout.lengths.tolist(), rollout.group_index.tolist()
    n, t_max = rollout.tokens.shape
    table, ev_group, ev_pos, rows = {}, [], [], []
    for i in range(n):
        parent, row = -(gidx[i] + 1), [-1] * t_max
        for t in range(lengths[i]):
            key = (parent, tokens[i][t])
            e = table.get(key)
            if e is None:
                e = table[key] = len(ev_group)
                ev_group.append(gidx[i])
                ev_pos.append(t)
            row[t] = parent = e
        rows.append(row)
    return torch.tensor(rows, dtype=torch.long).reshape(n, t_max), ev_group, ev_pos


def _assert_matches_oracle(r):
    ev = events(r)
    ids, group, pos = _events_oracle(r)
    assert torch.equal(ev.ids, ids)
    assert ev.count == len(group)
    assert ev.group.tolist() == group and ev.position.tolist() == pos
    sizes = torch.bincount(r.group_index)
    occ = torch.bincount(ids[r.mask], minlength=len(group))
    assert torch.equal(ev.occurrences, occ)
    assert torch.equal(ev.shared, occ == sizes[torch.tensor(group, dtype=torch.long)])


@given(xst.cases())
def test_events_match_the_oracle_on_generated_cases(case):
    _assert_matches_oracle(build(case))


def test_events_match_the_oracle_on_random_batches():
    gen = torch.Generator().manual_seed(0)
    for n_groups, g, t_max, vocab in ((1, 2, 1, 2), (3, 4, 7, 2), (5, 3, 20, 3), (8, 8, 64, 2), (4, 5, 33, 50)):
        n = n_groups * g
        tokens = torch.randint(0, vocab, (n, t_max), generator=gen)
        lengths = torch.randint(1, t_max + 1, (n,), generator=gen)
        mask = torch.arange(t_max)[None, :] < lengths[:, None]
        tokens = torch.where(mask, tokens, 0)
        group = torch.randperm(n, generator=gen) % n_groups * 7  # non-contiguous, sparse ids
        r = Rollout(tokens=tokens, mask=mask, rewards=torch.rand(n, generator=gen, dtype=torch.float64),
                    group=group, old_logprobs=torch.full((n, t_max), -1.0, dtype=torch.float64))
        _assert_matches_oracle(r)
