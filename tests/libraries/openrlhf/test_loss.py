"""``openrlhf:<estimator>``: OpenRLHF 0.11.2's own loss.py and experience-maker code."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest
import torch

from exchange import token_coefficients
from exchange.checker.cases import Case, GroupConfig, build
from exchange.errors import ExchangeError
from exchange.objectives import get

pytestmark = pytest.mark.usefixtures("openrlhf_ready")

CASE = Case(
    groups=(
        GroupConfig(((1, 2, 3), (1, 2, 0, 1, 3), (4,)), (1.0, 0.0, 0.5)),
        GroupConfig(((1, 1), (2, 0, 2, 1)), (0.0, 1.0)),
    )
)
EQUAL = Case(
    groups=(
        GroupConfig(((1, 2, 3), (1, 2, 0, 1, 3)), (1.0, 0.0)),
        GroupConfig(((1, 1), (2, 0, 2, 1)), (3.0, 1.0)),
    )
)


def _kappa(target, rollout, **params):
    from exchange.libraries import resolve

    return token_coefficients(resolve(target, {k: str(v) for k, v in params.items()}), rollout.logprobs, rollout)


def test_loading_leaves_no_stub_modules_behind():
    from exchange.libraries.openrlhf.loss import _modules

    _modules()
    leaked = [m for m in sys.modules if m == "openrlhf" or m.startswith("openrlhf.") or m == "deepspeed"]
    assert leaked == []
    assert "ray" not in sys.modules or hasattr(sys.modules["ray"], "__spec__") and sys.modules["ray"].__spec__ is not None


def test_group_norm_is_dapo_up_to_a_group_constant():
    """group_norm + PPO token-mean = the catalog's DAPO at clip 0.2/0.28, std eps 1e-9 vs 1e-4."""
    rollout = build(replace(CASE, off_policy=True, seed=5))
    kappa = _kappa("openrlhf:group_norm", rollout, eps_clip_high=0.28)
    want = token_coefficients(get("dapo").bind(), rollout.logprobs, rollout)
    std = rollout.group_std(rollout.rewards)
    torch.testing.assert_close(kappa, want * ((std + 1e-4) / (std + 1e-9))[:, None], rtol=1e-9, atol=1e-12)


def test_dr_grpo_changes_only_the_advantage():
    """OpenRLHF's dr_grpo = R - mean_g in the same token-mean loss (section 3.2)."""
    rollout = build(CASE)
    kappa = _kappa("openrlhf:dr_grpo", rollout)
    adv = rollout.rewards - rollout.group_mean(rollout.rewards)
    torch.testing.assert_close(kappa, (adv / float(rollout.n_tokens))[:, None] * rollout.fmask, rtol=1e-9, atol=1e-12)


def test_gspo_forces_the_per_sample_mean():
    rollout = build(CASE)
    a = _kappa("openrlhf:group_norm", rollout, policy_loss_type="gspo")
    b = _kappa("openrlhf:group_norm", rollout, loss_agg_mode="seq-mean-token-mean")
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-15)


def test_reward_clip_range_breaks_zero_sum():
    """The shaped reward (R - mean_g) is clamped to clip_range (-10, 10) after the
    baseline (section 3.2): an extreme group stops summing to zero (M4)."""
    from exchange.libraries.openrlhf.loss import advantages

    case = Case(groups=(GroupConfig(((1,), (2,), (3,)), (30.0, 0.0, 0.0)),))
    rollout = build(case).to(torch.float64)
    adv = advantages(rollout, "dr_grpo")[:, 0]  # R - mean = (20, -10, -10) -> (10, -10, -10)
    torch.testing.assert_close(adv, torch.tensor([10.0, -10.0, -10.0], dtype=torch.float64))


def test_batch_whitening_is_not_zero_sum_per_group():
    from exchange.libraries.openrlhf.loss import advantages

    rollout = build(EQUAL).to(torch.float64)
    adv = advantages(rollout, "reinforce_baseline")[:, 0]
    assert float(rollout.group_sum(adv).abs().max()) > 1e-3  # M4


def test_batch_estimators_refuse_unequal_groups():
    with pytest.raises(ExchangeError, match="equal group sizes"):
        _kappa("openrlhf:reinforce_baseline", build(CASE))


def test_bad_targets_are_named():
    from exchange.libraries import resolve

    with pytest.raises(ExchangeError, match="estimator='gae'"):
        resolve("openrlhf:gae")
    with pytest.raises(ExchangeError, match="dual_clip"):
        resolve("openrlhf:group_norm", {"dual_clip": "0.5"})
