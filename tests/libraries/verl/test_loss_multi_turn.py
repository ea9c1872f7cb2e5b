"""Multi-turn micro-batches (issue 41): verl's agent loop zeroes ``response_mask`` on the
tool-output tokens inside a response. The ``verl:`` adapter and the registered
``exchange_*`` loss take such a mask with its holes: tool tokens get no coefficient, the
normalisers count the policy's tokens (verl's ``agg_loss`` over ``response_mask``), and
the shared events and their residuals are those computed by hand from THEORY.md."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import pytest
import torch

from exchange import Rollout, token_coefficients
from exchange.core.events import event_residuals_of, events, shared_event_coefficients
from exchange.errors import ExchangeError
from exchange.objectives import resolve
from tests.core.multi_turn import multi_turn_batch

pytestmark = pytest.mark.usefixtures("verl_ready")

# The planted batch of tests/core/multi_turn.py: policy tokens a=1 b=2, a tool's output (8 9,
# or 8 7 in row 4; mask 0), then c=3 and more. Group 0 (rows 0-2): the same tool output in
# every row, so a, b and c are shared events. Group 1 (rows 3-4): the tool outputs differ,
# so only a and b are shared.
TOKENS = multi_turn_batch().tokens
MASK = multi_turn_batch().mask.long()  # verl's response_mask is an integer tensor
TOOL = torch.zeros(5, 6, dtype=torch.bool)
TOOL[:, 2:4] = True


def multi_turn(logprobs: torch.Tensor | None = None) -> Rollout:
    return dataclasses.replace(multi_turn_batch(), logprobs=logprobs)


def _shared_residuals(kappa, rollout):
    ids, K, mass = shared_event_coefficients(kappa, events(rollout))
    return ids.tolist(), event_residuals_of(K, mass).tolist()


def test_verl_adapter_judges_a_multi_turn_batch_as_derived_by_hand():
    """On-policy, verl's vanilla loss gives kappa[i, t] = A_i * w_i on policy tokens.
    seq-mean-token-mean: w_i = 1 / (B L_i) with L_i the policy tokens (4, 4, 3 in group 0;
    the tool tokens are not counted), A of group 0 proportional to (2, -1, -1): every shared
    event of group 0 has K / mass = |2/4 - 1/4 - 1/3| / (2/4 + 1/4 + 1/3) = 1/13; group 1
    (L = 3, 3; A = +a, -a) cancels exactly. token-mean: one weight, every residual 0."""
    from exchange.libraries import resolve as resolve_target

    r = multi_turn()
    by_hand = Fraction(abs(Fraction(2, 4) - Fraction(1, 4) - Fraction(1, 3)), Fraction(2, 4) + Fraction(1, 4) + Fraction(1, 3))
    assert by_hand == Fraction(1, 13)
    kappa = token_coefficients(resolve_target("verl:vanilla/seq-mean-token-mean"), r.old_logprobs, r)
    assert bool((kappa[TOOL] == 0).all()) and bool((kappa[MASK.bool()] != 0).all())
    ids, res = _shared_residuals(kappa, r)
    assert ids == [0, 1, 2, 5, 6]  # a, b, c of group 0; a, b of group 1
    assert res[:3] == pytest.approx([1 / 13] * 3, rel=1e-12, abs=0)
    assert res[3:] == pytest.approx([0.0, 0.0], abs=1e-15)
    kappa = token_coefficients(resolve_target("verl:vanilla/token-mean"), r.old_logprobs, r)
    assert _shared_residuals(kappa, r)[1] == pytest.approx([0.0] * 5, abs=1e-15)


def test_registered_loss_takes_a_multi_turn_mask():
    """The registered exchange_dr_grpo, fed verl's own grpo advantages (no std) for a
    multi-turn micro-batch, reproduces the native Dr. GRPO coefficients off-policy, with 0
    on the tool tokens. Before issue 41 it raised "row 0 is not right-padded"; and verl's
    estimator must find each reward on the last policy token (position 5 of row 0, not
    mask.sum() - 1 = 3, a tool token whose reward the mask would erase)."""
    from exchange.libraries.verl.loss import advantages
    from exchange.libraries.verl.register import register
    from verl.trainer.ppo import core_algos

    register(["dr_grpo"])
    gen = torch.Generator().manual_seed(0)
    lp = -0.5 + 0.3 * (torch.rand(5, 6, generator=gen, dtype=torch.float64) - 0.5)
    r = multi_turn(torch.where(MASK.bool(), lp, -0.5))
    adv = advantages(r, "grpo", None, norm_adv_by_std_in_grpo=False)
    centred = (r.rewards - r.group_mean(r.rewards))[:, None] * MASK
    torch.testing.assert_close(adv, centred, rtol=0, atol=1e-12)
    fn = core_algos.get_policy_loss_fn("exchange_dr_grpo")
    x = r.logprobs.clone().requires_grad_(True)
    loss, _ = fn(old_log_prob=r.old_logprobs, log_prob=x, advantages=adv, response_mask=MASK,
                 loss_agg_mode="token-mean", config=None)
    (grad,) = torch.autograd.grad(loss, x)
    assert bool((grad[TOOL] == 0).all())
    want = token_coefficients(resolve("dr_grpo"), r.logprobs, r)
    torch.testing.assert_close(-grad, want, rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize("bad,message", [
    (torch.tensor([[1, 2, 0]]), "response_mask[0, 1]=2 is neither 0 nor 1"),
    (torch.tensor([[1.0, 0.5, 1.0]]), "response_mask[0, 1]=0.5 is neither 0 nor 1"),
    (torch.tensor([[0, 0, 0]]), "empty response"),
])
def test_registered_loss_refuses_a_malformed_mask(bad, message):
    from exchange.libraries.verl.register import rollout_from_verl

    with pytest.raises(ExchangeError) as err:
        rollout_from_verl(torch.full((1, 3), -0.5), torch.ones(1, 3), bad)
    assert message in str(err.value)


def test_multi_turn_paths_follow_the_inputs_device():
    """Every tensor these paths create follows the inputs: run under a meta default device
    (as tests/test_device.py's guard), a stray tensor would land on meta and fail."""
    from exchange.libraries.verl.dump import policy_mask
    from exchange.libraries.verl.loss import _last_token, advantages
    from exchange.libraries.verl.register import rollout_from_verl

    r = multi_turn()
    adv = advantages(r, "grpo", None)  # verl's own estimator makes its tensors itself
    with torch.device("meta"):
        again = Rollout(tokens=r.tokens, mask=r.mask, rewards=r.rewards, group=r.group, old_logprobs=r.old_logprobs)
        assert again.spans.device.type == "cpu" and again.spans.tolist() == [6, 6, 5, 5, 5]
        ev = events(again)
        assert ev.ids.device.type == "cpu" and ev.shared.tolist()[:3] == [True] * 3
        assert policy_mask(MASK, MASK.bool() | TOOL).device.type == "cpu"
        last = _last_token(again.rewards, again.mask)
        assert last.device.type == "cpu" and last.nonzero().tolist() == [[0, 5], [3, 4]]
        verl_rollout = rollout_from_verl(r.old_logprobs, adv, MASK)
        assert verl_rollout.mask.device.type == "cpu" and verl_rollout.lengths.tolist() == [4, 4, 3, 3, 3]


def test_the_monitors_step_rollout_finds_the_events_by_hand():
    """The verl monitor's rows of one step (verl's responses, response_mask and uid) give
    the events derived by hand: tool tokens are context, not events, so p1 shares a, b, c
    and p2 shares a, b (5 shared events; 8 if the tool tokens counted as events)."""
    from exchange.libraries.verl.monitor import step_rollout

    r = step_rollout(TOKENS, MASK, ["p1", "p1", "p1", "p2", "p2"])
    assert torch.equal(r.mask, MASK.bool())
    ev = events(r)
    assert ev.ids.tolist() == events(multi_turn()).ids.tolist()
    assert int(ev.shared.sum()) == 5
