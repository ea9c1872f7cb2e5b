"""``verl:<policy_loss>/<loss_agg_mode>``: verl 0.9.1's own losses and estimators.

Oracles: the per-mode weights of ../shared/reference/rl-libraries.md section 2.1, the
catalog objectives, and the installed ActorConfig defaults.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from exchange import token_coefficients
from exchange.checker.cases import Case, GroupConfig, build
from exchange.errors import ExchangeError
from exchange.objectives import get

pytestmark = pytest.mark.usefixtures("verl_ready")

CASE = Case(
    groups=(
        GroupConfig(((1, 2, 3), (1, 2, 0, 1, 3), (4,)), (1.0, 0.0, 0.5)),
        GroupConfig(((1, 1), (2, 0, 2, 1)), (0.0, 1.0)),
    )
)


def _kappa(target: str, rollout, **params):
    from exchange.libraries import resolve

    return token_coefficients(resolve(target, {k: str(v) for k, v in params.items()}), rollout.logprobs, rollout)


def _verl_grpo_advantages(rollout):
    """verl grpo (section 2.3): (R - mean_g) / (unbiased std_g + 1e-6)."""
    return (rollout.rewards - rollout.group_mean(rollout.rewards)) / (rollout.group_std(rollout.rewards) + 1e-6)


def test_policy_losses_and_estimators_are_registered_in_verl():
    from verl.trainer.ppo import core_algos

    from exchange.libraries.verl.loss import ESTIMATORS, POLICY_LOSSES

    assert set(POLICY_LOSSES) <= set(core_algos.POLICY_LOSS_REGISTRY)
    # verl's own losses, less the ones exchange registers through its verl.plugins entry point
    verl_own = {n for n in core_algos.POLICY_LOSS_REGISTRY if not n.startswith("exchange_")}
    assert verl_own - set(POLICY_LOSSES) == {"bypass_mode"}
    assert set(ESTIMATORS) <= set(core_algos.ADV_ESTIMATOR_REGISTRY)


def test_defaults_are_verls_own():
    from verl.trainer.config import AlgoConfig
    from verl.workers.config import ActorConfig, PolicyLossConfig

    from exchange.libraries.verl.loss import DEFAULTS

    actor = ActorConfig(strategy="fsdp", rollout_n=2, ppo_micro_batch_size_per_gpu=1)
    policy = PolicyLossConfig()
    for key in ("clip_ratio", "clip_ratio_low", "clip_ratio_high", "clip_ratio_c", "tau_pos", "tau_neg", "loss_scale_factor",
                "use_kl_loss", "kl_loss_type", "kl_loss_coef"):
        assert DEFAULTS[key] == getattr(actor, key), key
    for key in ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio", "ppo_kl_coef", "dro_beta"):
        assert DEFAULTS[key] == getattr(policy, key), key
    assert DEFAULTS["norm_adv_by_std_in_grpo"] == AlgoConfig().norm_adv_by_std_in_grpo
    assert DEFAULTS["gamma"] == AlgoConfig().gamma


@pytest.mark.parametrize(
    "mode, weight",
    [
        ("token-mean", lambda r: torch.full((r.n,), 1.0 / float(r.n_tokens), dtype=torch.float64)),
        ("token-sum", lambda r: torch.ones(r.n, dtype=torch.float64)),
        ("seq-mean-token-sum", lambda r: torch.full((r.n,), 1.0 / r.n, dtype=torch.float64)),
        # verl adds 1e-8 to an integer token count, in float32: it rounds away for L_i < 1e5.
        ("seq-mean-token-mean", lambda r: 1.0 / (r.n * r.lengths.double())),
        ("seq-mean-token-sum-norm", lambda r: torch.full((r.n,), 1.0 / (r.n * r.tokens.shape[1]), dtype=torch.float64)),
    ],
)
def test_aggregation_weights_match_the_reference_notes(mode, weight):
    rollout = build(CASE)
    kappa = _kappa(f"verl:vanilla/{mode}", rollout)
    want = (_verl_grpo_advantages(rollout) * weight(rollout))[:, None] * rollout.fmask
    torch.testing.assert_close(kappa, want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("loss", ["sapo", "geo_mean"])
def test_some_losses_ignore_loss_agg_mode(loss):
    """sapo and geo_mean aggregate per sequence whatever loss_agg_mode says (0.9.1)."""
    rollout = build(replace(CASE, off_policy=True, seed=4))
    torch.testing.assert_close(
        _kappa(f"verl:{loss}/token-mean", rollout), _kappa(f"verl:{loss}/seq-mean-token-mean", rollout), rtol=1e-12, atol=0
    )


def test_gspo_honours_loss_agg_mode_in_0_9_1():
    rollout = build(replace(CASE, off_policy=True, seed=4))
    a = _kappa("verl:gspo/token-mean", rollout)
    b = _kappa("verl:gspo/seq-mean-token-mean", rollout)
    assert not torch.allclose(a, b)


def test_vanilla_is_dapo_up_to_a_group_constant():
    """verl's default (vanilla, token-mean, grpo estimator, clip 0.2/0.28) is the catalog's
    DAPO; only the std epsilon differs (1e-6 vs 1e-4), a positive constant per group."""
    rollout = build(replace(CASE, off_policy=True, seed=5))
    kappa = _kappa("verl:vanilla/token-mean", rollout, clip_ratio_high=0.28)
    want = token_coefficients(get("dapo").bind(), rollout.logprobs, rollout)
    scale = (rollout.group_std(rollout.rewards) + 1e-4) / (rollout.group_std(rollout.rewards) + 1e-6)
    torch.testing.assert_close(kappa, want * scale[:, None], rtol=1e-9, atol=1e-12)


def test_rloo_estimator_matches_the_catalog_rloo_advantage():
    from exchange.libraries.verl.loss import advantages
    from exchange.objectives._common import rloo_advantages

    rollout = build(CASE).to(torch.float64)
    adv = advantages(rollout, "rloo", None)
    torch.testing.assert_close(adv, rloo_advantages(rollout)[:, None] * rollout.fmask, rtol=1e-12, atol=1e-12)


def test_opo_baseline_is_length_weighted():
    from exchange.libraries.verl.loss import advantages

    rollout = build(CASE).to(torch.float64)
    adv = advantages(rollout, "opo", None)[:, 0]
    lengths = rollout.lengths.double()
    torch.testing.assert_close(rollout.group_sum(lengths * adv), torch.zeros(rollout.n, dtype=torch.float64), atol=1e-12, rtol=0)
    assert float(rollout.group_sum(adv).abs().max()) > 1e-3  # not zero-sum: M4


def test_remax_needs_baseline_rewards():
    rollout = build(CASE).replace(baseline_rewards=None)
    with pytest.raises(ExchangeError, match="baseline_rewards"):
        _kappa("verl:vanilla/token-mean", rollout, estimator="remax")


def test_bad_targets_are_named():
    from exchange.libraries import resolve

    with pytest.raises(ExchangeError, match="policy_loss='ppo'"):
        resolve("verl:ppo/token-mean")
    with pytest.raises(ExchangeError, match="loss_agg_mode='mean'"):
        resolve("verl:vanilla/mean")
    with pytest.raises(ExchangeError, match="estimator='gae'"):
        resolve("verl:vanilla/token-mean", {"estimator": "gae"})
