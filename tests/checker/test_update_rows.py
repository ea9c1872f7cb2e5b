"""A loss that declares the optimizer step it computes (``exchange_update_rows``, issue 41:
THEORY.md section 4, a recipe audit judges one optimizer step; M8, split updates): the
checker reads (Z) and (P) on that step. A planted loss whose step is every other row
(each group split over two steps) reads (Z), (C) broken with M8 and (P) holding; the
same loss without the declaration keeps the whole-batch reading ((Z) holds on the
average over every step, (P) compares two different steps); a wrong declaration is
refused with the attribute and the fix."""

from __future__ import annotations

import pytest
import torch

from exchange.checker import check
from exchange.checker.cases import Case, GroupConfig, build
from exchange.checker.properties.permutation_invariant import _permutation
from exchange.checker.properties.reward_moves import cyclic_shifts
from exchange.checker.properties.update_rows import splits_a_group, update_rows
from exchange.errors import ObjectiveError


def _step(rollout) -> torch.Tensor:
    """Every other row: the step of a schedule that puts rows 0, 2, 4, ... in the first update."""
    return torch.arange(rollout.n, device=rollout.mask.device) % 2 == 0


def _split_step_loss(logprobs, rollout):
    """Token-sum policy gradient with group-mean advantages (dr_grpo-like: every
    property holds on a whole batch), computed on the rows of :func:`_step` only."""
    gi = rollout.group_index
    sums = torch.zeros(rollout.n_groups, dtype=rollout.rewards.dtype, device=gi.device).index_add(0, gi, rollout.rewards)
    counts = torch.bincount(gi, minlength=rollout.n_groups).to(rollout.rewards.dtype)
    adv = rollout.rewards - (sums / counts)[gi]
    weight = (adv * _step(rollout).to(adv.dtype))[:, None] * rollout.mask.to(adv.dtype)
    return -(weight * logprobs).sum() / 8.0


def _declared(fn):
    def loss(logprobs, rollout):
        return _split_step_loss(logprobs, rollout)

    loss.exchange_update_rows = fn
    return loss


def _broken(report) -> set[str]:
    d = report.to_dict()
    return {p for p, v in d["properties"].items() if not v["regimes"]["on_policy"]["holds"]}


def _mechanisms(report) -> set[str]:
    return set(report.to_dict()["mechanisms"])


def test_a_declared_split_step_reads_z_and_c_with_m8_and_not_p():
    report = check(_declared(_step), max_examples=20, seed=0, regimes=("on_policy",), shrink=False)
    assert _broken(report) == {"zero_sum", "shared_cancellation"}
    assert _mechanisms(report) == {"M8"}
    evidence = report.to_dict()["mechanism_evidence"]["on_policy"]["M8"]
    assert any("exchange_update_rows" in line for line in evidence)


def test_without_the_declaration_the_batch_is_read_as_one_update():
    """The old reading, kept for a loss that declares nothing: a row outside the step is a
    zero weight that depends on its position, so (Z)'s average over the whole group holds
    and reordering the batch moves rows across the step: (C), (P)."""
    report = check(_split_step_loss, max_examples=20, seed=0, regimes=("on_policy",), shrink=False)
    assert _broken(report) == {"shared_cancellation", "permutation_invariant"}
    assert "M8" not in _mechanisms(report)


@pytest.mark.parametrize("declaration, said", [
    (lambda r: _step(r).float(), "torch.float32 tensor of shape [5]"),
    (lambda r: _step(r)[:-1], "torch.bool tensor of shape [4]"),
    (lambda r: _step(r).tolist(), "returned a list"),
    (True, "is a bool, not a function"),
])
def test_a_wrong_declaration_names_the_attribute_and_the_fix(declaration, said):
    rollout = build(Case(groups=(GroupConfig(((1, 2), (1, 3), (1, 2)), (1.0, 0.0, 0.5)),
                                 GroupConfig(((2, 1), (2, 2)), (1.0, 0.0)))))
    with pytest.raises(ObjectiveError) as err:
        update_rows(_declared(declaration), rollout)
    msg = str(err.value)
    assert "exchange_update_rows" in msg and said in msg, msg
    assert "bool tensor [N]" in msg and "delete the attribute" in msg
    with pytest.raises(ObjectiveError, match="exchange_update_rows"):  # check() says the same, not a loss failure
        check(_declared(declaration), max_examples=4, seed=0, regimes=("on_policy",), shrink=False)


def test_the_step_moves_stay_inside_the_step():
    rollout = build(Case(groups=(GroupConfig(((1, 2), (1, 2), (1, 2), (1, 2)), (1.0, 0.0, 0.5, 0.0)),
                                 GroupConfig(((2, 1), (2, 1), (2, 1)), (1.0, 0.0, 3.0)))))
    step = _step(rollout)  # group 0: rows 0, 2 in; group 1 (rows 4, 5, 6): 4, 6 in
    assert splits_a_group(rollout, step) and not splits_a_group(rollout, torch.ones(rollout.n, dtype=torch.bool))
    shifts = cyclic_shifts(rollout, step)
    assert len(shifts) == 2  # lcm of the step's parts (2, 2); the whole groups' would be lcm(4, 3) = 12
    for perm in shifts:
        assert torch.equal(perm[~step], torch.arange(rollout.n)[~step])  # rows outside the step keep their reward
        assert bool((rollout.group_index[perm] == rollout.group_index).all())  # within the group
        assert bool(step[perm][step].all())
    assert len(cyclic_shifts(rollout)) == 12  # no step declared: the whole groups, as before
    for seed in range(20):
        perm, _ = _permutation(rollout, seed, step)
        assert bool(step[torch.tensor(perm)].eq(step).all())  # step rows onto step rows, the rest onto the rest
    assert _permutation(rollout, 3) == _permutation(rollout, 3, None)  # undeclared: the old order


def test_the_twin_passes_the_declaration_through():
    from exchange.checker.twin import Float64Twin

    rollout = build(Case(groups=(GroupConfig(((1, 2), (1, 3)), (1.0, 0.0)),)))
    assert torch.equal(update_rows(Float64Twin(_declared(_step)), rollout), _step(rollout))
    assert update_rows(Float64Twin(_split_step_loss), rollout) is None
