"""The coupling-only surgical transform (issue 42's M1 design, exchange.objectives.coupling):
each shared event keeps exactly the residual the group-mean-weight objective leaves, every
other coefficient is the base loss's own, the loss value is unchanged; an objective whose
weights are already equal within each group is left as it is."""

from __future__ import annotations

import pytest
import torch

from exchange import token_coefficients
from exchange.core.events import events, shared_event_coefficients
from exchange.errors import InvalidArgument
from exchange.objectives import get
from exchange.objectives.coupling import coupling_surgical, group_mean_weight
from exchange.objectives._factored import factored_loss
from tests.objectives.catalog_cases import make_rollout

# equal lengths within each group (the M1 design's max_filler = 0, fixed answer length)
EQUAL = [
    [[1, 2, 3, 4], [1, 2, 5, 6], [1, 2, 3, 7], [1, 8, 9, 9]],
    [[1, 4, 4], [1, 5, 5], [1, 4, 6], [1, 7, 2]],
]
UNEQUAL = [
    [[1, 2, 3, 4], [1, 2, 5], [1, 2, 3, 6, 7, 8], [1, 2, 9, 9, 9]],
    [[1, 4], [1, 5, 5], [1, 4, 6], [1, 7]],
]
REWARDS = [[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0]]


def _flat(spec):
    import functools

    obj = get(spec)
    return functools.partial(factored_loss, group_mean_weight(obj.factors), **obj.params())


@pytest.mark.parametrize("groups", [EQUAL, UNEQUAL], ids=["equal", "unequal"])
def test_gspo_keeps_only_the_group_mean_weights_residual(groups):
    lp, r = make_rollout(groups, REWARDS, off_policy=True)
    obj = get("gspo")
    base, cut = obj.bind(), coupling_surgical(obj)
    k0, k1, kbar = (token_coefficients(f, lp, r) for f in (base, cut, _flat("gspo")))
    ev = events(r)
    shared_occ = ev.shared[ev.ids.clamp(min=0)] & r.mask
    scale = float(k0.abs().max())
    assert torch.allclose(k1[~shared_occ], k0[~shared_occ], rtol=0, atol=1e-13 * scale)
    _, K1, _ = shared_event_coefficients(k1, ev)
    _, Kbar, _ = shared_event_coefficients(kbar, ev)
    _, K0, _ = shared_event_coefficients(k0, ev)
    assert torch.allclose(K1, Kbar, rtol=0, atol=1e-13 * scale)  # K'_e = the group-mean objective's K_e
    assert float((K0 - Kbar).abs().max()) > 1e-3 * scale  # the coupling had a residual to remove
    assert float(cut(lp, r)) == pytest.approx(float(base(lp, r)), rel=1e-12, abs=1e-15)
    # the group-mean objective weights every token of a group alike: kbar / A_i is one number per group
    adv = token_coefficients(get("dr_grpo").bind(), lp, r)  # A_i / const at every token (no clip on this data)
    for g in r.group.unique():
        rows = (r.group == g) & (adv.abs() > 1e-12).any(1)
        ratio = kbar[rows][r.mask[rows]] / adv[rows][r.mask[rows]]
        assert float(ratio.max() - ratio.min()) <= 1e-12 * float(ratio.abs().max()), ratio
    # here every shared event lies in every response of its group (sum_i A_i = 0), so the group-mean
    # objective leaves none and K'_e = 0 as under '+surgical'; Dr. GRPO below tells the two apart
    assert float(Kbar.abs().max()) <= 1e-13 * scale


def test_equal_weights_within_each_group_are_left_as_they_are():
    """Dr. GRPO (a constant normaliser, no response ratio): its weights are their group
    mean already, so nothing moves (a transform that removed the whole residual fails)."""
    lp, r = make_rollout(UNEQUAL, REWARDS, off_policy=True)
    obj = get("dr_grpo")
    k0, k1 = token_coefficients(obj.bind(), lp, r), token_coefficients(coupling_surgical(obj), lp, r)
    assert torch.allclose(k1, k0, rtol=0, atol=1e-13 * float(k0.abs().max()))
    _, K0, _ = shared_event_coefficients(k0, events(r))
    assert float(K0.abs().max()) > 1e-6  # Dr. GRPO's own residual stays (it is not the weights')


def test_an_objective_without_factors_is_refused():
    import dataclasses

    obj = dataclasses.replace(get("gspo"), factors=None)
    with pytest.raises(InvalidArgument, match="not in the factored form .* use '\\+surgical' instead"):
        coupling_surgical(obj)
