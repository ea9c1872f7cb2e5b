"""``register()``: exchange objectives fetched back through verl's own policy-loss lookup."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from exchange import token_coefficients
from exchange.checker.cases import Case, GroupConfig, build
from exchange.errors import ExchangeError
from exchange.objectives import names, resolve

pytestmark = pytest.mark.usefixtures("verl_ready")

CASE = Case(
    groups=(
        GroupConfig(((1, 2, 3), (1, 2, 0, 1, 3), (4,)), (1.0, 0.0, 0.5)),
        GroupConfig(((1, 1), (2, 0, 2, 1)), (0.0, 1.0)),
    ),
    off_policy=True,
    seed=7,
)


def _verl_kappa(verl_name, rollout, advantages):
    """kappa of the loss verl finds under ``verl_name``, on verl's tensors."""
    from verl.trainer.ppo import core_algos

    fn = core_algos.get_policy_loss_fn(verl_name)
    lp = rollout.logprobs.detach().to(torch.float64).requires_grad_(True)
    loss, metrics = fn(
        old_log_prob=rollout.old_logprobs.to(torch.float64), log_prob=lp, advantages=advantages,
        response_mask=rollout.mask, loss_agg_mode="token-mean", config=None,
    )
    (grad,) = torch.autograd.grad(loss, lp)
    assert f"actor/{verl_name}_loss" in metrics
    return torch.where(rollout.mask, -grad, torch.zeros((), dtype=torch.float64))


def test_every_catalog_objective_is_registered():
    from verl.trainer.ppo import core_algos

    from exchange.libraries.verl.register import register

    registered = register()
    assert registered == [f"exchange_{n}" for n in names()]
    assert set(registered) <= set(core_algos.POLICY_LOSS_REGISTRY)


def test_round_trip_equals_the_native_objective_with_verl_advantages():
    """verl's grpo estimator without std (A = R - mean_g) -> exchange_dr_grpo reproduces
    the native Dr. GRPO coefficients exactly, off-policy, across two groups."""
    from exchange.libraries.verl.loss import advantages
    from exchange.libraries.verl.register import register

    register(["dr_grpo"])
    rollout = build(CASE).to(torch.float64)
    adv = advantages(rollout, "grpo", None, norm_adv_by_std_in_grpo=False)
    got = _verl_kappa("exchange_dr_grpo", rollout, adv)
    want = token_coefficients(resolve("dr_grpo"), rollout.logprobs, rollout)
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-15)


def test_round_trip_is_the_native_objective_up_to_a_constant_for_std_scaled_losses():
    from exchange.libraries.verl.loss import advantages
    from exchange.libraries.verl.register import register

    register(["grpo", "dapo"])
    rollout = build(replace(CASE, groups=CASE.groups[:1])).to(torch.float64)  # one group: one constant
    adv = advantages(rollout, "grpo", None)
    for name in ("grpo", "dapo"):
        got = _verl_kappa(f"exchange_{name}", rollout, adv)
        # verl's loss_agg_mode (token-mean here) is honoured by objectives that take one.
        agg = {"loss_agg_mode": "token-mean"} if name == "grpo" else {}
        want = token_coefficients(resolve(name, **agg), rollout.logprobs, rollout)
        ratio = got[rollout.mask] / want[rollout.mask]
        ok = want[rollout.mask].abs() > 1e-12
        assert float(ratio[ok].min()) > 0
        torch.testing.assert_close(ratio[ok], ratio[ok][:1].expand(int(ok.sum())), rtol=1e-9, atol=0)


def test_rollout_correction_weights_are_refused():
    from verl.trainer.ppo import core_algos

    from exchange.libraries.verl.register import register

    register(["dapo"])
    rollout = build(CASE).to(torch.float64)
    fn = core_algos.get_policy_loss_fn("exchange_dapo")
    with pytest.raises(ExchangeError, match="rollout_is_weights"):
        fn(rollout.old_logprobs, rollout.logprobs, torch.zeros_like(rollout.logprobs), rollout.mask,
           rollout_is_weights=torch.ones_like(rollout.logprobs))


def test_surgical_is_refused_at_registration_with_the_reason():
    """verl passes a policy loss no tokens and no uid: '+surgical' cannot find shared
    events there, so register() refuses it (before, it registered and failed at its
    first call), and registers nothing of the list."""
    from verl.trainer.ppo import core_algos

    from exchange.errors import InvalidArgument
    from exchange.libraries.verl.register import register

    with pytest.raises(InvalidArgument, match=r"'dapo\+surgical'.*tokens and group \(uid\)"):
        register(["grpo", "dapo+surgical"], prefix="refused_")
    assert "refused_grpo" not in core_algos.POLICY_LOSS_REGISTRY
    assert register(["gspo+min_replace"], prefix="kept_") == ["kept_gspo+min_replace"]


def test_the_plugin_names_the_surgical_reason():
    """EXCHANGE_VERL_OBJECTIVES=dapo+surgical: the plugin's one line says why, not that
    'surgical' is no restoring transformation."""
    from exchange.errors import InvalidArgument
    from exchange.libraries.verl.plugin import chosen_objectives

    with pytest.raises(InvalidArgument, match=r"EXCHANGE_VERL_OBJECTIVES='dapo\+surgical'.*group \(uid\)"):
        chosen_objectives("dapo+surgical")
    assert chosen_objectives("dapo, grpo") == ["dapo", "grpo"]
