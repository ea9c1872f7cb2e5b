"""The surgical transform removes the shared-event residual and nothing else.

Direct coefficient comparisons on hand-built, event-consistent rollouts (float64), then
the checker's (C) on the wrapped loss. A transform that touched a non-shared
coefficient, or left a shared residual, fails here.
"""

from __future__ import annotations

import pytest
import torch

import exchange
from exchange import token_coefficients
from exchange.core.events import events, shared_event_coefficients
from exchange.errors import InvalidArgument
from exchange.objectives import resolve, surgical
from tests.objectives.catalog_cases import make_rollout

GROUPS = [
    [[1, 2, 3, 4], [1, 2, 5], [1, 2, 3, 6, 7, 8], [1, 2, 9, 9, 9]],
    [[1, 4], [1, 5, 5], [1, 4, 6], [1, 7]],
]
REWARDS = [[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0]]


@pytest.mark.parametrize("spec,off_policy", [("grpo", False), ("grpo", True), ("gspo", True), ("dapo", True),
                                             ("cispo", True)])
def test_only_shared_occurrences_change(spec, off_policy):
    lp, r = make_rollout(GROUPS, REWARDS, off_policy=off_policy)
    base, cut = resolve(spec), resolve(f"{spec}+surgical")
    k0, k1 = token_coefficients(base, lp, r), token_coefficients(cut, lp, r)
    ev = events(r)
    shared_occ = ev.shared[ev.ids.clamp(min=0)] & r.mask
    scale = float(k0.abs().max())
    # every non-shared coefficient is the base loss's own, to float64 round-off
    assert torch.allclose(k1[~shared_occ], k0[~shared_occ], rtol=0, atol=1e-13 * scale)
    # (C): every shared event cancels
    _, K1, _ = shared_event_coefficients(k1, ev)
    assert float(K1.abs().max()) <= 1e-13 * scale
    # the base had a residual there (else the test shows nothing), except CISPO's
    # token mean, which already cancels: then nothing at all may change
    _, K0, _ = shared_event_coefficients(k0, ev)
    if spec == "cispo":
        assert torch.allclose(k1, k0, rtol=0, atol=1e-13 * scale)
    else:
        assert float(K0.abs().max()) > 1e-3 * scale
    # each shared occurrence moved by exactly K_e / n_e
    K_all = torch.zeros(ev.count, dtype=torch.float64).index_add(0, ev.ids[r.mask], k0[r.mask])
    expect = K_all[ev.ids.clamp(min=0)] / ev.occurrences[ev.ids.clamp(min=0)].double()
    assert torch.allclose((k0 - k1)[shared_occ], expect[shared_occ], rtol=0, atol=1e-13 * scale)
    # the loss value is unchanged: only the gradient moves
    assert float(cut(lp, r)) == pytest.approx(float(base(lp, r)), rel=1e-12, abs=1e-15)


def test_a_transform_touching_non_shared_coefficients_is_caught():
    """The comparison above fails on a 'surgical' transform that also shifts non-shared
    coefficients (here: the mean shared coefficient taken off every token)."""
    lp, r = make_rollout(GROUPS, REWARDS)
    base = resolve("grpo")
    ev = events(r)
    shared_occ = ev.shared[ev.ids.clamp(min=0)] & r.mask

    def sloppy(logprobs, rollout):
        k = token_coefficients(base, logprobs.detach(), rollout)
        shift = k[shared_occ].mean()
        return base(logprobs, rollout) + (shift * (logprobs - logprobs.detach()) * rollout.mask).sum()

    k0, k1 = token_coefficients(base, lp, r), token_coefficients(sloppy, lp, r)
    assert not torch.allclose(k1[~shared_occ], k0[~shared_occ], rtol=0, atol=1e-13 * float(k0.abs().max()))


def test_checker_sees_cancellation_on_a_users_loss():
    """Any loss_fn: a user's own GRPO-like loss with 1/L_i breaks (C); wrapped, it holds."""
    def mine(logprobs, rollout):
        a = rollout.rewards - rollout.group_mean(rollout.rewards)
        per = (logprobs * rollout.fmask).sum(1) / rollout.lengths.to(logprobs.dtype)
        return -(a * per).mean()

    broken = exchange.check(mine, properties=["shared_cancellation"], max_examples=20, regimes=("on_policy",))
    fixed = exchange.check(surgical(mine), properties=["shared_cancellation"], max_examples=20, regimes=("on_policy",))
    assert not all(res.holds for res in broken.results.values())
    assert all(res.holds for res in fixed.results.values())


def test_spec_and_errors():
    assert resolve("grpo+surgical").__name__ == "grpo+surgical"
    with pytest.raises(InvalidArgument, match="comes last"):
        resolve("grpo+surgical+group_constant_norm")
    with pytest.raises(InvalidArgument, match="comes last"):
        resolve("surgical")


def test_follows_logprobs_dtype():
    lp, r = make_rollout(GROUPS, REWARDS)
    lp32 = lp.float().requires_grad_(True)
    loss = resolve("grpo+surgical")(lp32, r.with_fields(copy=True))
    loss.backward()
    assert lp32.grad.dtype == torch.float32
