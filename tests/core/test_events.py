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
