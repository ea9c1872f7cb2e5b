"""Events follow the definition: same group, same prefix, same token."""

import torch
from hypothesis import given

import exchange
from exchange import Rollout, event_coefficients, events, shared_events
from exchange.core.events import SharedResidual, shared_event_coefficients, shared_residual, shared_residual_parts
from exchange.checker import strategies as xst
from exchange.checker.cases import build
from tests.core.multi_turn import multi_turn_batch


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


# ------------------------------------------------------------ the shared residual's parts
def _random_batch(gen, n_groups, g, t_max, vocab):
    n = n_groups * g
    tokens = torch.randint(0, vocab, (n, t_max), generator=gen)
    lengths = torch.randint(1, t_max + 1, (n,), generator=gen)
    mask = torch.arange(t_max)[None, :] < lengths[:, None]
    r = Rollout(tokens=torch.where(mask, tokens, 0), mask=mask, rewards=torch.rand(n, generator=gen, dtype=torch.float64),
                group=torch.randperm(n, generator=gen) % n_groups * 3,
                old_logprobs=torch.full((n, t_max), -1.0, dtype=torch.float64))
    kappa = torch.where(mask, torch.randn(n, t_max, generator=gen, dtype=torch.float64), 0.0)
    return r, kappa


def _residual_by_definition(kappa, r):
    """The pre-issue-29 implementation: K_e and masses over every event, then the shared ones."""
    ev = events(r)
    valid = ev.ids >= 0
    K = torch.zeros(ev.count, dtype=kappa.dtype).index_add(0, ev.ids[valid], kappa[valid])[ev.shared]
    mass = torch.zeros(ev.count, dtype=kappa.dtype).index_add(0, ev.ids[valid], kappa.abs()[valid])[ev.shared]
    return float(K.abs().sum()), float(mass.sum()), int(ev.shared.sum())


def test_shared_residual_parts_add_up_on_random_batches():
    gen = torch.Generator().manual_seed(1)
    seen_shared = 0
    for shape in ((1, 2, 1, 2), (3, 4, 7, 2), (5, 3, 20, 3), (8, 8, 64, 2), (4, 5, 33, 50)):
        r, kappa = _random_batch(gen, *shape)
        parts = shared_residual_parts(kappa, r)
        abs_K, mass, n_shared = _residual_by_definition(kappa, r)
        assert parts == SharedResidual(abs_K=abs_K, mass=mass, events=n_shared)
        assert parts.value == (abs_K / mass if mass > 0 else 0.0)
        assert shared_residual(kappa, r) == parts.value  # the thin wrapper: the same float
        assert exchange.shared_residual(kappa, r) == parts.value
        ids, K, m = shared_event_coefficients(kappa, events(r))
        assert torch.equal(ids, shared_events(r)) and SharedResidual.of(K, m) == parts
        seen_shared += parts.events
    assert seen_shared > 0


def test_shared_residual_parts_are_additive_over_groups():
    gen = torch.Generator().manual_seed(2)
    r, kappa = _random_batch(gen, 4, 3, 12, 2)
    r = r.replace(tokens=torch.cat([torch.ones(r.n, 1, dtype=torch.long), r.tokens[:, 1:]], 1))  # a shared first token
    whole = shared_residual_parts(kappa, r)
    pieces = []
    for gid in r.group.unique().tolist():
        rows = (r.group == gid).nonzero().flatten()
        pieces.append(shared_residual_parts(kappa[rows], r.select(rows)))
    assert whole.events == sum(p.events for p in pieces) and whole.events > 0
    assert abs(whole.abs_K - sum(p.abs_K for p in pieces)) < 1e-12
    assert abs(whole.mass - sum(p.mass for p in pieces)) < 1e-12


def test_shared_residual_value_edge_cases():
    assert SharedResidual(abs_K=0.0, mass=0.0, events=0).value == 0.0  # no shared event
    assert SharedResidual(abs_K=0.0, mass=0.0, events=3).value == 0.0  # no mass on them
    assert SharedResidual(abs_K=1.0, mass=4.0, events=2).value == 0.25
    r = Rollout(tokens=torch.tensor([[1, 2], [3, 4]]), mask=torch.ones(2, 2, dtype=torch.bool),
                rewards=torch.tensor([1.0, 0.0]), group=torch.tensor([0, 0]), old_logprobs=torch.zeros(2, 2))
    assert shared_residual_parts(torch.ones(2, 2, dtype=torch.float64), r) == SharedResidual(0.0, 0.0, 0)
    same = r.replace(tokens=torch.tensor([[1, 2], [1, 4]]))
    parts = shared_residual_parts(torch.tensor([[1.0, 5.0], [-1.0, 7.0]], dtype=torch.float64), same)
    assert parts == SharedResidual(abs_K=0.0, mass=2.0, events=1) and parts.value == 0.0
    parts = shared_residual_parts(torch.tensor([[3.0, 5.0], [-1.0, 7.0]], dtype=torch.float64), same)
    assert parts == SharedResidual(abs_K=2.0, mass=4.0, events=1) and parts.value == 0.5


def test_the_public_names():
    assert exchange.SharedResidual is SharedResidual
    assert exchange.shared_residual_parts is shared_residual_parts


# ------------------------------------------------------------ multi-turn rows (issue 41)
def _multi_turn_oracle(rollout):
    """THEORY.md section 1 read literally: an occurrence is a policy token (mask True); its
    event is (group, every token before it in the row, tool tokens included, the token).
    Events numbered in row-major order of first occurrence."""
    tokens, mask, gidx = rollout.tokens.tolist(), rollout.mask.tolist(), rollout.group_index.tolist()
    n, t_max = rollout.tokens.shape
    table, group, pos, ids = {}, [], [], [[-1] * t_max for _ in range(n)]
    for i in range(n):
        for t in range(t_max):
            if mask[i][t]:
                key = (gidx[i], tuple(tokens[i][: t + 1]))
                if key not in table:
                    table[key] = len(group)
                    group.append(gidx[i])
                    pos.append(t)
                ids[i][t] = table[key]
    return torch.tensor(ids, dtype=torch.long), group, pos


def _assert_matches_multi_turn_oracle(r):
    ev = events(r)
    ids, group, pos = _multi_turn_oracle(r)
    assert torch.equal(ev.ids, ids)
    assert ev.group.tolist() == group and ev.position.tolist() == pos
    occ = torch.bincount(ids[r.mask], minlength=len(group))
    assert torch.equal(ev.occurrences, occ)
    sizes = torch.bincount(r.group_index)
    assert torch.equal(ev.shared, occ == sizes[torch.tensor(group, dtype=torch.long)])


def test_multi_turn_events_by_hand():
    r = multi_turn_batch()
    ev = events(r)
    # by hand: group 0: a, b, c shared; d (row 0) and e (row 1) once each.
    # group 1: a, b shared; c after X Y (row 3) and c after X Z (row 4) are two events.
    assert ev.ids.tolist() == [[0, 1, -1, -1, 2, 3],
                               [0, 1, -1, -1, 2, 4],
                               [0, 1, -1, -1, 2, -1],
                               [5, 6, -1, -1, 7, -1],
                               [5, 6, -1, -1, 8, -1]]
    assert shared_events(r).tolist() == [0, 1, 2, 5, 6]
    assert ev.position.tolist() == [0, 1, 4, 5, 5, 0, 1, 4, 4]
    _assert_matches_multi_turn_oracle(r)


def test_a_tool_token_is_context_where_another_row_chose_it():
    """The same token after the same prefix is an event only in the rows where the policy
    chose it: row 1's 9 at position 1 is a policy token, row 0's (mask 0) is context."""
    r = Rollout(tokens=torch.tensor([[1, 9, 3], [1, 9, 3]]),
                mask=torch.tensor([[1, 0, 1], [1, 1, 1]], dtype=torch.bool),
                rewards=torch.tensor([1.0, 0.0], dtype=torch.float64), group=torch.tensor([0, 0]),
                old_logprobs=torch.full((2, 3), -0.5, dtype=torch.float64))
    ev = events(r)
    assert ev.ids.tolist() == [[0, -1, 1], [0, 2, 1]]
    assert ev.occurrences.tolist() == [2, 2, 1] and ev.shared.tolist() == [True, True, False]
    _assert_matches_multi_turn_oracle(r)


def test_events_match_the_multi_turn_oracle_on_random_batches():
    gen = torch.Generator().manual_seed(3)
    holes_seen = 0
    for n_groups, g, t_max, vocab in ((1, 2, 3, 2), (3, 4, 7, 2), (5, 3, 20, 2), (4, 5, 33, 3)):
        n = n_groups * g
        spans = torch.randint(1, t_max + 1, (n,), generator=gen)
        real = torch.arange(t_max)[None, :] < spans[:, None]
        mask = real & (torch.rand(n, t_max, generator=gen) < 0.7)
        mask[torch.arange(n), spans - 1] = True  # a span ends on a policy token
        holes_seen += int((real & ~mask).sum())
        # few distinct rows per group, so prefixes (tool tokens included) are shared
        tokens = torch.where(real, torch.randint(0, vocab, (n, t_max), generator=gen), 0)
        r = Rollout(tokens=tokens, mask=mask, rewards=torch.rand(n, generator=gen, dtype=torch.float64),
                    group=torch.randperm(n, generator=gen) % n_groups * 5,
                    old_logprobs=torch.full((n, t_max), -1.0, dtype=torch.float64))
        _assert_matches_multi_turn_oracle(r)
    assert holes_seen > 0
