"""``skyrl:<policy_loss_type>``: skyrl-train 0.3.1's own ppo_utils.py (losses, reductions, estimators)."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest
import torch

from exchange import token_coefficients
from exchange.checker.cases import Case, GroupConfig, build
from exchange.errors import ExchangeError
from exchange.objectives import get

pytestmark = pytest.mark.usefixtures("skyrl_ready")

CASE = Case(
    groups=(
        GroupConfig(((1, 2, 3), (1, 2, 0, 1, 3), (4,)), (1.0, 0.0, 0.5)),
        GroupConfig(((1, 1), (2, 0, 2, 1)), (0.0, 1.0)),
    )
)


def _kappa(target, rollout, **params):
    from exchange.libraries import resolve

    return token_coefficients(resolve(target, {k: str(v) for k, v in params.items()}), rollout.logprobs, rollout)


def test_loading_leaves_no_stub_modules_behind():
    from exchange.libraries.skyrl.loss import _ppo_utils

    _ppo_utils()
    leaked = [m for m in sys.modules if m.startswith(("skyrl_train", "jaxtyping"))]
    assert leaked == []
    for name in ("ray", "loguru"):
        assert name not in sys.modules or getattr(sys.modules[name], "__spec__", None) is not None


def test_regular_token_mean_is_dapo_up_to_a_group_constant():
    """SkyRL's default (regular PPO clip, token_mean, grpo with unbiased std + 1e-6) is the
    catalog's DAPO (clip 0.2/0.28, std + 1e-4) times a per-group constant."""
    rollout = build(replace(CASE, off_policy=True, seed=5))
    kappa = _kappa("skyrl:regular", rollout, eps_clip_high=0.28)
    want = token_coefficients(get("dapo").bind(), rollout.logprobs, rollout)
    std = rollout.group_std(rollout.rewards)
    torch.testing.assert_close(kappa, want * ((std + 1e-4) / (std + 1e-6))[:, None], rtol=1e-5, atol=1e-8)


def test_seq_mean_token_sum_norm_divides_by_the_constant_max_seq_len():
    rollout = build(CASE)
    kappa = _kappa("skyrl:regular", rollout, loss_reduction="seq_mean_token_sum_norm", grpo_norm_by_std="false")
    adv = rollout.rewards - rollout.group_mean(rollout.rewards)
    want = (adv / (rollout.mask.shape[0] * 1536.0))[:, None] * rollout.fmask
    torch.testing.assert_close(kappa, want.to(kappa.dtype), rtol=1e-6, atol=1e-10)


def test_gspo_honours_token_mean_despite_its_docstring():
    """ppo_utils.py says "GSPO must use sequence_mean reduction" but only logs a warning:
    with token_mean every token of a response carries A_i / N (no 1/L_i, so no M3)."""
    rollout = build(CASE)
    kappa = _kappa("skyrl:gspo", rollout, grpo_norm_by_std="false")
    adv = rollout.rewards - rollout.group_mean(rollout.rewards)
    torch.testing.assert_close(kappa, ((adv / float(rollout.n_tokens))[:, None] * rollout.fmask).to(kappa.dtype),
                               rtol=1e-6, atol=1e-10)
    seq = _kappa("skyrl:gspo", rollout, grpo_norm_by_std="false", loss_reduction="sequence_mean")
    assert float((seq - kappa).abs().max()) > 1e-3


def test_advantage_batch_normalize_is_not_zero_sum_per_group():
    """"Training batch level normalization": the mean is taken over every [N, T] entry,
    padding included, so a group's advantages stop summing to zero (M4)."""
    from exchange.libraries.skyrl.loss import advantages

    rollout = build(CASE).to(torch.float64)
    plain = advantages(rollout, {})[:, 0]
    assert float(rollout.group_sum(plain).abs().max()) < 1e-6
    normed = advantages(rollout, {"advantage_batch_normalize": True})[:, 0]
    assert float(rollout.group_sum(normed).abs().max()) > 1e-3


def test_reinforce_pp_whitens_over_the_batch():
    from exchange.libraries.skyrl.loss import advantages

    case = Case(groups=(GroupConfig(((1, 2, 3), (1, 2, 0, 1, 3), (4,)), (1.0, 0.0, 0.0)), GroupConfig(((1, 1), (2, 0)), (3.0, 1.0))))
    rollout = build(case).to(torch.float64)
    adv = advantages(rollout, {"estimator": "reinforce++"})
    valid = adv[rollout.mask]
    assert abs(float(valid.mean())) < 1e-6  # whitened over the batch's tokens ...
    assert float(rollout.group_sum(adv[:, 0]).abs().max()) > 1e-3  # ... not per group (M4)


def test_clip_cov_is_deterministic_and_leaves_the_global_rng_alone():
    rollout = build(replace(CASE, off_policy=True, seed=3))
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = _kappa("skyrl:clip_cov", rollout, clip_cov_ratio=0.5, clip_cov_lb=-10, clip_cov_ub=10)
    b = _kappa("skyrl:clip_cov", rollout, clip_cov_ratio=0.5, clip_cov_lb=-10, clip_cov_ub=10)
    assert torch.equal(a, b)
    assert torch.equal(torch.rand(1), before)


def test_bad_targets_are_named():
    from exchange.libraries import resolve

    with pytest.raises(ExchangeError, match="policy_loss_type='ppo'"):
        resolve("skyrl:ppo")
    with pytest.raises(ExchangeError, match="estimator='gae'.*critic"):
        resolve("skyrl:regular", {"estimator": "gae"})
    with pytest.raises(ExchangeError, match="loss_reduction='token-mean'"):
        resolve("skyrl:regular", {"loss_reduction": "token-mean"})
    with pytest.raises(ExchangeError, match="eps_clip"):
        resolve("skyrl:regular", {"eps_clip": "0.2"})


# ~6 s: the slow tier (the full suite, what CI runs, includes it; -m "not slow" stays under 3 minutes)
@pytest.mark.slow
def test_clip_cov_on_policy_names_the_selection_and_the_pruning():
    """Clip-Cov's covariance mask selects by the advantage and prunes after centring, so
    the catalog's derivation predicts M2 and M4 and a broken (E) on-policy; the checker
    (10 examples, seed 0) finds (Z), (E), (C), (P) broken and names both (issue 30: some
    copies of one token in identical responses get exactly 0)."""
    from exchange.checker import check
    from exchange.libraries import KNOWN_DISAGREEMENTS, resolve
    from exchange.libraries.skyrl.loss import expected

    want = expected("clip_cov")["on_policy"]
    assert {"M2", "M4"} <= want.mechanisms and "exchangeable" in want.breaks
    report = check(resolve("skyrl:clip_cov"), max_examples=10, seed=0, regimes=("on_policy",))
    assert not report.holds("zero_sum", "on_policy") and not report.holds("shared_cancellation", "on_policy")
    assert not report.holds("exchangeable", "on_policy")  # found by bulk fuzzing at 10 examples
    assert set(report.mechanisms_in("on_policy")) == want.mechanisms
    assert "skyrl:clip_cov" not in KNOWN_DISAGREEMENTS


def test_kl_cov_prediction_is_the_catalogs():
    from exchange.libraries.skyrl.loss import expected
    from exchange.objectives import expected_of

    assert expected("kl_cov") == expected_of("kl_cov")
    assert expected("kl_cov")["off_policy"].mechanisms == {"M2", "M6"}
