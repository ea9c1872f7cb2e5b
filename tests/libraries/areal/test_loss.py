"""``areal:<ppo|sapo>``: AReaL 1.0.4's own actor.py, functional.py and Normalization."""

from __future__ import annotations

import sys

import pytest
import torch

from exchange import token_coefficients
from exchange.checker.cases import Case, GroupConfig, build
from exchange.errors import ExchangeError

pytestmark = pytest.mark.usefixtures("areal_ready")

CASE = Case(
    groups=(
        GroupConfig(((1, 2, 3), (1, 2, 0, 1, 3), (4,)), (1.0, 0.0, 0.5)),
        GroupConfig(((1, 1), (2, 0, 2, 1), (3,)), (0.0, 1.0, 2.0)),
    )
)
GROUP_REWARD = {"reward_mean_level": "group", "reward_std_level": "group"}


def _kappa(target, rollout, **params):
    from exchange.libraries import resolve

    return token_coefficients(resolve(target, {k: str(v) for k, v in params.items()}), rollout.logprobs, rollout)


def test_loading_leaves_no_stub_modules_behind():
    from exchange.libraries.areal.loss import _modules

    _modules()
    assert [m for m in sys.modules if m.startswith(("areal", "einops", "torchdata"))] == []


def test_default_config_uses_raw_rewards():
    """PPOActorConfig has reward_norm=None and adv_norm=None: with no critic the
    advantage of every token is the raw reward (not zero-sum: M4)."""
    from exchange.libraries.areal.loss import advantages

    rollout = build(CASE).to(torch.float64)
    adv = advantages(rollout, {})
    torch.testing.assert_close(adv, rollout.rewards[:, None] * rollout.fmask.to(torch.float64), rtol=1e-6, atol=1e-7)


def test_group_reward_norm_is_grpo():
    from exchange.libraries.areal.loss import advantages

    rollout = build(CASE).to(torch.float64)
    adv = advantages(rollout, GROUP_REWARD)[:, 0]
    want = (rollout.rewards - rollout.group_mean(rollout.rewards)) / (rollout.group_std(rollout.rewards) + 1e-5)
    torch.testing.assert_close(adv, want, rtol=1e-5, atol=1e-6)


def test_group_adv_norm_centres_on_the_token_weighted_mean():
    """NormConfig's help says mean_level="group" normalises "within fixed-size groups";
    on advantages ``Normalization`` gets the loss mask, so the group mean is weighted by
    response length, sum_j L_j A_j / sum_j L_j, and unequal lengths leave the group
    non-zero-sum (M4, the OPO baseline of THEORY.md section 4)."""
    from exchange.libraries.areal.loss import advantages

    rollout = build(CASE).to(torch.float64)
    adv = advantages(rollout, {"adv_mean_level": "group"})[:, 0]
    lengths = rollout.mask.sum(1).to(torch.float64)
    weighted = rollout.group_sum(lengths * rollout.rewards) / rollout.group_sum(lengths)
    torch.testing.assert_close(adv, rollout.rewards - weighted, rtol=1e-5, atol=1e-6)
    assert float(rollout.group_sum(adv).abs().max()) > 1e-2


def test_sequence_level_ratio_keeps_the_token_mean():
    """importance_sampling_level=sequence (GSPO) in AReaL: every token of response i
    carries A_i s_i / N on-policy, no 1/L_i (no M3)."""
    rollout = build(CASE)
    kappa = _kappa("areal:ppo", rollout, importance_sampling_level="sequence", **GROUP_REWARD)
    from exchange.libraries.areal.loss import advantages

    adv = advantages(rollout.to(torch.float64), GROUP_REWARD)[:, 0]
    want = (adv / float(rollout.n_tokens))[:, None] * rollout.fmask.to(torch.float64)
    torch.testing.assert_close(kappa.to(torch.float64), want, rtol=1e-5, atol=1e-7)


def test_sapo_on_policy_equals_ppo_on_policy():
    rollout = build(CASE)
    torch.testing.assert_close(_kappa("areal:sapo", rollout, **GROUP_REWARD), _kappa("areal:ppo", rollout, **GROUP_REWARD))


def test_unequal_groups_and_bad_params_are_named():
    from exchange.libraries import resolve

    uneven = Case(groups=(GroupConfig(((1,), (2,)), (1.0, 0.0)), GroupConfig(((1,), (2,), (3,)), (1.0, 0.0, 2.0))))
    with pytest.raises(ExchangeError, match="equal group sizes"):
        _kappa("areal:ppo", build(uneven), adv_mean_level="batch", **GROUP_REWARD)
    _kappa("areal:ppo", build(uneven), **GROUP_REWARD)  # group levels only: once per group size
    with pytest.raises(ExchangeError, match="loss='grpo'"):
        resolve("areal:grpo")
    with pytest.raises(ExchangeError, match="c_clip=1.0"):
        resolve("areal:ppo", {"c_clip": "1.0"})
    with pytest.raises(ExchangeError, match="adv_mean_level='token'"):
        resolve("areal:ppo", {"adv_mean_level": "token"})


def test_group_reward_then_batch_adv_norm_is_not_zero_sum():
    """AReaL's GRPO recipe with a batch-level adv_norm on top (not an audit row: the
    checker draws unequal groups, which AReaL's group reshaping cannot take): the batch
    mean over tokens re-centres every group by the same amount, so groups stop summing
    to zero (M4)."""
    from exchange.libraries.areal.loss import advantages

    equal = Case(groups=(GroupConfig(((1, 2, 3), (1,), (4, 4)), (1.0, 0.0, 0.0)), GroupConfig(((1, 1), (2,), (3, 0, 1)), (0.0, 1.0, 3.0))))
    rollout = build(equal).to(torch.float64)
    grpo = advantages(rollout, GROUP_REWARD)[:, 0]
    assert float(rollout.group_sum(grpo).abs().max()) < 1e-5
    both = advantages(rollout, {**GROUP_REWARD, "adv_mean_level": "batch", "adv_std_level": "batch"})[:, 0]
    assert float(rollout.group_sum(both).abs().max()) > 1e-2


def test_leave_one_out_is_rloo():
    """mean_leave1out: each reward minus the mean of the others, zero-sum per group."""
    from exchange.libraries.areal.loss import advantages

    case = Case(groups=(GroupConfig(((1, 2), (3,)), (0.7, 0.1)), GroupConfig(((1,), (2, 1), (3,)), (1.0, 0.0, 0.5))))
    rollout = build(case).to(torch.float64)
    adv = advantages(rollout, {"reward_mean_level": "group", "mean_leave1out": True})[:, 0]
    want = torch.tensor([0.6, -0.6, 0.75, -0.75, 0.0], dtype=torch.float64)
    torch.testing.assert_close(adv, want, rtol=1e-6, atol=1e-6)


@pytest.mark.slow  # ~1-3 s: the fast tier stays under 3 minutes
def test_declares_float32_advantages():
    """AReaL's Normalization returns float32: the adapter says so, and the group-normalised
    GRPO loss holds (Z) up to float32 round-off instead of failing at float64 tolerance."""
    from exchange.checker import check
    from exchange.libraries import resolve

    fn = resolve("areal:ppo", {k: v for k, v in GROUP_REWARD.items()})
    assert fn.exchange_precision == "float32"
    report = check(fn, max_examples=5, seed=0, regimes=("on_policy",), properties=("zero_sum",))
    assert report.holds("zero_sum", "on_policy")
    tight = check(fn, max_examples=5, seed=0, regimes=("on_policy",), properties=("zero_sum",), precision="float64")
    assert not tight.holds("zero_sum", "on_policy")  # the residual is float32 round-off


def test_raw_rewards_off_policy_m2_is_named():
    """AReaL's default (raw rewards): with rewards of both signs the PPO clip zeroes a
    shared event above 1 + eps only in the positive responses (M2); the checker's
    shared-ratio probes draw rewards of both signs (issue 30), so it names M2 and M4."""
    from exchange.libraries import KNOWN_DISAGREEMENTS
    from exchange.libraries.areal.loss import expected

    case = Case(groups=(GroupConfig(((1, 2), (1, 3)), (1.0, -1.0)),), off_policy=True, seed=0)
    rollout = build(case)
    logprobs = rollout.logprobs.detach().clone()
    logprobs[:, 0] = rollout.old_logprobs[:, 0] + 0.5  # the shared first event at ratio e^0.5 > 1.2
    lp = logprobs.requires_grad_(True)
    from exchange.libraries import resolve

    kappa = token_coefficients(resolve("areal:ppo"), lp.detach(), rollout)
    assert float(kappa[0, 0]) == 0.0 and float(kappa[1, 0]) != 0.0  # clipped for A > 0 only
    assert "M2" in expected("ppo")["off_policy"].mechanisms
    assert "areal:ppo" not in KNOWN_DISAGREEMENTS
    from exchange import check

    report = check(resolve("areal:ppo"), max_examples=10, seed=0, regimes=("off_policy",))
    assert set(report.mechanisms_in("off_policy")) == set(expected("ppo")["off_policy"].mechanisms)
